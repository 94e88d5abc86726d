// Package httplimit limits the requests that reach a net/http handler, per client.
//
// For each request the Middleware computes a key (by default the client's IP address; or a
// header's value, the path and IP, or the connection), asks a slidelimit.Limiter to take one unit
// (or Cost units) for it, and then either calls the next handler or answers 429 Too Many Requests
// with Retry-After. Decided responses carry the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-10, so clients can see their quota and pace themselves (the
// exceptions, Shadow mode and limits whose quota a refusal did not read, are Middleware's).
// Listener applies the same idea one level down, to new connections per client address.
//
// Both decide through Limiter, one method that the in-process engine (through Local) and the
// Redis store (redisstore.Limiter) both provide, so a single process and a fleet sharing Redis
// are configured the same way. Forwarding headers are read only from proxies named in
// ClientIP.TrustedProxies, so a client cannot choose its own key.
//
// The middleware is a struct of hooks in the style of httputil.ReverseProxy: every field is
// optional except Limiter, and a nil hook means the default its comment states.
package httplimit

import (
	"math"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

// Limiter is the root package's interface: Take(ctx, key, n) (Decision, error). The in-process
// engine (through Local or (*engine.Limiter).AsLimiter), redisstore.Limiter and the batched fleet
// mode all implement it, safely for concurrent use: the middleware calls Take from every
// request's goroutine at once.
type Limiter = slidelimit.Limiter

// ErrLimiterClosed is returned by a Local limiter whose engine.Limiter has been closed; it is
// engine.ErrClosed (and slidelimit.ErrClosed), so errors.Is matches any of the three. A
// sentinel, compared from any goroutine; never reassigned.
var ErrLimiterClosed = engine.ErrClosed

// Local adapts an in-process engine limiter to Limiter: it is l.AsLimiter(). Its Take ignores ctx
// (an in-process decision never waits, so a ctx already done is still decided and counted) and
// returns an error only once l is closed, and then for every call, whatever its cost
// (ErrLimiterClosed). The adapter also reports l's policy, from which the middleware derives its
// RateLimit-Policy field. Safe for concurrent use, as l is. Local(nil) returns nil, which
// Middleware.Validate reports.
func Local(l *engine.Limiter) Limiter { return l.AsLimiter() }

// policyReporter is what Local and redisstore.Limiter offer beyond Take, letting the middleware
// describe the quota without being told.
type policyReporter interface {
	Policy() policy.Policy
}

// Quota describes the limit that the RateLimit-Policy field advertises:
// `"Name";q=Limit;w=Window`. It is a plain value, safe to copy and to share between goroutines.
type Quota struct {
	// Name identifies the policy in both fields; "" means "default". Printable ASCII only.
	Name string
	// Limit is the quota q: units allowed per window.
	Limit int64
	// Window is the window w, sent in whole seconds rounded up (at least 1); 0 omits w.
	Window time.Duration
}

// QuotaOf describes a policy as a Quota named name. The window policies (sliding counter, fixed
// window, sliding log) advertise their limit per window. The buckets (token bucket, GCRA, leaky
// bucket) advertise their burst (or capacity) over the time they take to refill (or drain) it, so
// that the RateLimit field's remaining never exceeds q. The dual bucket advertises its tokens per
// minute: its costs, and so its decisions' Limit and Remaining, are counted in tokens. QuotaOf is
// a pure function, safe to call from any goroutine.
func QuotaOf(name string, p policy.Policy) Quota {
	q := Quota{Name: name}
	p, _ = rules.Value(p) // a pointer to a policy describes as the policy does
	switch p := p.(type) {
	case policy.SlidingCounter:
		q.Limit, q.Window = p.Limit, p.Window
	case policy.FixedWindow:
		q.Limit, q.Window = p.Limit, p.Window
	case policy.SlidingLog:
		q.Limit, q.Window = p.Limit, p.Window
	case policy.TokenBucket:
		q.Limit, q.Window = p.Burst, refill(p.Burst, p.Rate)
	case policy.GCRA:
		q.Limit, q.Window = p.Burst, refill(p.Burst, p.Rate)
	case policy.LeakyBucket:
		q.Limit, q.Window = p.Capacity, refill(p.Capacity, p.Rate)
	case policy.DualBucket:
		q.Limit, q.Window = p.TokensPerMin, time.Minute
	}
	return q
}

// refill is how long units take to come back at perSecond, in whole milliseconds rounded up.
func refill(units, perSecond int64) time.Duration {
	if perSecond <= 0 {
		return 0
	}
	ms := (units*1000 + perSecond - 1) / perSecond
	return time.Duration(min(ms, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
}

// ceilSeconds rounds d up to whole seconds; d <= 0 gives 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}
