// Package slidelimit is the vocabulary every slidelimit backend shares: a Limiter decides whether
// n units for a key are admitted now, and answers with a Decision.
//
// A limiter keeps, per key, just enough state to apply one policy (package policy: the sliding
// window counter by default, or a sliding log, fixed window, token bucket, GCRA, leaky or dual
// bucket). An admitted request is counted; a refused one consumes nothing; a Decision says how
// much is left, when to retry, and why.
//
// Three backends implement Limiter, so a program can move from one process to a fleet by changing
// a constructor and none of its call sites:
//   - package engine: in-process, tens of nanoseconds per decision, lock-free on amd64 but for
//     the sliding log (docs/design.md, "The hot path")
//     ((*engine.Limiter).AsLimiter adapts its context-free hot path to Limiter);
//   - module redisstore: one Redis or Valkey round trip per decision, shared by a fleet;
//   - package redisstore/batched, the fleet mode: in-process decisions from quota leased from
//     Redis in batches.
//
// Package httplimit puts any Limiter in front of net/http, and the slidelimit command runs it as a
// reverse proxy or as Envoy's rate limit service.
//
// This package holds types and constants only; it imports nothing of the project, so that every
// other package can use its names.
package slidelimit

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Limiter decides n units for key now. An admitted request is counted; a refused one consumes
// nothing. n = 0 is a query that counts nothing and is admitted, except where the policy's rule
// refuses it: the dual bucket (policy.DualBucket) spends one request on every call, so that cost
// 0 is refused once the request bucket is empty, and the fixed window (and, in redisstore, the
// sliding log) refuses it for a key already past a per-key limit lowered below its count
// (TakeWithLimit); and in the engine a key not yet tracked is created before it is decided, cost 0
// included, so at its key cap (engine.WithMaxKeys) cost 0 for a new key is refused with
// ReasonKeyCap, or under EvictStalest makes room as any new key does. A negative n is refused
// with ReasonNegativeCost.
//
// A non-nil error means the limiter could not decide through its store (it is unreachable or
// slow, the caller's ctx ended, or the limiter is closed). The Decision returned with the error
// is the one the backend's FailureMode made; a caller that trusts it (FailLocal) may use it,
// others decide for themselves. Such a Decision reads nothing of the key's state, so its fields
// are the failure mode's, not the rules below for a decided request: a refusal made because the
// caller's ctx ended says ReasonLimited with a RetryAfter of 0 in redisstore under FailLocal
// (with the fallback's Remaining) and in redisstore/batched in every mode, where redisstore
// under FailClosed gives its back-off and under FailOpen admits, counting nothing.
//
// What ctx does is each implementation's to document. redisstore bounds each call to Redis by
// ctx: when ctx is already done or ends first, Take returns an error wrapping ctx's error (its
// circuit breaker does not count that as a Redis failure), except where the arguments or its own
// state answer before ctx is looked at (a negative cost, a closed limiter, for GCRA a cost above
// the burst: see redisstore's Take). The
// in-process engine's adapter ((*engine.Limiter).AsLimiter) never waits and ignores ctx: it
// decides, and counts, even for a ctx already done.
//
// Implementations are safe for concurrent use by any number of goroutines.
type Limiter interface {
	// Take decides n units for key, as the implementation's policy does, and counts them when
	// it admits them. It is safe to call from any number of goroutines at once.
	Take(ctx context.Context, key string, n int64) (Decision, error)
}

