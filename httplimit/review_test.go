package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/policy"
)

// peeking is a Limiter outside the engine that always answers d, counts its Take calls, and
// reports peek for a limit it was not asked.
type peeking struct {
	d, peek slidelimit.Decision
	takes   atomic.Int64
}

func (p *peeking) Take(context.Context, string, int64) (slidelimit.Decision, error) {
	p.takes.Add(1)
	return p.d, nil
}

func (p *peeking) Peek(string) slidelimit.Decision { return p.peek }

// Under MaxDelay a request whose refusing limit asks for a short wait, while a limit not asked is
// used up for longer than MaxDelay, is refused at once: sleeping the short wait could only end in
// the next limit's refusal. It was slept, and decided again, until MaxDelay ran out.
func TestMaxDelayCountsTheLimitsNotAsked(t *testing.T) {
	short := &peeking{d: slidelimit.Decision{Limit: 1, Reason: slidelimit.ReasonLimited, RetryAfter: 20 * time.Millisecond}}
	hour := &peeking{peek: slidelimit.Decision{Limit: 1, Reason: slidelimit.ReasonLimited, RetryAfter: time.Hour}}
	mw := &httplimit.Middleware{
		Limiter: short, Quota: httplimit.Quota{Name: "short"},
		Limits:   []httplimit.Limit{{Limiter: hour, Quota: httplimit.Quota{Name: "hour"}}},
		MaxDelay: time.Second,
	}
	ts := serve(t, mw.Wrap(ok))
	r := get(t, ts.Client(), ts.URL, nil)
	assert.Equal(t, 429, r.status)
	assert.Equal(t, "3600", r.retryAfter)
	assert.Equal(t, int64(1), short.takes.Load(), "decided once: no wait was slept")
	assert.Zero(t, hour.takes.Load())
}

// A limit not asked (an earlier one refused) whose engine is closed is left out of the RateLimit
// field, as an asked one that fails open is: it was listed with r=0, a quota spent that nothing
// counts.
func TestClosedLimitNotAskedIsNotListed(t *testing.T) {
	clk := clock.NewManual(w0)
	perMin := newOn(t, policy.FixedWindow{Limit: 1, Window: time.Minute}, clk)
	closed := newOn(t, policy.FixedWindow{Limit: 5, Window: time.Minute}, clk)
	require.NoError(t, closed.Close())
	mw := &httplimit.Middleware{
		Limiter: httplimit.Local(perMin), Quota: httplimit.Quota{Name: "minute"},
		Limits: []httplimit.Limit{{Limiter: httplimit.Local(closed), Quota: httplimit.Quota{Name: "closed"}}},
		Now:    nowOf(clk),
	}
	ts := serve(t, mw.Wrap(ok))
	const pol = `"minute";q=1;w=60, "closed";q=5;w=60`
	assert.Equal(t, reply{200, pol, `"minute";r=0;t=60`, "", "ok"}, get(t, ts.Client(), ts.URL, nil))
	assert.Equal(t, reply{429, pol, `"minute";r=0;t=60`, "60", "rate limit exceeded\n"}, get(t, ts.Client(), ts.URL, nil))
}

// RFC 7239 lets a proxy obfuscate the port of a for= node but keep its address: that address is
// the client. The hop was taken for "not an address", so every client behind such a proxy shared
// the proxy's key.
func TestForwardedObfuscatedPort(t *testing.T) {
	trusted, err := httplimit.ParsePrefixes("127.0.0.0/8, 10.0.0.0/8")
	require.NoError(t, err)
	ip := &httplimit.ClientIP{TrustedProxies: trusted, Header: httplimit.Forwarded}
	for fwd, want := range map[string]string{
		`for="192.0.2.43:_hidden"`:                 "192.0.2.43",
		`for="[2001:db8:cafe::17]:_p-1.x"`:         "2001:db8:cafe::17",
		`for="198.51.100.1:_a", for="10.1.1.1:_b"`: "198.51.100.1",
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.1:1"
		r.Header.Set("Forwarded", fwd)
		assert.Equal(t, netip.MustParseAddr(want), ip.Addr(r), fwd)
	}
	// Still not addresses: an obfuscated node, a hidden port with nothing after '_', an
	// unbracketed IPv6 address with a port.
	for _, fwd := range []string{`for=_node:_port`, `for="192.0.2.43:_"`, `for="2001:db8::1:_p"`} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.1:1"
		r.Header.Set("Forwarded", fwd)
		assert.Equal(t, netip.MustParseAddr("10.0.0.1"), ip.Addr(r), fwd)
	}

	// Through a server: two clients behind the proxy have an allowance each.
	lim, clk := newEngine(t, 1, time.Minute, w0)
	mw := &httplimit.Middleware{Limiter: httplimit.Local(lim), Now: nowOf(clk), KeyFunc: ip.Key}
	ts := serve(t, mw.Wrap(ok))
	hidden := func(addr string) int {
		return get(t, ts.Client(), ts.URL, map[string]string{"Forwarded": `for="` + addr + `:_hidden"`}).status
	}
	assert.Equal(t, 200, hidden("192.0.2.1"))
	assert.Equal(t, 200, hidden("192.0.2.2"), "another client")
	assert.Equal(t, 429, hidden("192.0.2.1"))
}
