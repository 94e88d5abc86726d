package policy

import (
	"time"
)

// SlidingCounter is the sliding window counter, the primary policy: each key may take about Limit
// units per trailing window of length Window (an estimate: at most Limit within one aligned
// window, and up to about twice Limit in a trailing window across two; see the package doc). Per
// key it keeps the units taken in the current window and in the one before; the latter count is
// weighted by the share of the previous window that the trailing window still covers, and a
// request of n units is admitted when floor(previous × share) + current + n <= Limit. Windows
// are aligned to the Unix epoch, so every process (and Redis) agrees on where they start.
// docs/policies.md gives the rule exactly, with how Remaining and RetryAfter are derived.
//
// It costs one 64-bit word per key in the engine (two for limits of 2^21 and above) and is the
// right default: SlidingLog when the
// bound must hold over every interval exactly, FixedWindow when bursts at window edges are fine.
//
// A SlidingCounter is a plain value: safe to copy and to share between goroutines.
type SlidingCounter struct {
	Limit  int64         // units admitted per window, 1 … MaxLimit
	Window time.Duration // a whole number of milliseconds, 1ms … MaxWindow
}

// ID returns "sliding-counter". A constant: safe for concurrent use.
func (SlidingCounter) ID() string { return "sliding-counter" }

func (SlidingCounter) sealed() {}

// Validate checks Limit and Window. A pure function of p: safe for concurrent use.
func (p SlidingCounter) Validate() error {
	if err := checkLimit("SlidingCounter.Limit", p.Limit); err != nil {
		return err
	}
	return checkWindow("SlidingCounter.Window", p.Window)
}
