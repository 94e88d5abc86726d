package engine

import (
	"context"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/policy"
)

// AsLimiter returns l as a slidelimit.Limiter, the interface that the Redis store, the batched
// fleet mode, httplimit, the proxy and the Envoy rate limit service share. Its Take decides exactly
// as l.Take does, ignoring ctx (an in-process decision never waits, so even a ctx already done is
// decided and counted). Its error is nil, except once l is closed: then every call returns
// ErrClosed, with the Decision (ReasonClosed), whatever its cost. It also reports l's policy
// (Policy), from which httplimit derives its RateLimit-Policy field, and l itself (a method
// Engine() *Limiter, which a caller holding only the interface reaches by a type assertion to
// interface{ Engine() *engine.Limiter }, as httplimit does to peek and give back). The adapter holds only l:
// converting it allocates nothing, and it is safe for concurrent use, as l is. A nil l gives a nil
// Limiter.
func (l *Limiter) AsLimiter() slidelimit.Limiter {
	if l == nil {
		return nil
	}
	return adapted{l}
}

type adapted struct{ l *Limiter }

func (a adapted) Take(_ context.Context, key string, n int64) (Decision, error) {
	d := a.l.Take(key, n)
	if d.Reason == ReasonClosed {
		return d, ErrClosed
	}
	return d, nil
}

func (a adapted) Policy() policy.Policy { return a.l.Policy() }

// Engine returns the adapted limiter, for callers that hold only the interface.
func (a adapted) Engine() *Limiter { return a.l }
