package policy

import (
	"fmt"
	"time"
)

// MaxLogLimit is the largest limit SlidingLog accepts: its state grows with the limit (in the
// engine a ring of 4 bytes per unit of the limit, allocated whole when the key is first seen), and
// limits in the thousands belong to SlidingCounter.
const MaxLogLimit = 10_000

// SlidingLog is the exact sliding log: it records the time of every admitted unit and admits
// while fewer than Limit fall in the trailing window (now - Window, now]. It keeps "no more than
// Limit in any Window" literally true, for promises such as login attempts, password resets and
// one-time codes, where limits are small (at most MaxLogLimit).
//
// Its state grows with the limit: in the engine about 84 bytes per key (a 16-byte slot at the
// tables' load, a 64-byte entry) plus a ring of one 32-bit time per unit of the limit, 4*Limit
// bytes rounded up to the allocator's size class (about 100 bytes per key at Limit 1, 160 at
// Limit 16); and the engine serializes the requests of one key with a lock rather than a
// compare-and-swap.
//
// A SlidingLog is a plain value: safe to copy and to share between goroutines.
type SlidingLog struct {
	Limit  int64         // units admitted in any trailing window, 1 … MaxLogLimit
	Window time.Duration // a whole number of milliseconds, 1ms … MaxWindow
}

// ID returns "sliding-log". A constant: safe for concurrent use.
func (SlidingLog) ID() string { return "sliding-log" }

func (SlidingLog) sealed() {}

// Validate checks Limit (1 … MaxLogLimit: the state holds one uint32 per unit) and Window (a whole
// number of ms, 1ms … MaxWindow: the 32-bit entries need every live timestamp within 2^32 ms). A
// pure function of p: safe for concurrent use.
func (p SlidingLog) Validate() error {
	if p.Limit < 1 || p.Limit > MaxLogLimit {
		return fmt.Errorf("policy: SlidingLog.Limit = %d out of range [1, %d]", p.Limit, MaxLogLimit)
	}
	return checkWindow("SlidingLog.Window", p.Window)
}
