package rules

import (
	"time"

	"github.com/slidelimit/slidelimit/internal/fastdiv"
	"github.com/slidelimit/slidelimit/policy"
)

// SlidingCounter is the sliding window counter: per key, the current window's count and the
// previous window's, the latter weighted by how much of it still overlaps the trailing window.
// Windows are aligned to the Unix epoch, so every process (and Redis) agrees on where they start.
// The rules are exact and integer (see docs/policies.md ("Sliding window counter")): the carried
// weight is floored, a gap of two windows clears both counts, ties admit, and RetryAfter is solved
// rather than searched.
type SlidingCounter policy.SlidingCounter

// SlidingCounterState is one key's state: the aligned start of its current window (ms) and two
// counts. The zero counts make a state indistinguishable from a new key's, whatever its window.
type SlidingCounterState struct {
	Window   int64
	Current  int64
	Previous int64
}

// WindowMs returns the window in milliseconds.
func (p SlidingCounter) WindowMs() int64 { return int64(p.Window / time.Millisecond) }

// Compile returns the policy's decision rule with its divisions by the window precomputed, for
// callers that decide many times (the engine). p must be valid.
func (p SlidingCounter) Compile() SlidingCounterRule {
	w := p.WindowMs()
	return SlidingCounterRule{limit: p.Limit, w: w, div: fastdiv.New(uint64(w))}
}

// Fresh is shorthand for p.Compile().Fresh(now).
func (p SlidingCounter) Fresh(now int64) SlidingCounterState {
	r := p.Compile()
	return r.Fresh(now)
}

// Take is shorthand for p.Compile().Take(s, now, cost).
func (p SlidingCounter) Take(s *SlidingCounterState, now, cost int64) policy.Result {
	r := p.Compile()
	return r.Take(s, now, cost)
}

// Peek is shorthand for p.Compile().Peek(s, now).
func (p SlidingCounter) Peek(s SlidingCounterState, now int64) (policy.Result, policy.Probe) {
	r := p.Compile()
	return r.Peek(s, now)
}

// Dead is shorthand for p.Compile().Dead(s, now).
func (p SlidingCounter) Dead(s SlidingCounterState, now int64) bool {
	r := p.Compile()
	return r.Dead(s, now)
}

// SlidingCounterRule is a SlidingCounter compiled for repeated decisions. Its methods are pure
// functions of their arguments; it is safe to copy and to use from many goroutines at once.
type SlidingCounterRule struct {
	limit int64
	w     int64
	div   fastdiv.Divisor
}

// Limit returns the policy's limit.
func (p *SlidingCounterRule) Limit() int64 { return p.limit }

// WithLimit returns the rule with another limit (1 … MaxLimit), for a key whose limit differs
// from the policy's. A key's counts are units, not fractions of a limit, so a new limit applies to
// them at once, mid-window: raised, the key may take the difference straight away; lowered below
// what it has already taken, it is refused until its counts decay under the new limit.
func (p SlidingCounterRule) WithLimit(limit int64) SlidingCounterRule {
	p.limit = limit
	return p
}

// Refund gives back up to cost units counted by a request admitted with result ResetAtMs resetAt,
// for a state rolled to the window starting at start, and returns how many it gave back. The units
// still count while their window is the current one (they are in Current) or the previous one
// (in Previous, where they weigh on the carried estimate); taking them out leaves the state as if
// the request had never been admitted. Two windows later they no longer count and nothing is
// given back.
func (p *SlidingCounterRule) Refund(s *SlidingCounterState, start, cost, resetAt int64) int64 {
	p.Roll(s, start)
	var from *int64
	switch resetAt - p.w {
	case s.Window:
		from = &s.Current
	case s.Window - p.w:
		from = &s.Previous
	default:
		return 0
	}
	g := min(max(cost, 0), *from)
	*from -= g
	return g
}

// WindowMs returns the window in milliseconds.
func (p *SlidingCounterRule) WindowMs() int64 { return p.w }

// Index returns the number of the window that contains t (t / window); t must be in [0, 2^62),
// the engine's time range.
func (p *SlidingCounterRule) Index(t int64) int64 { return int64(p.div.Div62(uint64(t))) }

// Fresh returns a new key's state at now.
func (p *SlidingCounterRule) Fresh(now int64) SlidingCounterState {
	return SlidingCounterState{Window: p.Index(now) * p.w}
}

// Start returns the aligned start of the window that contains now.
func (p *SlidingCounterRule) Start(now int64) int64 { return p.Index(now) * p.w }

