package rls_test

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// While Redis is away and the failure mode admits every hit, nothing is measured: such hits were
// counted as near the limit, and with headers each response told the client r=0 (no quota left)
// though it was admitted without a limit. Redis is a port where nothing listens.
func TestFailOpenIsNotNearTheLimit(t *testing.T) {
	client, err := redisstore.NewClient("redis://127.0.0.1:1/0")
	require.NoError(t, err)
	defer client.Close()
	cfg := parse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n")
	srv, err := rls.NewServer(cfg, rls.WithHeaders(true),
		rls.WithBackend(rls.RedisBackend(client, redisstore.WithTimeout(20*time.Millisecond))))
	require.NoError(t, err)
	defer srv.Close()
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
