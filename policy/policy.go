// Package policy names the rate-limiting policies slidelimit offers, as plain configuration
// values that package engine (in process) and redisstore (on Redis) run.
//
// A policy decides, per key, whether a request of n units is admitted at a given time. The primary
// policy, SlidingCounter, holds each key to about Limit units per Window: it keeps the units
// admitted in the current epoch-aligned window and in the one before, and admits n more when
// floor(previous × overlap) + current + n is at most Limit, where overlap is the share of the
// previous window the trailing window still covers. That is an estimate, as if the previous
// window's units had been spread evenly over it: at most Limit units are admitted within any one
// epoch-aligned window, but a trailing window that straddles two of them may hold more (up to about
// twice Limit, when a whole Limit came at the end of the previous window). SlidingLog keeps every
// admission's time and is exact over every interval; FixedWindow counts per window; TokenBucket,
// GCRA and LeakyBucket meter a rate with a burst (or a capacity); DualBucket limits requests and
// tokens per minute together. docs/policies.md gives every rule exactly.
//
// A program picks one, fills in its fields and hands it to engine.New or redisstore.New, which
// call Validate and refuse a value out of range with an error naming the field. Every decision
// is integer arithmetic on milliseconds, so the engine and Redis decide alike to the unit.
//
// All types here are plain values, safe to copy and to share between goroutines.
package policy

import (
	"fmt"
	"time"
)

// MaxLimit is the largest limit (and the largest burst or capacity) any policy accepts: counts
// then fit in 32 bits, which the engine's packed cells and the overflow proofs rely on.
const MaxLimit = 1<<32 - 1

// MaxWindow is the longest window a window policy accepts (2^32 ms, about 49.7 days). With
// Limit <= MaxLimit it keeps every product of a count and a span of milliseconds below 2^64.
const MaxWindow = (1 << 32) * time.Millisecond

// Policy is the configuration of one rate-limiting policy: SlidingCounter, SlidingLog,
// FixedWindow, TokenBucket, GCRA, LeakyBucket or DualBucket. The interface is sealed, because the
// engine gives each of these an exact packed cell of its own; its methods only read the value and
// are safe to call from any goroutine.
type Policy interface {
	// ID returns the policy's registry id, such as "sliding-counter".
	ID() string
	// Validate returns an error naming the field and the value that is out of range, or nil.
	Validate() error

	sealed()
}

// Result is the outcome of one decision, in integer milliseconds, as the policies' rules report
// it. Programs that limit rates read engine.Decision instead; Result is what package atomic's
// cells return to the engine. It is a plain value, safe to copy and to share between goroutines.
type Result struct {
	// Allowed reports whether the request was admitted (and, for a take, counted).
	Allowed bool
	// Limit is the policy's limit, burst or capacity.
	Limit int64
	// Remaining is how many more units the key could take now; never negative.
	Remaining int64
	// RetryAfterMs is how long to wait before a request of the same cost can be admitted; 0 when
	// admitted, and 0 for a cost that can never be admitted.
	RetryAfterMs int64
	// ResetAtMs is when the key's state is next renewed (the end of the current window for the
	// window policies, the sliding log's being when its newest entry leaves the window, or now
	// when it is empty; when the bucket is full or empty again for the buckets).
	ResetAtMs int64
}

// Probe is what engine.Inspect reports about one key at the current time, changing nothing: each
// policy fills the fields that apply to it and leaves the rest 0. It is a plain value, safe to copy
// and to share between goroutines.
type Probe struct {
	Estimate int64 // sliding counter: carried + current
	Count    int64 // sliding log, fixed window
	Tokens   int64 // token bucket, GCRA, dual bucket
	Level    int64 // leaky bucket
	Requests int64 // dual bucket
}

func checkLimit(field string, v int64) error {
	if v < 1 || v > MaxLimit {
		return fmt.Errorf("policy: %s = %d out of range [1, %d]", field, v, int64(MaxLimit))
	}
	return nil
}

func checkWindow(field string, w time.Duration) error {
	switch {
	case w < time.Millisecond:
		return fmt.Errorf("policy: %s = %v is below 1ms", field, w)
	case w > MaxWindow: // first: a window past the maximum is refused for that, whatever its ms
		return fmt.Errorf("policy: %s = %v is above the maximum %v", field, w, MaxWindow)
	case w%time.Millisecond != 0:
		return fmt.Errorf("policy: %s = %v is not a whole number of milliseconds", field, w)
	}
	return nil
}
