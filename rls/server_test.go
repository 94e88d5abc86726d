package rls_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

const (
	ok   = "OK"
	over = "OVER_LIMIT"
)

// A key without a value is the default for any value, with one count per distinct value.
func TestDefaultKeyCountsEachValue(t *testing.T) {
	s := serve(t, loadGood(t))
	for range 3 {
		require.Equal(t, []string{ok, ok}, outcome(s.call(t, "basic", 0, desc("remote_address", "10.0.0.1"))))
	}
	r := s.call(t, "basic", 0, desc("remote_address", "10.0.0.1"))
	require.Equal(t, []string{over, over}, outcome(r))
	st := r.GetStatuses()[0]
	require.Equal(t, "per_ip", st.GetCurrentLimit().GetName())
	require.Equal(t, uint32(3), st.GetCurrentLimit().GetRequestsPerUnit())
	require.Equal(t, rlsv3.RateLimitResponse_RateLimit_SECOND, st.GetCurrentLimit().GetUnit())
	require.Equal(t, uint32(0), st.GetLimitRemaining())
	// Another value has its own count.
	r = s.call(t, "basic", 0, desc("remote_address", "10.0.0.2"))
	require.Equal(t, []string{ok, ok}, outcome(r))
	require.Equal(t, uint32(2), r.GetStatuses()[0].GetLimitRemaining())
}