// Decision is the outcome of one decision, returned by value (no allocation). It is a plain value,
// safe to copy and to share between goroutines.
type Decision struct {
	// Allowed reports whether the request was admitted; an admitted request has been counted.
	Allowed bool
	// Limit is the limit the request is held to: the policy's limit (or burst, or capacity), or
	// the per-key limit a call such as TakeWithLimit gave, also when that call is refused before
	// the policy runs (a negative cost, the key cap, a closed limiter). A refusal of the per-key
	// limit itself (ReasonInvalidLimit) reports the policy's.
	Limit int64
	// Remaining is how many more units the key could take right now; never negative. A refusal
	// made before the key's state is read (a negative cost, an invalid per-key limit, the key
	// cap, a closed limiter, a cost the policy refuses before looking the key up) reports 0, and
	// a zero ResetAt: it read nothing. Peek reads the state without taking.
	Remaining int64
	// RetryAfter is how long to wait before a request of the same cost can be admitted, given no
	// other traffic; 0 when admitted and when the cost can never be admitted. A Decision returned
	// with an error is the failure mode's, and may say 0 for a refusal (see Limiter).
	RetryAfter time.Duration
	// ResetAt is when the key's state next renews: the end of the current window for the window
	// policies (for the sliding log, when its newest entry leaves the window, or now when it is
	// empty), the time the bucket is full (or empty) again for the buckets.
	ResetAt time.Time
	// Reason says why the request was admitted or refused.
	Reason Reason
	// Counted is how many units this decision counted: its cost when admitted, 0 when refused.
	// It bounds what a refund of this decision can give back, so an admission that a backend's
	// failure mode made without its store reports 0 (redisstore: FailOpen's, which counted
	// nothing, and FailLocal's fallback's, which counted in the fallback). redisstore/batched's
	// FailLocal admissions report their cost: they are charged to Redis once it answers.
	Counted int64
}

// QuotaKnown reports whether d judged the key's quota, so that its Remaining describes the key:
// d.Reason.QuotaKnown(), except for a ReasonCostAboveLimit refusal made before the key's state was
// read, which has a zero ResetAt: a cost above what the policy can ever admit at once that is
// refused before the lookup (GCRA's above Burst; redisstore's above the limit, refused without a
// round trip), or a new key's above the limit at the key cap. A header that tells a client its
// remaining quota should leave out a limit whose Decision reports false, and a Decision returned
// with an error, which QuotaKnown cannot tell apart (see Limiter). A pure function of d, safe to
// call from any goroutine.
func (d Decision) QuotaKnown() bool {
	return d.Reason.QuotaKnown() && (d.Reason != ReasonCostAboveLimit || !d.ResetAt.IsZero())
}

// Reason says why a Decision came out as it did. A plain value, safe to copy and to share between
// goroutines.
type Reason uint8

const (
	// ReasonOK: the request was admitted.
	ReasonOK Reason = iota
	// ReasonLimited: the key is over its limit for now; RetryAfter says for how long. A refusal
	// returned with an error (a store that did not answer, a ctx that ended) may use it too,
	// with a RetryAfter of 0: see Limiter.
	ReasonLimited
	// ReasonCostAboveLimit: the cost exceeds what the policy can ever admit at once.
	ReasonCostAboveLimit
	// ReasonNegativeCost: the cost was negative; nothing was consumed.
	ReasonNegativeCost
	// ReasonKeyCap: the key is new and the limiter already tracks as many keys as it may.
	ReasonKeyCap
	// ReasonClosed: the limiter has been closed.
	ReasonClosed
	// ReasonInvalidLimit: a per-key limit was out of range, or the policy takes none.
	ReasonInvalidLimit
)

var reasonNames = [...]string{
	ReasonOK:             "ok",
	ReasonLimited:        "limited",
	ReasonCostAboveLimit: "cost above limit",
	ReasonNegativeCost:   "negative cost",
	ReasonKeyCap:         "key cap reached",
	ReasonClosed:         "limiter closed",
	ReasonInvalidLimit:   "invalid per-key limit",
}

