package policy

import (
	"fmt"
	"time"
)

// SlidingLog is the exact sliding log: up to Limit timestamps per key, admitting while fewer than
// Limit requests fall in the trailing window (now - Window, now]. For "no more than N in any W"
// promises with small limits (at most MaxLogLimit).
type SlidingLog struct {
	Limit  int64
	Window time.Duration
}

// MaxLogLimit is the largest limit SlidingLog accepts: its state grows with the limit.
const MaxLogLimit = 10_000

// FixedWindow counts requests per epoch-aligned window and starts again at each edge.
type FixedWindow struct {
	Limit  int64
	Window time.Duration
}

// TokenBucket holds up to Burst tokens, refilled at Rate tokens per second; a request of cost n
// takes n tokens.
type TokenBucket struct {
	Rate  int64 // tokens per second
	Burst int64
}

// GCRA is the generic cell rate algorithm: the token bucket's decisions from one integer per key
// (the theoretical arrival time).
type GCRA struct {
	Rate  int64 // permits per second
	Burst int64
}

// LeakyBucket admits while the bucket, draining at Rate units per second, has room for the cost
// below Capacity.
type LeakyBucket struct {
	Rate     int64 // units drained per second
	Capacity int64
}

// DualBucket is two token buckets sharing one clock: one request per call out of RequestsPerMin,
// and cost tokens out of TokensPerMin (for example, API calls and model tokens per minute).
type DualBucket struct {
	RequestsPerMin int64
	TokensPerMin   int64
}

// ID returns "sliding-log".
func (SlidingLog) ID() string { return "sliding-log" }

// ID returns "fixed-window".
func (FixedWindow) ID() string { return "fixed-window" }

// ID returns "token-bucket".
func (TokenBucket) ID() string { return "token-bucket" }

// ID returns "gcra".
func (GCRA) ID() string { return "gcra" }

// ID returns "leaky-bucket".
func (LeakyBucket) ID() string { return "leaky-bucket" }

// ID returns "dual-bucket".
func (DualBucket) ID() string { return "dual-bucket" }

func (SlidingLog) sealed()  {}
func (FixedWindow) sealed() {}
func (TokenBucket) sealed() {}
func (GCRA) sealed()        {}
func (LeakyBucket) sealed() {}
func (DualBucket) sealed()  {}

// Validate checks Limit (1 … MaxLogLimit) and Window.
func (p SlidingLog) Validate() error {
	if p.Limit < 1 || p.Limit > MaxLogLimit {
		return fmt.Errorf("policy: SlidingLog.Limit = %d out of range [1, %d]", p.Limit, MaxLogLimit)
	}
	return checkWindow("SlidingLog.Window", p.Window)
}

// Validate checks Limit and Window.
func (p FixedWindow) Validate() error {
	if err := checkLimit("FixedWindow.Limit", p.Limit); err != nil {
		return err
	}
	return checkWindow("FixedWindow.Window", p.Window)
}

// Validate checks Rate and Burst.
func (p TokenBucket) Validate() error {
	if err := checkLimit("TokenBucket.Rate", p.Rate); err != nil {
		return err
	}
	return checkLimit("TokenBucket.Burst", p.Burst)
}

// Validate checks Rate and Burst.
func (p GCRA) Validate() error {
	if err := checkLimit("GCRA.Rate", p.Rate); err != nil {
		return err
	}
	return checkLimit("GCRA.Burst", p.Burst)
}

// Validate checks Rate and Capacity.
func (p LeakyBucket) Validate() error {
	if err := checkLimit("LeakyBucket.Rate", p.Rate); err != nil {
		return err
	}
	return checkLimit("LeakyBucket.Capacity", p.Capacity)
}

// Validate checks RequestsPerMin and TokensPerMin.
func (p DualBucket) Validate() error {
	if err := checkLimit("DualBucket.RequestsPerMin", p.RequestsPerMin); err != nil {
		return err
	}
	return checkLimit("DualBucket.TokensPerMin", p.TokensPerMin)
}