// The most specific match wins: an exact value over the key's default; a value listed without
// a rate_limit is unlimited; nested descriptors match by their whole entry list.
func TestMostSpecificMatchWins(t *testing.T) {
	s := serve(t, loadGood(t))
	// user=vip: 5 per minute, not the default 2.
	for i := range 5 {
		r := s.call(t, "basic", 0, desc("user", "vip"))
		require.Equal(t, []string{ok, ok}, outcome(r), "hit %d", i+1)
		require.Equal(t, uint32(4-i), r.GetStatuses()[0].GetLimitRemaining())
		require.Equal(t, uint32(5), r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
	}
	require.Equal(t, []string{over, over}, outcome(s.call(t, "basic", 0, desc("user", "vip"))))
	// Any other user: the default, 2 per minute.
	for range 2 {
		require.Equal(t, []string{ok, ok}, outcome(s.call(t, "basic", 0, desc("user", "bob"))))
	}
	require.Equal(t, []string{over, over}, outcome(s.call(t, "basic", 0, desc("user", "bob"))))
	// user=internal is listed without a rate_limit: unlimited, with no current_limit.
	for range 10 {
		r := s.call(t, "basic", 0, desc("user", "internal"))
		require.Equal(t, []string{ok, ok}, outcome(r))
		require.Nil(t, r.GetStatuses()[0].GetCurrentLimit())
	}
	// user=carol, path=/x: the nested limit, 1 per second, counted apart from user=carol's.
	require.Equal(t, []string{ok, ok}, outcome(s.call(t, "basic", 0, desc("user", "carol", "path", "/x"))))
	require.Equal(t, []string{over, over}, outcome(s.call(t, "basic", 0, desc("user", "carol", "path", "/x"))))
	require.Equal(t, []string{ok, ok}, outcome(s.call(t, "basic", 0, desc("user", "carol", "path", "/y"))))
	require.Equal(t, []string{ok, ok}, outcome(s.call(t, "basic", 0, desc("user", "carol"))))
	// A value prefix matches the values it starts.
	require.Equal(t, []string{ok, ok}, outcome(s.call(t, "basic", 0, desc("path", "/api/v1"))))
	require.Equal(t, []string{over, over}, outcome(s.call(t, "basic", 0, desc("path", "/api/v1"))))
	require.Nil(t, s.call(t, "basic", 0, desc("path", "/web")).GetStatuses()[0].GetCurrentLimit())
}

// An unknown domain, an unknown descriptor, a request deeper than the config and an explicit
// unlimited are all OK, with no current_limit.
func TestUnknownIsOK(t *testing.T) {
	s := serve(t, loadGood(t))
	for _, c := range []struct {
		domain string
		d      *ratelimitv3.RateLimitDescriptor
	}{
		{"nosuch", desc("remote_address", "10.0.0.1")},
		{"basic", desc("nosuch", "x")},
		{"basic", desc("remote_address", "10.0.0.1", "extra", "y")},
		{"basic", desc("unlimited", "x")},
	} {
		for range 5 {
			r := s.call(t, c.domain, 0, c.d)
			require.Equal(t, []string{ok, ok}, outcome(r), "%s %v", c.domain, c.d)
			require.Nil(t, r.GetStatuses()[0].GetCurrentLimit())
			// envoyproxy/ratelimit tells an unlimited descriptor from an unmatched one by its
			// limit_remaining.
			want := uint32(0)
			if c.d.GetEntries()[0].GetKey() == "unlimited" {
				want = math.MaxUint32
			}
			require.Equal(t, want, r.GetStatuses()[0].GetLimitRemaining(), "%s %v", c.domain, c.d)
		}
	}
}

func TestRequestsPerUnitZeroRefusesAll(t *testing.T) {
	s := serve(t, loadGood(t))
	r := s.call(t, "basic", 0, desc("blocked", "x"))
	require.Equal(t, []string{over, over}, outcome(r))
	require.Equal(t, uint32(0), r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
	require.Nil(t, r.GetStatuses()[0].GetDurationUntilReset(), "waiting never helps")
}

// hits_addend is the cost: the request's (0 means 1), overridden by a descriptor's own.
func TestHitsAddendIsTheCost(t *testing.T) {
	s := serve(t, loadGood(t))
	r := s.call(t, "basic", 2, desc("a", "1"))
	require.Equal(t, uint32(3), r.GetStatuses()[0].GetLimitRemaining())
	r = s.call(t, "basic", 0, desc("a", "1"))
	require.Equal(t, uint32(2), r.GetStatuses()[0].GetLimitRemaining(), "0 means 1")
	r = s.call(t, "basic", 1, withHits(desc("a", "1"), 2))
	require.Equal(t, uint32(0), r.GetStatuses()[0].GetLimitRemaining(), "the descriptor's own hits_addend wins")
	// A cost above what is left is refused and consumes nothing: the 5 left by a new key stay.
	r = s.call(t, "basic", 6, desc("a", "2"))
	require.Equal(t, []string{over, over}, outcome(r))
	require.Nil(t, r.GetStatuses()[0].GetDurationUntilReset(), "a cost above the limit is never admitted")
	r = s.call(t, "basic", 5, desc("a", "2"))
	require.Equal(t, []string{ok, ok}, outcome(r))
	require.Equal(t, uint32(0), r.GetStatuses()[0].GetLimitRemaining())
}

// A descriptor's own hits_addend of 0 is a check, as in envoyproxy/ratelimit: it takes nothing and
// is never refused, even with nothing left, and its status says what remains. The request's 0
// still means 1.
func TestDescriptorHitsAddendZeroIsACheck(t *testing.T) {
	s := serve(t, loadGood(t))
	for range 3 {
		r := s.call(t, "basic", 0, withHits(desc("a", "q"), 0))
		require.Equal(t, []string{ok, ok}, outcome(r))
		require.Equal(t, uint32(5), r.GetStatuses()[0].GetLimitRemaining(), "a check takes nothing")
	}
	r := s.call(t, "basic", 5, desc("a", "q"))
	require.Equal(t, []string{ok, ok}, outcome(r))
	r = s.call(t, "basic", 0, withHits(desc("a", "q"), 0))
	require.Equal(t, []string{ok, ok}, outcome(r), "a check is not refused with nothing left")
	require.Equal(t, uint32(0), r.GetStatuses()[0].GetLimitRemaining())
	require.Nil(t, r.GetStatuses()[0].GetDurationUntilReset())
	require.Equal(t, []string{over, over}, outcome(s.call(t, "basic", 0, desc("a", "q"))), "the request's 0 means 1")
	// requests_per_unit 0 refuses every hit; a check of none is OK, with nothing remaining.
	r = s.call(t, "basic", 0, withHits(desc("blocked", "x"), 0))
	require.Equal(t, []string{ok, ok}, outcome(r))
	require.Equal(t, uint32(0), r.GetStatuses()[0].GetLimitRemaining())
	m := scrape(t, s.srv)
	require.Contains(t, m, `slidelimit_rls_hits_total{descriptor="a",domain="basic"} 6`, "checks count no hits")
}

// One huge hits_addend counts in the hit counters as the largest cost, 2^32, so that the counters
// still count the hits after it (a float64 past 2^53 no longer adds 1).
func TestHugeHitsAddendIsClampedInTheMetrics(t *testing.T) {
	s := serve(t, loadGood(t))
	s.call(t, "basic", 0, desc("a", "h"))
	r := s.call(t, "basic", 0, withHits(desc("a", "h"), math.MaxUint64))
	require.Equal(t, []string{over, over}, outcome(r))
	s.call(t, "basic", 0, desc("a", "h"))
	m := scrape(t, s.srv)
	require.Contains(t, m, `slidelimit_rls_hits_total{descriptor="a",domain="basic"} 4.294967298e+09`)
	require.Contains(t, m, `slidelimit_rls_over_limit_total{descriptor="a",domain="basic"} 4.294967296e+09`)
}

// A request refused on any descriptor consumes nothing on any of them.
func TestAllOrNothing(t *testing.T) {
	s := serve(t, loadGood(t))
	// b=1 allows 2; a=1 allows 5. Two requests on both use up b.
	for range 2 {
		require.Equal(t, []string{ok, ok, ok}, outcome(s.call(t, "basic", 0, desc("a", "1"), desc("b", "1"))))
	}
	// Three more are refused on b, and a is untouched by them.
	for range 3 {
		r := s.call(t, "basic", 0, desc("a", "1"), desc("b", "1"))
		require.Equal(t, []string{over, ok, over}, outcome(r))
		require.Equal(t, uint32(3), r.GetStatuses()[0].GetLimitRemaining(), "a reports what it has left")
	}
	// The refused descriptor first: the same.
	r := s.call(t, "basic", 0, desc("b", "1"), desc("a", "1"))
	require.Equal(t, []string{over, over, ok}, outcome(r))
	// a still has the 3 that the first two requests left it.
	for i := range 3 {
		r := s.call(t, "basic", 0, desc("a", "1"))
		require.Equal(t, []string{ok, ok}, outcome(r))
		require.Equal(t, uint32(2-i), r.GetStatuses()[0].GetLimitRemaining())
	}
	require.Equal(t, []string{over, over}, outcome(s.call(t, "basic", 0, desc("a", "1"))))
}

// duration_until_reset of a refused hit is the exact time until it would be admitted: for the
// sliding counter at 3 per second, three hits at the start of a window leave the fourth to wait
// until the previous window's weight has decayed below 2/3 of a hit: 1.001s.
func TestDurationUntilResetIsExact(t *testing.T) {
	s := serve(t, loadGood(t))
	for range 3 {
		s.call(t, "basic", 0, desc("remote_address", "10.0.0.1"))
	}
	r := s.call(t, "basic", 0, desc("remote_address", "10.0.0.1"))
	require.Equal(t, []string{over, over}, outcome(r))
	require.Equal(t, 1001*time.Millisecond, r.GetStatuses()[0].GetDurationUntilReset().AsDuration())
	// A millisecond early is still refused, with a millisecond to go; on time it is admitted.
	s.advance(1000 * time.Millisecond)
	r = s.call(t, "basic", 0, desc("remote_address", "10.0.0.1"))
	require.Equal(t, []string{over, over}, outcome(r))
	require.Equal(t, time.Millisecond, r.GetStatuses()[0].GetDurationUntilReset().AsDuration())
	s.advance(time.Millisecond)
	require.Equal(t, []string{ok, ok}, outcome(s.call(t, "basic", 0, desc("remote_address", "10.0.0.1"))))
}

// Shadow mode reports OVER_LIMIT in the metrics only; the caller sees OK, and the hit is counted
// as the admitted hit it is.
func TestShadowMode(t *testing.T) {
	s := serve(t, loadGood(t))
	require.Equal(t, []string{ok, ok}, outcome(s.call(t, "basic", 0, desc("shadow", "x"))))
	r := s.call(t, "basic", 0, desc("shadow", "x"))
	require.Equal(t, []string{ok, ok}, outcome(r))
	// With another descriptor that admits, the request is admitted and that one counts it.
	r = s.call(t, "basic", 0, desc("shadow", "x"), desc("b", "s"))
	require.Equal(t, []string{ok, ok, ok}, outcome(r))
	require.Equal(t, uint32(1), r.GetStatuses()[1].GetLimitRemaining())
	m := scrape(t, s.srv)
	require.Contains(t, m, `slidelimit_rls_shadow_mode_total{descriptor="shadow",domain="basic"} 2`)
	require.Contains(t, m, `slidelimit_rls_over_limit_total{descriptor="shadow",domain="basic"} 2`)
	require.Contains(t, m, `slidelimit_rls_hits_total{descriptor="shadow",domain="basic"} 3`)
}

func TestMetrics(t *testing.T) {
	s := serve(t, loadGood(t))
	for range 6 {
		s.call(t, "basic", 0, desc("a", "m"))
	}
	s.call(t, "basic", 0, desc("detailed", "v1"))
	s.call(t, "basic", 0, desc("detailed", "v2"))
	s.call(t, "basic", 0, desc("detailed", "v2"))
	m := scrape(t, s.srv)
	// 5 allowed per second: the 6th is over; the 5th left nothing, the only one under a fifth.
	require.Contains(t, m, `slidelimit_rls_hits_total{descriptor="a",domain="basic"} 6`)
	require.Contains(t, m, `slidelimit_rls_over_limit_total{descriptor="a",domain="basic"} 1`)
	require.Contains(t, m, `slidelimit_rls_near_limit_total{descriptor="a",domain="basic"} 1`)
	// detailed_metric: the request's values name the series.
	require.Contains(t, m, `slidelimit_rls_hits_total{descriptor="detailed_v1",domain="basic"} 1`)
	require.Contains(t, m, `slidelimit_rls_hits_total{descriptor="detailed_v2",domain="basic"} 2`)
	require.Contains(t, m, `slidelimit_rls_over_limit_total{descriptor="detailed_v2",domain="basic"} 1`)
	require.Contains(t, m, "slidelimit_rls_decision_seconds_count 9")
}

// The extensions: a window of any duration, reported as a unit and multiplier where it is a whole
// number of one; and another policy.
func TestWindowAndPolicy(t *testing.T) {
	s := serve(t, loadGood(t))
	for range 2 {
		s.call(t, "basic", 0, desc("ten_seconds", "x"))
	}
	r := s.call(t, "basic", 0, desc("ten_seconds", "x"))
	require.Equal(t, []string{over, over}, outcome(r))
	cl := r.GetStatuses()[0].GetCurrentLimit()
	require.Equal(t, rlsv3.RateLimitResponse_RateLimit_SECOND, cl.GetUnit())
	require.Equal(t, uint32(10), cl.GetUnitMultiplier().GetValue())
	require.Equal(t, 10001*time.Millisecond, r.GetStatuses()[0].GetDurationUntilReset().AsDuration())

	r = s.call(t, "basic", 0, desc("half_second", "x"))
	require.Equal(t, rlsv3.RateLimitResponse_RateLimit_UNKNOWN, r.GetStatuses()[0].GetCurrentLimit().GetUnit())

	// The fixed window forgets its count at the boundary, where the sliding counter would not.
	s.advance(999 * time.Millisecond)
	for range 2 {
		require.Equal(t, []string{ok, ok}, outcome(s.call(t, "basic", 0, desc("fixed", "x"))))
	}
	r = s.call(t, "basic", 0, desc("fixed", "x"))
	require.Equal(t, []string{over, over}, outcome(r))
	require.Equal(t, time.Millisecond, r.GetStatuses()[0].GetDurationUntilReset().AsDuration())
	s.advance(time.Millisecond)
	for range 2 {
		require.Equal(t, []string{ok, ok}, outcome(s.call(t, "basic", 0, desc("fixed", "x"))))
	}
}

// A limit that replaces another by name: a request matching both applies only the replacing one.
func TestReplaces(t *testing.T) {
	s := serve(t, loadGood(t))
	require.Equal(t, []string{ok, ok}, outcome(s.call(t, "basic", 0, desc("plan", "free"))))
	require.Equal(t, []string{over, over}, outcome(s.call(t, "basic", 0, desc("plan", "free"))))
	for range 5 {
		r := s.call(t, "basic", 0, desc("plan", "free"), desc("plan", "override"))
		require.Equal(t, []string{ok, ok, ok}, outcome(r))
		require.Nil(t, r.GetStatuses()[0].GetCurrentLimit(), "the replaced limit is not applied")
		require.Equal(t, "override", r.GetStatuses()[1].GetCurrentLimit().GetName())
	}
}

func TestHeaders(t *testing.T) {
	s := serve(t, loadGood(t), rls.WithHeaders(true))
	r := s.call(t, "basic", 0, desc("remote_address", "10.0.0.9"), desc("ten_seconds", "h"), desc("nosuch", "x"))
	h := fieldsOf(r)
	require.Equal(t, `"per_ip";q=3;w=1, "ten_seconds";q=2;w=10`, h["RateLimit-Policy"])
	require.Regexp(t, `^"per_ip";r=2;t=\d+, "ten_seconds";r=1;t=\d+$`, h["RateLimit"])
	// A descriptor in shadow mode has no item, over its limit or not; alone, it has no headers.
	for range 2 {
		r = s.call(t, "basic", 0, desc("shadow", "h"), desc("ten_seconds", "s"))
	}
	h = fieldsOf(r)
	require.Equal(t, `"ten_seconds";q=2;w=10`, h["RateLimit-Policy"])
	require.Regexp(t, `^"ten_seconds";r=0;t=\d+$`, h["RateLimit"])
	require.Empty(t, s.call(t, "basic", 0, desc("shadow", "h")).GetResponseHeadersToAdd())
	// A refused request gives back what its other descriptors took: a limit left whole has
	// nothing to wait for, and one still partly used keeps its reset time.
	s = serveFrom(t, time.Now().UnixMilli(), loadGood(t), rls.WithHeaders(true))
	r = s.call(t, "basic", 0, desc("ten_seconds", "fresh"), desc("ten_seconds", "used"), desc("blocked", "b"))
	require.Equal(t, over, outcome(r)[0])
	s.call(t, "basic", 0, desc("ten_seconds", "used"))
	r = s.call(t, "basic", 0, desc("ten_seconds", "fresh"), desc("ten_seconds", "used"), desc("blocked", "b"))
	h = fieldsOf(r)
	// The sliding counter's reset time depends on where now falls in its 10s window.
	require.Regexp(t, `^"ten_seconds";r=2;t=0, "ten_seconds";r=1;t=([1-9]|1[0-9]|20)$`, h["RateLimit"])
	// Without the option, no headers.
	plain := serve(t, loadGood(t))
	require.Empty(t, plain.call(t, "basic", 0, desc("remote_address", "10.0.0.9")).GetResponseHeadersToAdd())
}

func TestBadRequests(t *testing.T) {
	s := serve(t, loadGood(t))
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	neg := desc("a", "1")
	neg.IsNegativeHits = true
	for _, c := range []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "1")}}, "rls: domain is empty"},
		{&rlsv3.RateLimitRequest{Domain: "basic"}, "rls: no descriptors"},
		{&rlsv3.RateLimitRequest{Domain: "basic", Descriptors: []*ratelimitv3.RateLimitDescriptor{neg}}, "rls: descriptor 0: is_negative_hits is not supported"},
	} {
		_, err := s.client.ShouldRateLimit(ctx, c.req)
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		require.Equal(t, c.want, status.Convert(err).Message())
	}
}

