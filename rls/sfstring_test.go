package rls_test

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A header item's name holds printable ASCII only: other bytes were dropped, so the limits of
// "café" and "caf" both reported as "city_caf". They are percent-encoded now, '%' too.
func TestHeaderNamesKeepNonASCIIApart(t *testing.T) {
	cfg := parse(t, `domain: d
descriptors:
  - key: city
    value: café
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: city
    value: caf
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: city
    value: "50%"
    rate_limit: {unit: minute, requests_per_unit: 30}
`)
	srv, err := rls.NewServer(cfg, rls.WithHeaders(true))
	require.NoError(t, err)
	defer srv.Close()
	policyOf := func(v string) string {
		r, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("city", v)}})
		require.NoError(t, err)
		return fieldsOf(r)["RateLimit-Policy"]
	}
	assert.Equal(t, `"city_caf%C3%A9";q=10;w=60`, policyOf("café"))
	assert.Equal(t, `"city_caf";q=20;w=60`, policyOf("caf"))
	assert.Equal(t, `"city_50%25";q=30;w=60`, policyOf("50%"))
}
