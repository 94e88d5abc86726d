package policy

import "time"

// SlidingCounter is the sliding window counter: per key, the current window's count and the
// previous window's, the latter weighted by how much of it still overlaps the trailing window.
// Windows are aligned to the Unix epoch, so every process (and Redis) agrees on where they start.
// The rules are exact and integer (see DESIGN.md §1): the carried weight is floored, a gap of two
// windows clears both counts, ties admit, and RetryAfter is solved rather than searched.
type SlidingCounter struct {
	Limit  int64         // units admitted per window, 1 … MaxLimit
	Window time.Duration // a whole number of milliseconds, 1ms … MaxWindow
}

// SlidingCounterState is one key's state: the aligned start of its current window (ms) and two
// counts. The zero counts make a state indistinguishable from a new key's, whatever its window.
type SlidingCounterState struct {
	Window   int64
	Current  int64
	Previous int64
}

// ID returns "sliding-counter".
func (SlidingCounter) ID() string { return "sliding-counter" }

func (SlidingCounter) sealed() {}

// Validate checks Limit and Window.
func (p SlidingCounter) Validate() error {
	if err := checkLimit("SlidingCounter.Limit", p.Limit); err != nil {
		return err
	}
	return checkWindow("SlidingCounter.Window", p.Window)
}

// WindowMs returns the window in milliseconds.
func (p SlidingCounter) WindowMs() int64 { return int64(p.Window / time.Millisecond) }

// Fresh returns a new key's state at now.
func (p SlidingCounter) Fresh(now int64) SlidingCounterState {
	w := p.WindowMs()
	return SlidingCounterState{Window: now - now%w}
}

// Roll brings s forward to the window that contains now. A state from a later window than now's
// (a racing goroutine read the clock a moment later) is left as it is: callers treat now as that
// window's start, so time never runs backwards for a key.
func (p SlidingCounter) Roll(s *SlidingCounterState, now int64) {
	w := p.WindowMs()
	start := now - now%w
	if start <= s.Window {
		return
	}
	if start == s.Window+w {
		s.Previous = s.Current
	} else {
		s.Previous = 0 // a gap of two windows or more: nothing before is still inside the trailing window
	}
	s.Current = 0
	s.Window = start
}

// Estimate returns carried + current for a state already rolled to now.
//
// Overflow: Previous <= MaxLimit < 2^32 and 0 < w - elapsed <= w <= MaxWindow = 2^32 ms, so the
// product is below 2^64 and exact in uint64. The floor of the division is part of the contract.
func (p SlidingCounter) estimate(s *SlidingCounterState, now int64) int64 {
	w := p.WindowMs()
	elapsed := max(now-s.Window, 0) // a state ahead of now counts as its window's first millisecond
	return int64(uint64(s.Previous)*uint64(w-elapsed)/uint64(w)) + s.Current
}

// Take rolls s to now and decides a request of cost units, counting it in s when admitted.
// Cost 0 is always admitted and counts nothing; a cost above Limit is refused; a refused request
// leaves the counts unchanged (only the roll, which is invisible to every decision, may remain).
// cost must not be negative (the engine refuses that before calling).
func (p SlidingCounter) Take(s *SlidingCounterState, now, cost int64) Result {
	p.Roll(s, now)
	est := p.estimate(s, now)
	r := Result{Limit: p.Limit, ResetAtMs: s.Window + p.WindowMs()}
	if cost == 0 || (cost <= p.Limit && est+cost <= p.Limit) {
		s.Current += cost
		r.Allowed = true
		r.Remaining = max(p.Limit-est-cost, 0)
		return r
	}
	r.Remaining = max(p.Limit-est, 0)
	if cost <= p.Limit {
		r.RetryAfterMs = p.retryAfter(s, now, est, cost)
	}
	return r
}

// Peek rolls a copy of s to now and reports what a unit request would get, changing nothing.
// Remaining is Limit minus the estimate, and Probe.Estimate is the estimate itself.
func (p SlidingCounter) Peek(s SlidingCounterState, now int64) (Result, Probe) {
	p.Roll(&s, now)
	est := p.estimate(&s, now)
	r := Result{
		Allowed:   est+1 <= p.Limit,
		Limit:     p.Limit,
		Remaining: max(p.Limit-est, 0),
		ResetAtMs: s.Window + p.WindowMs(),
	}
	r.RetryAfterMs = p.retryAfter(&s, now, est, 1)
	return r, Probe{Estimate: est}
}

// retryAfter solves for the wait until a request of cost (1 <= cost <= Limit) would be admitted,
// with no other traffic, for a state rolled to now whose estimate is est.
//
// Within the window, admission needs carried <= need = Limit - Current - cost, and carried decays
// linearly, so: floor(prev*(w-e)/w) <= need  <=>  prev*(w-e) < (need+1)*w  <=>  e > w*(prev-need-1)/prev,
// whose least integer solution is floor(w*excess/prev) + 1 with excess = prev - need - 1.
// When Current alone leaves no room (need < 0), the wait runs past the window edge: there Current
// becomes the previous count and decays by the same rule, with need = Limit - cost; at least 1 ms
// past the edge, because at the edge itself it still counts undecayed. For a unit cost this is
// exactly the window edge + 1 ms of the contract.
//
// Overflow: w <= 2^32 and excess < Previous (or Current) <= MaxLimit < 2^32, so w*excess < 2^64.
func (p SlidingCounter) retryAfter(s *SlidingCounterState, now, est, cost int64) int64 {
	if est+cost <= p.Limit {
		return 0
	}
	w := p.WindowMs()
	elapsed := max(now-s.Window, 0)
	need := p.Limit - s.Current - cost
	if need < 0 {
		wait := int64(1)
		if excess := s.Current - (p.Limit - cost) - 1; excess >= 0 {
			wait = max(int64(uint64(w)*uint64(excess)/uint64(s.Current))+1, 1)
		}
		return w - elapsed + wait
	}
	if s.Previous == 0 {
		return 0
	}
	excess := s.Previous - need - 1
	if excess < 0 {
		return 0
	}
	target := int64(uint64(w)*uint64(excess)/uint64(s.Previous)) + 1
	return max(target-elapsed, 0)
}

// Dead reports whether s, at now, is indistinguishable from a new key's state: both counts are
// zero, or the key has not been touched for two whole windows. Removing a dead state can never
// change a decision.
func (p SlidingCounter) Dead(s SlidingCounterState, now int64) bool {
	if s.Current == 0 && s.Previous == 0 {
		return true
	}
	w := p.WindowMs()
	return now-now%w >= s.Window+2*w
}