func TestHealth(t *testing.T) {
	s := serve(t, loadGood(t))
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	hc := healthpb.NewHealthClient(s.conn)
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, res.GetStatus())
	}
	// Closing the server (while gRPC still serves) turns health NOT_SERVING and calls UNAVAILABLE.
	require.NoError(t, s.srv.Close())
	res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, res.GetStatus())
	_, err = s.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "basic", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "1")}})
	require.Equal(t, codes.Unavailable, status.Code(err))
	// Every call, a malformed one too.
	_, err = s.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{})
	require.Equal(t, codes.Unavailable, status.Code(err), "an empty request after Close")
}

// Under concurrent callers, exactly the limit is admitted, and refused requests on two
// descriptors leave the other untouched.
func TestConcurrentExact(t *testing.T) {
	s := serve(t, parse(t, `
domain: c
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 500}
  - key: tight
    rate_limit: {unit: hour, requests_per_unit: 100}
`))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				ctx, cancel := context.WithTimeout(context.Background(), failsafe)
				r, err := s.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "c",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "x"), desc("tight", "y")}})
				cancel()
				if err != nil {
					t.Errorf("caller %d call %d: %v", g, i, err)
					return
				}
				if r.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(100), admitted.Load())
	// k counted only the 100 admitted of the 800 requests: 400 left.
	r := s.call(t, "c", 0, desc("k", "x"))
	require.Equal(t, uint32(399), r.GetStatuses()[0].GetLimitRemaining(), fmt.Sprint(outcome(r)))
}

