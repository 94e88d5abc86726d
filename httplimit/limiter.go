// Package httplimit puts slidelimit in front of net/http: a middleware that limits requests per
// client (or per header, path or connection) and a net.Listener wrapper that limits new
// connections per client address.
//
// Both decide through Limiter, one method that the in-process engine (through Local) and the
// Redis store (redisstore.Limiter) both provide, so a single process and a fleet sharing Redis
// are configured the same way. Refused requests get 429 Too Many Requests with Retry-After, and
// every decided response carries the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-10.
//
// The middleware is a struct of hooks in the style of httputil.ReverseProxy: every field is
// optional except Limiter, and a nil hook means the default its comment states.
package httplimit

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

// Limiter decides n units for key. An admitted request is counted; a refused one consumes
// nothing. A non-nil error means the limiter could not decide (its store is unreachable, it is
// closed); the Decision returned with it is whatever the implementation chose to decide in that
// case, which ErrorMode says whether to trust.
//
// Implementations must be safe for concurrent use: the middleware calls Take from every request's
// goroutine at once. engine.Limiter (through Local) and redisstore.Limiter implement it.
type Limiter interface {
	Take(ctx context.Context, key string, n int64) (engine.Decision, error)
}

// ErrLimiterClosed is returned by a Local limiter whose engine.Limiter has been closed.
var ErrLimiterClosed = errors.New("httplimit: limiter closed")

// Local adapts an in-process engine limiter to Limiter. Its Take ignores ctx (an in-process
// decision never waits) and returns an error only once l is closed (ErrLimiterClosed). The
// adapter also reports l's policy, from which the middleware derives its RateLimit-Policy field.
// Safe for concurrent use, as l is.
func Local(l *engine.Limiter) Limiter { return local{l} }

type local struct{ l *engine.Limiter }

func (a local) Take(_ context.Context, key string, n int64) (engine.Decision, error) {
	d := a.l.Take(key, n)
	if d.Reason == engine.ReasonClosed {
		return d, ErrLimiterClosed
	}
	return d, nil
}

func (a local) Policy() policy.Policy { return a.l.Policy() }

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
// that the RateLimit field's remaining never exceeds q. The dual bucket advertises its requests
// per minute. QuotaOf is a pure function, safe to call from any goroutine.
func QuotaOf(name string, p policy.Policy) Quota {
	q := Quota{Name: name}
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
		q.Limit, q.Window = p.RequestsPerMin, time.Minute
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
