package rls_test

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit"
	"github.com/stretchr/testify/require"
)

// slowLimiter blocks every Take on key "slow" until release is closed, as a store call does
// while Redis is slow, paused, or serving a request with thousands of descriptors.
type slowLimiter struct{ entered, release chan struct{} }

func (l slowLimiter) Take(ctx context.Context, key string, n int64) (slidelimit.Decision, error) {
	if key == "k=slow" {
		l.entered <- struct{}{}
		<-l.release
	}
	return slidelimit.Decision{Allowed: true, Limit: 100, Remaining: 99}, nil
}

// A reload that arrives while one call waits on its store must not stall every other call. Calls
// held the server's lock shared for their whole decision, and a sync.RWMutex with a writer
// waiting admits no new reader: every call waited for the slow one to end. On Redis a call with
// many descriptors lasts many round trips.
func TestReloadDuringASlowCallStallsNoOtherCall(t *testing.T) {
	yaml := oneLimit
	lim := slowLimiter{entered: make(chan struct{}), release: make(chan struct{})}
	srv := serverOn(t, yaml, lim)
	req := func(v string) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", v)}}
	}
	slowDone := make(chan struct{})
	go func() { defer close(slowDone); _, _ = srv.ShouldRateLimit(context.Background(), req("slow")) }()
	<-lim.entered
	go func() {
		_ = srv.Reload(parse(t, yaml+"  - key: other\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"))
	}()
	time.Sleep(100 * time.Millisecond) // let Reload reach its exclusive lock

	fast := make(chan error, 1)
	go func() { _, err := srv.ShouldRateLimit(context.Background(), req("fast")); fast <- err }()
	select {
	case err := <-fast:
		require.NoError(t, err)
	case <-time.After(2 * time.Second):
		close(lim.release)
		<-slowDone
		t.Fatal("a call on another key waited for a slow call because a reload was pending")
	}
	close(lim.release)
	<-slowDone
}