// Descriptors of one request that name the same limit and key are decided as one take of their
// costs summed, so each status tells what holds after the request: the same remaining count, and
// no wait where the sum is above the limit, which waiting never admits.
func TestDuplicateDescriptorsDecidedTogether(t *testing.T) {
	s := serve(t, loadGood(t)) // remote_address: 3 a second
	ip := func() *ratelimitv3.RateLimitDescriptor { return desc("remote_address", "10.0.0.7") }
	r := s.call(t, "basic", 0, ip(), ip())
	require.Equal(t, []string{ok, ok, ok}, outcome(r))
	for _, st := range r.GetStatuses() {
		require.Equal(t, uint32(1), st.GetLimitRemaining(), "after both")
	}
	s.advance(time.Second + time.Millisecond)
	s.advance(time.Second)
	r = s.call(t, "basic", 2, ip(), ip()) // 4 of a limit of 3
	require.Equal(t, []string{over, over, over}, outcome(r))
	for _, st := range r.GetStatuses() {
		require.Equal(t, uint32(3), st.GetLimitRemaining(), "nothing was taken")
		require.Nil(t, st.GetDurationUntilReset(), "waiting never admits 4 of 3")
	}
	r = s.call(t, "basic", 0, ip())
	require.Equal(t, []string{ok, ok}, outcome(r))
	require.Equal(t, uint32(2), r.GetStatuses()[0].GetLimitRemaining())
	require.Contains(t, scrape(t, s.srv), `slidelimit_rls_hits_total{descriptor="remote_address",domain="basic"} 7`, "each descriptor's own hits")
}

