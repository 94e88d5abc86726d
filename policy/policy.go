// Package policy holds the decision rules of every rate-limiting policy slidelimit offers, each as
// a pure step: given one key's state, the time and a cost, it returns the new state and a Result
// (admitted or not, what remains, when to retry).
//
// The primary policy, SlidingCounter, admits at most Limit units per key in any window of length
// Window: it keeps the units admitted in the current epoch-aligned window and in the one before,
// and admits n more when floor(previous × overlap) + current + n is at most Limit, where overlap
// is the share of the previous window the trailing window still covers. SlidingLog keeps every
// admission's time and is exact over every interval; FixedWindow counts per window; TokenBucket,
// GCRA and LeakyBucket meter a rate with a burst (or a capacity); DualBucket limits requests and
// tokens per minute together. docs/policies.md gives every rule exactly.
//
// Everything here is integer arithmetic on int64 milliseconds: no floats, no clocks, no allocation,
// no concurrency. Times are in [0, 2^62), the engine's range (some 146 million years of Unix
// milliseconds); the arithmetic relies on it. Most callers use these types only to configure
// package engine or redisstore, which pack these states into atomic cells (or Redis keys) and run
// the steps themselves; a function here may run several times for one decision and must not have
// side effects beyond the state it is given. All types are plain values and safe to copy and to
// share between goroutines; the state structs are owned by whoever holds them.
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

// Policy is the configuration of one rate-limiting policy. The engine accepts the types of this
// package only; the interface is sealed so that each one can be given an exact packed cell.
type Policy interface {
	// ID returns the policy's registry id, such as "sliding-counter".
	ID() string
	// Validate returns an error naming the field and the value that is out of range, or nil.
	Validate() error

	sealed()
}

// Result is the outcome of one decision, in integer milliseconds.
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
	// window policies; when the bucket is full or empty again for the buckets).
	ResetAtMs int64
}

// Probe is what the registry's probe calls report about one key; each policy fills the fields
// that its calls name (estimateOf, countOf, tokensOf, levelOf, requestsOf) and leaves the rest 0.
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
	case w%time.Millisecond != 0:
		return fmt.Errorf("policy: %s = %v is not a whole number of milliseconds", field, w)
	case w > MaxWindow:
		return fmt.Errorf("policy: %s = %v is above the maximum %v", field, w, MaxWindow)
	}
	return nil
}
