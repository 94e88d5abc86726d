package rules

import (
	"time"

	"github.com/slidelimit/slidelimit/policy"
)

// FixedWindow counts units per epoch-aligned window and starts again from zero at each edge.
// The simplest window policy, with a known flaw: a client can spend Limit just before an edge and
// Limit again just after, so up to 2*Limit pass within a span of 2 ms. SlidingCounter removes
// that flaw for one integer more per key.
//
// Per key: FixedWindowState, 16 bytes as a Go struct. Its information fits in 32 bits of count
// (<= Limit <= MaxLimit) and the window's index (now / Window), for a packed cell.
//
// Overflow: the only arithmetic is now - now%Window, Window + WindowMs and comparisons of counts
// below 2^32 with costs (written as cost <= Limit - Count, so any int64 cost is safe).
//
// A FixedWindow is a plain value: safe to copy and to use from any number of goroutines. Its
// methods are pure functions of their arguments; a state is owned by its caller, and concurrent
// Takes on one state must be serialized by the caller (the engine's CAS loop does that).
type FixedWindow policy.FixedWindow

// FixedWindowState is one key's state: the aligned start of its window (ms) and the units counted
// in it. It is a plain value owned by its holder.
type FixedWindowState struct {
	Window int64
	Count  int64
}

// WindowMs returns the window in milliseconds.
func (p FixedWindow) WindowMs() int64 { return int64(p.Window / time.Millisecond) }

// Fresh returns a new key's state at now: now's window, nothing counted.
func (p FixedWindow) Fresh(now int64) FixedWindowState {
	return FixedWindowState{Window: now - now%p.WindowMs()}
}

// Roll moves s to the window that contains now, counting from zero. A state from a later window
// than now's (a racing goroutine read the clock a moment later) is left as it is and now is
// treated as that window's first millisecond, so time never runs backwards for a key. (docs/policies.md
// resets on any different window; the two agree whenever time does not run backwards.)
func (p FixedWindow) Roll(s *FixedWindowState, now int64) {
	w := p.WindowMs()
	if now < s.Window+w {
		return // s's own window, or a later one: the hot path, with no division
	}
	s.Window, s.Count = now-now%w, 0
}

// Take rolls s to now and decides a request of cost units, counting them when admitted. Cost 0 is
// always admitted and counts nothing; a cost above Limit is refused with RetryAfterMs 0; a refused
// request counts nothing. Remaining is Limit - Count; ResetAtMs is the end of the window, where
// RetryAfterMs also points when the window is too full (no extra millisecond: the next window
// starts from zero). cost must not be negative.
func (p FixedWindow) Take(s *FixedWindowState, now, cost int64) policy.Result {
	p.Roll(s, now)
	end := s.Window + p.WindowMs()
	r := policy.Result{Limit: p.Limit, ResetAtMs: end}
	if cost <= p.Limit-s.Count {
		s.Count += cost
		r.Allowed = true
	} else if cost <= p.Limit {
		r.RetryAfterMs = end - now
	}
	r.Remaining = p.Limit - s.Count
	return r
}

// Peek reports what a unit request would get at now, changing nothing. As docs/policies.md says, the
// fixed window's probes only read: a state from an earlier window reads as zero, without being
// rolled. Probe.Count is the units counted in now's window (countOf).
func (p FixedWindow) Peek(s FixedWindowState, now int64) (policy.Result, policy.Probe) {
	p.Roll(&s, now) // s is a copy: rolling it is reading as of now
	end := s.Window + p.WindowMs()
	r := policy.Result{Allowed: s.Count < p.Limit, Limit: p.Limit, Remaining: p.Limit - s.Count, ResetAtMs: end}
	if !r.Allowed {
		r.RetryAfterMs = end - now
	}
	return r, policy.Probe{Count: s.Count}
}

// Dead reports whether s, at now, is indistinguishable from a new key's state: it is from an
// earlier window than now's (the next Take or Peek starts from zero, as a new key does), or it is
// now's window with nothing counted, which is Fresh(now) itself. A state from a later window is
// kept even when empty, since its window ends later than a fresh key's.
func (p FixedWindow) Dead(s FixedWindowState, now int64) bool {
	start := now - now%p.WindowMs()
	return s.Window < start || (s.Window == start && s.Count == 0)
}

// Refund rolls s to now and takes out of the count up to cost units counted by a request
// admitted with result ResetAtMs resetAt (the end of the window that counted it), returning how
// many it took out. While that window is s's current one the units are in Count, and taking them
// out leaves s exactly as if the request had never been admitted; once it has ended they count
// no more and nothing is given back.
func (p FixedWindow) Refund(s *FixedWindowState, now, cost, resetAt int64) int64 {
	p.Roll(s, now)
	if resetAt != s.Window+p.WindowMs() {
		return 0
	}
	g := min(max(cost, 0), s.Count)
	s.Count -= g
	return g
}