// A check twinned with a refused descriptor (the same limit and entries) is still never refused:
// the twins are decided together, the request is OVER_LIMIT for the other's hits, and the check's
// status is OK with what remains, in either order.
func TestCheckBesideARefusedTwin(t *testing.T) {
	s := serve(t, loadGood(t)) // remote_address: 3 a second
	ip := func() *ratelimitv3.RateLimitDescriptor { return desc("remote_address", "10.0.0.9") }
	r := s.call(t, "basic", 0, withHits(ip(), 5), withHits(ip(), 0))
	require.Equal(t, []string{over, over, ok}, outcome(r))
	r = s.call(t, "basic", 0, withHits(ip(), 0), withHits(ip(), 5))
	require.Equal(t, []string{over, ok, over}, outcome(r))
	require.Equal(t, uint32(3), r.GetStatuses()[0].GetLimitRemaining(), "the check says what remains")
	require.Nil(t, r.GetStatuses()[0].GetDurationUntilReset())
	require.Contains(t, scrape(t, s.srv), `slidelimit_rls_over_limit_total{descriptor="remote_address",domain="basic"} 10`, "the refused twins' hits, 5 each")
}

// Reset times are on the backend's clock: WithNow gives the headers that clock's reading, so a
// manual clock far from the wall clock still gives t the seconds left on it.
func TestHeadersOnTheBackendsClock(t *testing.T) {
	const start = 1_000_000_003_000 // 3 s into a 10 s window, in 2001
	var s *served
	now := func() time.Time { return time.UnixMilli(s.clk.Now()) }
	s = serveFrom(t, start, loadGood(t), rls.WithHeaders(true), rls.WithNow(now))
	header := func(r *rlsv3.RateLimitResponse) string { return fieldsOf(r)["RateLimit"] }
	// Both report the end of the current window (docs/policies.md): a second's fixed window ends
	// 1 s on, the sliding counter's 10 s window 7 s on.
	require.Equal(t, `"fixed";r=1;t=1`, header(s.call(t, "basic", 0, desc("fixed", "a"))))
	require.Equal(t, `"ten_seconds";r=1;t=7`, header(s.call(t, "basic", 0, desc("ten_seconds", "a"))))
	s.advance(2500 * time.Millisecond)
	require.Equal(t, `"ten_seconds";r=0;t=5`, header(s.call(t, "basic", 0, desc("ten_seconds", "a"))))

	_, err := rls.NewServer(loadGood(t), rls.WithNow(nil))
	require.ErrorContains(t, err, "WithNow(nil)")
	_, err = rls.NewServer(loadGood(t), rls.WithBackend(rls.BackendFunc(nil)))
	require.ErrorContains(t, err, "WithBackend(nil)", "a nil BackendFunc is a nil backend")
	_, err = rls.NewServer(loadGood(t), rls.WithHeaders(true), nil)
	require.EqualError(t, err, "rls: NewServer: option 1 is nil", "a nil option is refused, not called")
}

