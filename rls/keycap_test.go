package rls_test

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A new key refused at the key cap is OVER_LIMIT, and its response lists the limit's policy but
// no RateLimit item: the refusal judged no quota, and r=0 would tell the client one is spent. A
// key tracked before the cap was reached keeps its quota and its item.
func TestKeyCapRefusalListsNoRemaining(t *testing.T) {
	srv, err := rls.NewServer(parse(t, oneLimit), rls.WithHeaders(true), rls.WithBackend(rls.EngineBackend(engine.WithMaxKeys(1))))
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	call := func(value string) (rlsv3.RateLimitResponse_Code, map[string]string) {
		t.Helper()
		r, err := srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", value)}})
		require.NoError(t, err)
		return r.GetOverallCode(), fieldsOf(r)
	}

	code, h := call("a")
	require.Equal(t, rlsv3.RateLimitResponse_OK, code)
	assert.Regexp(t, `^"k";r=99;t=\d+$`, h["RateLimit"])

	code, h = call("b") // a second key, past the cap of one
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, code)
	assert.Equal(t, `"k";q=100;w=60`, h["RateLimit-Policy"])
	_, listed := h["RateLimit"]
	assert.False(t, listed, "a key-cap refusal lists a remaining quota: %q", h["RateLimit"])

	code, h = call("a")
	require.Equal(t, rlsv3.RateLimitResponse_OK, code)
	assert.Regexp(t, `^"k";r=98;t=\d+$`, h["RateLimit"])
}

// A check (hits_addend 0) of a new key past the cap is refused by the engine, but a check is never
// refused: its status and the request's are OK, alone or beside an admitted descriptor, which
// keeps its unit.
func TestCheckPastTheKeyCapIsOK(t *testing.T) {
	srv, err := rls.NewServer(parse(t, oneLimit), rls.WithBackend(rls.EngineBackend(engine.WithMaxKeys(1))))
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	call := func(ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		r, err := srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: ds})
		require.NoError(t, err)
		return r
	}
	require.Equal(t, rlsv3.RateLimitResponse_OK, call(desc("k", "a")).GetOverallCode()) // the cap's one key
	r := call(withHits(desc("k", "b"), 0))
	assert.Equal(t, []string{ok, ok}, outcome(r), "a check alone")
	r = call(desc("k", "a"), withHits(desc("k", "b"), 0))
	assert.Equal(t, []string{ok, ok, ok}, outcome(r), "a check beside an admitted hit")
	assert.Equal(t, uint32(98), r.GetStatuses()[0].GetLimitRemaining(), "the admitted hit kept its unit: 100 - 2")
}
