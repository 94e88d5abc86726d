package rls_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowRefunds admits every key but "no", which it refuses, and gives units back as a store does:
// each Refund a round trip (here 5 ms). It records how many refunds ran at once.
type slowRefunds struct{ now, most, given atomic.Int64 }

func (l *slowRefunds) Take(_ context.Context, key string, n int64) (slidelimit.Decision, error) {
	if key == "k=no" {
		return slidelimit.Decision{Limit: 1, Reason: slidelimit.ReasonLimited, RetryAfter: time.Second}, nil
	}
	return slidelimit.Decision{Allowed: true, Limit: 100, Remaining: 99, Counted: n}, nil
}

func (l *slowRefunds) Refund(_ context.Context, _ string, n int64, _ slidelimit.Decision) (int64, error) {
	at := l.now.Add(1)
	for m := l.most.Load(); at > m && !l.most.CompareAndSwap(m, at); m = l.most.Load() {
	}
	time.Sleep(5 * time.Millisecond)
	l.now.Add(-1)
	l.given.Add(n)
	return n, nil
}

// A refusal gives back what the other descriptors took as the takes were made, many at once: one
// after another, 200 descriptors on Redis cost 200 round trips after the refusal.
func TestRefusalGivesBackAtOnce(t *testing.T) {
	lim := &slowRefunds{}
	srv := serverOn(t, oneLimit, lim)
	descs := []*ratelimitv3.RateLimitDescriptor{desc("k", "no")}
	for i := range 200 {
		descs = append(descs, desc("k", fmt.Sprint(i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	r, err := srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs})
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.GetOverallCode())
	// A limiter that gives units back has every descriptor taken at once: all 200 admitted, and
	// all given back, several at a time.
	assert.Equal(t, int64(200), lim.given.Load(), "units given back")
	assert.Greater(t, lim.most.Load(), int64(1), "refunds run at once")
}

// failingRefunds is slowRefunds whose store fails every Refund.
type failingRefunds struct{ slowRefunds }

func (l *failingRefunds) Refund(context.Context, string, int64, slidelimit.Decision) (int64, error) {
	return 0, errors.New("redis: connection refused")
}

// A refund the store fails leaves the units charged; the backend error metric counts it, where
// nothing did.
func TestFailedRefundsAreCounted(t *testing.T) {
	lim := &failingRefunds{}
	srv := serverOn(t, oneLimit, lim)
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	r, err := srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("k", "no"), desc("k", "a"), desc("k", "b")}})
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.GetOverallCode())
	assert.Contains(t, scrape(t, srv), "slidelimit_rls_backend_errors_total 2\n", "the two failed refunds")
}