// The series of detailed_metric values are capped: past WithMaxDetailedSeries, a value not seen
// before is counted under its descriptor's config path, one line is logged, and the values that
// have series keep them. 0 gives none; a negative cap is refused.
func TestDetailedMetricCap(t *testing.T) {
	s := serve(t, loadGood(t), rls.WithMaxDetailedSeries(2))
	for _, v := range []string{"v1", "v2", "v3", "v4", "v1", "v3"} {
		s.call(t, "basic", 0, desc("detailed", v))
	}
	m := scrape(t, s.srv)
	require.Contains(t, m, `slidelimit_rls_hits_total{descriptor="detailed_v1",domain="basic"} 2`)
	require.Contains(t, m, `slidelimit_rls_hits_total{descriptor="detailed_v2",domain="basic"} 1`)
	require.Contains(t, m, `slidelimit_rls_hits_total{descriptor="detailed",domain="basic"} 3`, "v3 twice and v4, under the config path")
	require.Contains(t, m, `slidelimit_rls_over_limit_total{descriptor="detailed",domain="basic"} 1`, "v3's second hit, over its limit of 1 a second")
	require.NotContains(t, m, "detailed_v3")
	require.NotContains(t, m, "detailed_v4")
	require.Equal(t, 1, strings.Count(s.log.String(), "detailed_metric: 2 series"), s.log.String())

	none := serve(t, loadGood(t), rls.WithMaxDetailedSeries(0))
	none.call(t, "basic", 0, desc("detailed", "v1"))
	m = scrape(t, none.srv)
	require.NotContains(t, m, "detailed_v1")
	require.Contains(t, m, `slidelimit_rls_hits_total{descriptor="detailed",domain="basic"} 1`)
	require.NotContains(t, none.log.String(), "detailed_metric:", "a cap of 0 is asked for: nothing to warn of")

	_, err := rls.NewServer(loadGood(t), rls.WithMaxDetailedSeries(-1))
	require.ErrorContains(t, err, "WithMaxDetailedSeries(-1)")
}

