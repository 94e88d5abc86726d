package rls_test

import (
	"context"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit/redisstore"
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
	var headers string
	for range 5 {
		r, err := srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "a")}})
		require.NoError(t, err)
		require.Equal(t, rlsv3.RateLimitResponse_OK, r.GetOverallCode())
		for _, h := range r.GetResponseHeadersToAdd() {
			if h.GetKey() == "RateLimit" {
				headers = h.GetValue()
			}
		}
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
	assert.NotContains(t, headers, "r=0", "a fail-open admission tells the client it has no quota left")
}

// A request the failure mode refuses (closed) keeps its RateLimit fields: only its admissions,
// which measured nothing, drop them (TestFailOpenIsNotNearTheLimit).
func TestFailClosedRefusalKeepsItsHeader(t *testing.T) {
	srv := deadRedisServer(t, redisstore.WithOnFailure(redisstore.FailClosed))
	r, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "a")}})
	require.NoError(t, err)
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.GetOverallCode())
	require.NotEmpty(t, r.GetResponseHeadersToAdd(), "a refused request carries no RateLimit field at all")
}