// String returns a short lower-case description, suitable for logs and metrics labels, and
// "unknown" for a value outside the reasons defined here. A pure function, safe to call from any
// goroutine.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// QuotaKnown reports whether a Decision with this reason may have judged the key's quota: true for
// ReasonOK, ReasonLimited and ReasonCostAboveLimit. The other refusals (a negative cost, a new key
// at the key cap, a closed limiter, an invalid per-key limit) are made before the policy looks at
// the key, and their Remaining of 0 says nothing of it: a header that tells a client its remaining
// quota should leave such a limit out. A cost above the limit is sometimes refused before the
// key's state is read too (see Decision.QuotaKnown, which tells the two apart for a Decision in
// hand). A pure function of r, safe to call from any goroutine.
func (r Reason) QuotaKnown() bool {
	switch r {
	case ReasonOK, ReasonLimited, ReasonCostAboveLimit:
		return true
	}
	return false
}

// Errors for refusals that waiting cannot cure; Reason.Err maps a Reason to one of them.
var (
	ErrCostAboveLimit = errors.New("slidelimit: cost above the limit can never be admitted")
	ErrNegativeCost   = errors.New("slidelimit: negative cost")
	ErrKeyCap         = errors.New("slidelimit: key cap reached")
	ErrClosed         = errors.New("slidelimit: limiter closed")
	ErrInvalidLimit   = errors.New("slidelimit: invalid per-key limit")
)

// Err returns nil for ReasonOK and ReasonLimited (which waiting resolves), and the matching
// sentinel error for every other reason defined here (nil for a value outside them). A pure
// function, safe to call from any goroutine.
func (r Reason) Err() error {
	switch r {
	case ReasonCostAboveLimit:
		return ErrCostAboveLimit
	case ReasonNegativeCost:
		return ErrNegativeCost
	case ReasonKeyCap:
		return ErrKeyCap
	case ReasonClosed:
		return ErrClosed
	case ReasonInvalidLimit:
		return ErrInvalidLimit
	}
	return nil
}

// FailureMode says what happens to a request when a limiter cannot decide it through its store:
// Redis timed out, refused the connection, answered with an error, or the circuit breaker is open.
// The same names serve a backend (redisstore: what Take decides) and a caller (httplimit, the
// proxy: what to do with a Take that returned an error). A plain value, safe to copy and to share
// between goroutines.
type FailureMode uint8

const (
	// FailOpen admits the request: availability over accuracy. A backend given it (redisstore)
	// still refuses a cost above the limit, which no store could admit, with
	// ReasonCostAboveLimit; a caller given it (httplimit, the proxy) serves every request whose
	// Take returned an error, whatever its cost (httplimit still refuses a negative cost, the
	// programming error it is). The default, since a rate limiter that takes the service down
	// with it is usually worse than one that briefly limits nothing.
	FailOpen FailureMode = iota
	// FailClosed refuses the request, with a RetryAfter the backend chooses as a back-off
	// (redisstore: while its circuit breaker is open, the time left until it next tries Redis;
	// otherwise its cooldown).
	FailClosed
	// FailLocal decides with an in-process fallback limiter, which each process applies to its own
	// share of the limit. A caller given this mode uses the Decision that came with the error.
	FailLocal
)

// String returns "open", "closed" or "local", the words the command-line flags take, and
// "FailureMode(N)" for any other value N. A pure function, safe to call from any goroutine.
func (f FailureMode) String() string {
	switch f {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	case FailLocal:
		return "local"
	}
	return "FailureMode(" + strconv.Itoa(int(f)) + ")"
}

// ParseFailureMode parses "open", "closed" or "local" (and the longer "fail-open", "fail-closed",
// "fallback"); anything else is an error that names the accepted words. A pure function, safe
// from any goroutine.
func ParseFailureMode(s string) (FailureMode, error) {
	switch s {
	case "open", "fail-open":
		return FailOpen, nil
	case "closed", "fail-closed":
		return FailClosed, nil
	case "local", "fallback":
		return FailLocal, nil
	}
	return 0, errors.New("slidelimit: failure mode " + strconv.Quote(s) + ": want open, closed or local (or fail-open, fail-closed, fallback)")
}