// A detailed_metric value whose label is longer than MaxDetailedValueBytes gets no series of its
// own: its hits are counted under the config path, with one log line, so that a client's values
// of a megabyte each cannot make every scrape hundreds of megabytes. A label of exactly the bound
// still gets its series.
func TestDetailedMetricValueBytesAreBounded(t *testing.T) {
	s := serve(t, loadGood(t))
	prefix := "detailed_" // the label's segment for the key "detailed"
	fits := strings.Repeat("a", rls.MaxDetailedValueBytes-len(prefix))
	long := strings.Repeat("b", rls.MaxDetailedValueBytes-len(prefix)+1)
	huge := strings.Repeat("c", 1<<20)
	for _, v := range []string{fits, long, huge, long} {
		s.call(t, "basic", 0, desc("detailed", v))
	}
	// The scrape is checked without printing it: a failure would hold a megabyte of "c".
	m := scrape(t, s.srv)
	require.Less(t, len(m), 64<<10, "the scrape holds a value past the bound")
	require.Contains(t, m, `slidelimit_rls_hits_total{descriptor="`+prefix+fits+`",domain="basic"} 1`)
	require.Contains(t, m, `slidelimit_rls_hits_total{descriptor="detailed",domain="basic"} 3`, "the long values, under the config path")
	require.NotContains(t, m, prefix+"b")
	require.Equal(t, 1, strings.Count(s.log.String(), "detailed_metric: a request value of"), s.log.String())
	require.Contains(t, s.log.String(), fmt.Sprintf("a request value of %d bytes is longer than %d", len(prefix+long), rls.MaxDetailedValueBytes))
}

