package policy

// This file holds what the six policies other than the sliding counter share. Each policy lives
// in its own file (sliding_log.go, fixed_window.go, token_bucket.go, gcra.go, leaky_bucket.go,
// dual_bucket.go) with the same shape as sliding_counter.go:
//
//	Fresh(now) State                      a new key's state at now
//	Take(s *State, now, cost) Result      bring s to now, decide, apply when admitted
//	Peek(s State, now) (Result, Probe)    what a unit request would get; changes nothing
//	Dead(s State, now) bool               s is indistinguishable from Fresh(t) at every t >= now
//
// Common preconditions, which the engine guarantees: now >= 0 (Unix milliseconds), cost >= 0,
// and s came from Fresh or Take of the same policy value. Time may run backwards by a little
// between calls (racing goroutines read the clock at slightly different moments): every policy
// then decides as if now were the state's own latest time or stricter, never more leniently.
//
// The bucket policies keep whole units plus a credit, the fraction of the next unit in
// thousandths (per-second rates) or sixty-thousandths (per-minute rates), so that refills carry
// every remainder forward: a bucket refilled in many small steps holds exactly what one refill
// over the whole span gives. That is what makes a refill on a refused request, or on a probe,
// invisible to every later decision.

// divCeil returns ceil(a / b) for a >= 0 and b > 0: docs/policies.md's ceilDiv, (a + b - 1) / b,
// written so that it cannot overflow for any a.
func divCeil(a, b int64) int64 {
	q := a / b
	if q*b != a {
		q++
	}
	return q
}
