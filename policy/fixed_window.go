package policy

import "time"

// FixedWindow counts units per epoch-aligned window and starts again from zero at each edge.
// The simplest window policy, with a known flaw: a client can spend Limit just before an edge and
// Limit again just after, so up to 2*Limit pass within a span of 2 ms. SlidingCounter removes
// that flaw for one count more per key.
//
// A FixedWindow is a plain value: safe to copy and to share between goroutines.
type FixedWindow struct {
	Limit  int64         // units admitted per window, 1 … MaxLimit
	Window time.Duration // a whole number of milliseconds, 1ms … MaxWindow
}

// ID returns "fixed-window". A constant: safe for concurrent use.
func (FixedWindow) ID() string { return "fixed-window" }

func (FixedWindow) sealed() {}

// Validate checks Limit (1 … MaxLimit) and Window (a whole number of ms, 1ms … MaxWindow). A pure
// function of p: safe for concurrent use.
func (p FixedWindow) Validate() error {
	if err := checkLimit("FixedWindow.Limit", p.Limit); err != nil {
		return err
	}
	return checkWindow("FixedWindow.Window", p.Window)
}