// Roll brings s forward to the window that starts at start (Start(now)). A state from a later
// window (a racing goroutine read the clock a moment later) is left as it is: callers treat now
// as that window's first millisecond, so time never runs backwards for a key.
func (p *SlidingCounterRule) Roll(s *SlidingCounterState, start int64) {
	w := p.w
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
func (p *SlidingCounterRule) estimate(s *SlidingCounterState, now int64) int64 {
	// A state ahead of now counts as its window's first millisecond.
	return p.Carried(s.Previous, max(now-s.Window, 0)) + s.Current
}

// Carried returns the part of the previous window's count that still weighs elapsed ms into the
// current window (0 <= elapsed < window): floor(previous * (window - elapsed) / window).
func (p *SlidingCounterRule) Carried(previous, elapsed int64) int64 {
	x := uint64(previous) * uint64(p.w-elapsed)
	if x >= 1<<62 { // never for one-word cells (previous < 2^21, window <= 2^32 ms)
		return p.carriedWide(x)
	}
	return int64(p.div.Div62(x)) // small enough to inline: one multiply and one shift
}

// carriedWide is Carried's division for products of 2^62 and more, out of line.
func (p *SlidingCounterRule) carriedWide(x uint64) int64 { return int64(p.div.Div(x)) }

// Take rolls s to now and decides a request of cost units, counting it in s when admitted.
// Cost 0 is always admitted and counts nothing; a cost above Limit is refused; a refused request
// leaves the counts unchanged (only the roll, which is invisible to every decision, may remain).
// cost must not be negative (the engine refuses that before calling).
func (p *SlidingCounterRule) Take(s *SlidingCounterState, now, cost int64) policy.Result {
	return p.TakeAt(s, now, p.Start(now), cost)
}

// Admit is Take reduced to the decision, for callers that want only Allowed: it rolls s to the
// window starting at start (Start(now)) and counts cost when admitted.
func (p *SlidingCounterRule) Admit(s *SlidingCounterState, now, start, cost int64) bool {
	_, ok := p.admit(s, now, start, cost)
	return ok
}

func (p *SlidingCounterRule) admit(s *SlidingCounterState, now, start, cost int64) (est int64, ok bool) {
	p.Roll(s, start)
	est = p.estimate(s, now)
	if cost == 0 || (cost <= p.limit && est+cost <= p.limit) {
		s.Current += cost
		return est, true
	}
	return est, false
}

// TakeAt is Take for a caller that already knows Start(now).
func (p *SlidingCounterRule) TakeAt(s *SlidingCounterState, now, start, cost int64) policy.Result {
	est, ok := p.admit(s, now, start, cost)
	r := policy.Result{Allowed: ok, Limit: p.limit, ResetAtMs: s.Window + p.w}
	if ok {
		r.Remaining = max(p.limit-est-cost, 0)
		return r
	}
	r.Remaining = max(p.limit-est, 0)
	if cost <= p.limit {
		r.RetryAfterMs = p.retryAfter(s, now, est, cost)
	}
	return r
}

// Peek rolls a copy of s to now and reports what a unit request would get, changing nothing.
// Remaining is Limit minus the estimate, and Probe.Estimate is the estimate itself.
func (p *SlidingCounterRule) Peek(s SlidingCounterState, now int64) (policy.Result, policy.Probe) {
	return p.PeekAt(s, now, p.Start(now))
}

// Estimate returns Peek's Probe.Estimate alone: the count a copy of s rolled to now holds, without
// the wait that Peek also solves for. EvictStalest judges dozens of keys for each new key by it.
func (p *SlidingCounterRule) Estimate(s SlidingCounterState, now int64) int64 {
	p.Roll(&s, p.Start(now))
	return p.estimate(&s, now)
}

// PeekAt is Peek for a caller that already knows Start(now).
func (p *SlidingCounterRule) PeekAt(s SlidingCounterState, now, start int64) (policy.Result, policy.Probe) {
	p.Roll(&s, start)
	est := p.estimate(&s, now)
	r := policy.Result{
		Allowed:   est+1 <= p.limit,
		Limit:     p.limit,
		Remaining: max(p.limit-est, 0),
		ResetAtMs: s.Window + p.w,
	}
	r.RetryAfterMs = p.retryAfter(&s, now, est, 1)
	return r, policy.Probe{Estimate: est}
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
func (p *SlidingCounterRule) retryAfter(s *SlidingCounterState, now, est, cost int64) int64 {
	if est+cost <= p.limit {
		return 0
	}
	w := p.w
	// Negative when a racing writer moved the state into a later window: the wait then also
	// covers the time until that window begins.
	elapsed := now - s.Window
	need := p.limit - s.Current - cost
	if need < 0 {
		wait := int64(1)
		if excess := s.Current - (p.limit - cost) - 1; excess >= 0 {
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
func (p *SlidingCounterRule) Dead(s SlidingCounterState, now int64) bool {
	if s.Current == 0 && s.Previous == 0 {
		return true
	}
	return p.Index(now)*p.w >= s.Window+2*p.w
}
