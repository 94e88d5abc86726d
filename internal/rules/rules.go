// Package rules holds the decision rules of every policy in package policy, each as a pure step:
// given one key's state, the time and a cost, it returns the new state and a policy.Result
// (admitted or not, what remains, when to retry). Package atomic packs these states into cells,
// redisstore mirrors them in Lua and replays them, and the tests check every one against
// independent models. Programs that limit rates use package engine; nothing here is for them.
//
// Each policy.X has a twin type X here with the same fields, so rules.X(p) converts a
// configuration at no cost and gives it its steps. SlidingCounter is compiled first
// (SlidingCounter.Compile), since its divisions by the window are precomputed.
//
// Everything here is integer arithmetic on int64 milliseconds: no floats, no clocks, no allocation,
// no concurrency. Times are in [0, 2^62), the engine's range (some 146 million years of Unix
// milliseconds); the arithmetic relies on it. A function here may run several times for one
// decision (a CAS loop retries) and must not have side effects beyond the state it is given. All
// rule types are plain values and safe to copy and to share between goroutines; a state is owned
// by whoever holds it, and concurrent steps on one state must be serialized by its owner.
package rules

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
