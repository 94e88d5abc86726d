package rls_test

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/redisstore/batched"
	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// While Redis is away and the failure mode admits every hit, nothing is measured: such hits were
// counted as near the limit, and with headers each response told the client r=0 (no quota left)
// though it was admitted without a limit. Redis is a port where nothing listens.
func TestFailOpenIsNotNearTheLimit(t *testing.T) {
	srv := deadRedisServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	var headers, policies string
	for range 5 {
		r, err := srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "a")}})
		require.NoError(t, err)
		require.Equal(t, rlsv3.RateLimitResponse_OK, r.GetOverallCode())
		h := fieldsOf(r)
		headers, policies = h["RateLimit"], h["RateLimit-Policy"]
	}
	line := func(prefix string) string {
		for _, l := range strings.Split(scrape(t, srv), "\n") {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		return ""
	}
	assert.Equal(t, `slidelimit_rls_backend_errors_total 5`, line("slidelimit_rls_backend_errors_total "))
	assert.Equal(t, `slidelimit_rls_near_limit_total{descriptor="k",domain="d"} 0`, line("slidelimit_rls_near_limit_total{"), "fail-open hits counted as near the limit")
	assert.Empty(t, headers, "a fail-open admission tells the client of a quota nobody judged")
	assert.Equal(t, `"k";q=100;w=60`, policies, "the limit is known while Redis is down")
}

// A descriptor the failure mode refuses (closed) while Redis is down keeps its RateLimit-Policy
// item, as the limit is known, but has no RateLimit item: its quota was never judged, and the
// item said r=0 with the circuit breaker's wait as t, which no quota resets at. So a refusal
// by the failure mode reads as the proxy's does, and as a key-cap refusal's.
func TestFailClosedRefusalListsNoRemaining(t *testing.T) {
	srv := deadRedisServer(t, redisstore.WithOnFailure(redisstore.FailClosed))
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	r, err := srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "a")}})
	require.NoError(t, err)
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.GetOverallCode())
	h := fieldsOf(r)
	assert.Equal(t, `"k";q=100;w=60`, h["RateLimit-Policy"])
	_, listed := h["RateLimit"]
	assert.False(t, listed, "a failure-mode refusal lists a remaining quota: %q", h["RateLimit"])
}

// A descriptor decided by the batched mode's local share while Redis is away (ErrOffline) is
// not counted near the limit, and with headers lists its limit in RateLimit-Policy but has no
// RateLimit item: its Remaining is the replica's share's, not the quota's the policy item
// advertises. Here a fleet of 4 was last heard of, so the share is 25 of 100, and 21 hits leave
// 4, less than a fifth of either.
func TestBatchedLocalIsNotNearTheLimit(t *testing.T) {
	client, err := redisstore.NewClient("redis://127.0.0.1:1/0")
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	var lims []*batched.Limiter
	t.Cleanup(func() {
		for _, l := range lims {
			l.Close()
		}
	})
	srv, err := rls.NewServer(parse(t, oneLimit), rls.WithHeaders(true), rls.WithBackend(rls.BackendFunc(func(name string, p policy.Policy) (slidelimit.Limiter, error) {
		l, err := batched.New(client, name, p, batched.WithTimeout(20*time.Millisecond), batched.WithInitialFleetSize(4))
		if err == nil {
			lims = append(lims, l)
		}
		return l, err
	})))
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	r, err := srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("k", "a"), 21)}})
	require.NoError(t, err)
	require.Equal(t, rlsv3.RateLimitResponse_OK, r.GetOverallCode())
	require.Equal(t, uint32(4), r.GetStatuses()[0].GetLimitRemaining(), "decided on the share of 25")
	h := fieldsOf(r)
	assert.NotContains(t, h, "RateLimit", "the share's figures listed as the quota's")
	assert.Equal(t, `"k";q=100;w=60`, h["RateLimit-Policy"])
	near := ""
	for _, l := range strings.Split(scrape(t, srv), "\n") {
		if strings.HasPrefix(l, "slidelimit_rls_near_limit_total{") {
			near = l
		}
	}
	assert.Equal(t, `slidelimit_rls_near_limit_total{descriptor="k",domain="d"} 0`, near, "the share's hits counted near the limit")
}