// A detailed_metric descriptor's values name its series, and a caller in the same process may pass
// values that are not UTF-8 (gRPC's decoding refuses them): the label gets U+FFFD for each bad
// byte sequence, and the call neither panics nor loses its decision.
func TestDetailedMetricOfBytesNotUTF8(t *testing.T) {
	s := serve(t, loadGood(t))
	req := &rlsv3.RateLimitRequest{Domain: "basic", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("detailed", "caf\xe9")}}
	var r *rlsv3.RateLimitResponse
	require.NotPanics(t, func() {
		var err error
		r, err = s.srv.ShouldRateLimit(context.Background(), req)
		require.NoError(t, err)
	})
	require.Equal(t, []string{ok, ok}, outcome(r))
	require.Contains(t, scrape(t, s.srv), "slidelimit_rls_hits_total{descriptor=\"detailed_caf\uFFFD\",domain=\"basic\"} 1")
}

// A bucket descriptor given back its hit, because another descriptor refused, has its header's t
// read back: the bucket is full again as soon as before the request. It said one more hit's
// refill later, as if the hit were still taken.
func TestGivenBackBucketHeaderIsReadBack(t *testing.T) {
	const start = 1_000_000_003_000
	var s *served
	now := func() time.Time { return time.UnixMilli(s.clk.Now()) }
	s = serveFrom(t, start, parse(t, `domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 60, policy: token-bucket, name: bucket}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1, name: one}
`), rls.WithHeaders(true), rls.WithNow(now))
	r := s.call(t, "d", 0, desc("a", "x"), desc("b", "x"))
	require.Equal(t, []string{ok, ok, ok}, outcome(r))
	require.Equal(t, `"bucket";r=59;t=1, "one";r=0;t=17`, fieldsOf(r)["RateLimit"])
	r = s.call(t, "d", 0, desc("a", "x"), desc("b", "x"))
	require.Equal(t, []string{over, ok, over}, outcome(r))
	require.Contains(t, fieldsOf(r)["RateLimit"], `"bucket";r=59;t=1`, "the bucket's hit was given back")
}
