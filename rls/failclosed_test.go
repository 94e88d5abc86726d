package rls_test

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/require"
)

// A request the failure mode refuses (closed) keeps its RateLimit fields: only its admissions,
// which measured nothing, drop them (TestFailOpenIsNotNearTheLimit).
func TestFailClosedRefusalKeepsItsHeader(t *testing.T) {
	client, err := redisstore.NewClient("redis://127.0.0.1:1/0")
	require.NoError(t, err)
	defer client.Close()
	cfg := parse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n")
	srv, err := rls.NewServer(cfg, rls.WithHeaders(true),
		rls.WithBackend(rls.RedisBackend(client, redisstore.WithTimeout(20*time.Millisecond), redisstore.WithOnFailure(redisstore.FailClosed))))
	require.NoError(t, err)
	defer srv.Close()
	r, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "a")}})
	require.NoError(t, err)
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.GetOverallCode())
	require.NotEmpty(t, r.GetResponseHeadersToAdd(), "a refused request carries no RateLimit field at all")
}
