package rules

import "github.com/slidelimit/slidelimit/policy"

// DualPeriodMs is the dual bucket's refill period: both capacities are per minute.
const DualPeriodMs = 60_000

// DualBucket is two token buckets sharing one clock: each call spends one request out of
// RequestsPerMin and cost tokens out of TokensPerMin (for example, API calls and model tokens per
// minute). Both start full, refill continuously over DualPeriodMs and saturate at their
// capacity; a call is admitted only when both have enough, and then spends from both.
//
// Result: Limit is TokensPerMin and Remaining is the tokens the next call could spend (0 while no
// request is available), since costs are counted in tokens; a cost above TokensPerMin is one that
// can never be admitted. The request dimension is reported by Peek's Probe.Requests.
//
// Per key: DualBucketState, 40 bytes as a Go struct. Its information fits in 2×32 bits of counts,
// 2×16 bits of credit (< 60000) and one timestamp, for a packed cell.
//
// Exact integer arithmetic, with sixty-thousandths carried in the credits (see docs/policies.md).
// Overflow: dt is clamped to DualPeriodMs, so perMin*dt < 2^32 * 2^16 = 2^48.
//
// A DualBucket is a plain value: safe to copy and to use from any number of goroutines. Its
// methods are pure functions of their arguments; a state is owned by its caller, and concurrent
// Takes on one state must be serialized by the caller (the engine's CAS loop does that).
type DualBucket policy.DualBucket

// DualBucketState is one key's two buckets: whole requests and tokens, each one's next unit's
// fraction in sixty-thousandths (0 … 59999; 0 when that bucket is full) and the shared time of
// the last refill in ms. It is a plain value owned by its holder.
type DualBucketState struct {
	Requests      int64
	Tokens        int64
	RequestCredit int64
	TokenCredit   int64
	Last          int64
}

// Fresh returns a new key's state at now: both buckets full.
func (p DualBucket) Fresh(now int64) DualBucketState {
	return DualBucketState{Requests: p.RequestsPerMin, Tokens: p.TokensPerMin, Last: now}
}

// Refill brings both buckets of s forward to now. A state whose Last is at or after now (a racing
// goroutine read the clock a moment later) is left as it is, so time never runs backwards for a key.
func (p DualBucket) Refill(s *DualBucketState, now int64) {
	dt := now - s.Last
	if dt <= 0 {
		return
	}
	// The clamp only avoids overflow: a whole period refills both buckets completely.
	dt = min(dt, DualPeriodMs)
	refillPerMin(&s.Requests, &s.RequestCredit, p.RequestsPerMin, dt)
	refillPerMin(&s.Tokens, &s.TokenCredit, p.TokensPerMin, dt)
	s.Last = now
}

func refillPerMin(have, credit *int64, perMin, dt int64) {
	*credit += perMin * dt
	*have += *credit / DualPeriodMs
	*credit %= DualPeriodMs
	if *have >= perMin {
		*have, *credit = perMin, 0
	}
}

// Take refills s to now and decides a call that spends one request and cost tokens. Cost 0 is
// admitted when a request is available, and still spends it; a cost above TokensPerMin is refused
// with RetryAfterMs 0; a refused call spends nothing (only the refill, invisible to every decision,
// remains). ResetAtMs is when both buckets will be full again (now when they are). cost must not
// be negative.
func (p DualBucket) Take(s *DualBucketState, now, cost int64) policy.Result {
	p.Refill(s, now)
	r := policy.Result{Limit: p.TokensPerMin}
	if s.Requests >= 1 && s.Tokens >= cost {
		s.Requests--
		s.Tokens -= cost
		r.Allowed = true
	} else if cost <= p.TokensPerMin {
		r.RetryAfterMs = p.wait(s, now, cost)
	}
	r.Remaining = p.remaining(s)
	r.ResetAtMs = p.resetAt(s, now)
	return r
}

// Peek refills a copy of s to now and reports what a call of one token would get, changing
// nothing. Probe.Requests and Probe.Tokens are docs/policies.md's requestsOf and tokensOf.
func (p DualBucket) Peek(s DualBucketState, now int64) (policy.Result, policy.Probe) {
	p.Refill(&s, now)
	r := policy.Result{
		Allowed:   s.Requests >= 1 && s.Tokens >= 1,
		Limit:     p.TokensPerMin,
		Remaining: p.remaining(&s),
		ResetAtMs: p.resetAt(&s, now),
	}
	if !r.Allowed {
		r.RetryAfterMs = p.wait(&s, now, 1)
	}
	return r, policy.Probe{Requests: s.Requests, Tokens: s.Tokens}
}

func (p DualBucket) remaining(s *DualBucketState) int64 {
	if s.Requests < 1 {
		return 0
	}
	return s.Tokens
}

// wait solves for the least wait until one request and cost tokens are both there: each bucket's
// own solved wait (as the token bucket's, in sixty-thousandths) and the larger of the two, since
// both only grow. For cost 1 that is docs/policies.md's rule. Each need is at most perMin*60000, so
// each wait is at most DualPeriodMs and the clamp in Refill never bites.
func (p DualBucket) wait(s *DualBucketState, now, cost int64) int64 {
	return max(s.Last-now, 0) + max(
		perMinWait(s.Requests, s.RequestCredit, p.RequestsPerMin, 1),
		perMinWait(s.Tokens, s.TokenCredit, p.TokensPerMin, cost))
}

// perMinWait is the ms until have (+ credit sixty-thousandths) reaches need at perMin per minute.
func perMinWait(have, credit, perMin, need int64) int64 {
	if have >= need {
		return 0
	}
	return divCeil((need-have)*DualPeriodMs-credit, perMin)
}

// resetAt is when both buckets are full again.
func (p DualBucket) resetAt(s *DualBucketState, now int64) int64 {
	return max(now, s.Last) + max(
		perMinWait(s.Requests, s.RequestCredit, p.RequestsPerMin, p.RequestsPerMin),
		perMinWait(s.Tokens, s.TokenCredit, p.TokensPerMin, p.TokensPerMin))
}

// Dead reports whether s, at now, is indistinguishable from a new key's state: both buckets have
// refilled to full by now. Exact because full buckets hold {cap, 0} each and every later refill
// leaves them at that with Last = t, which is Fresh(t); a state stamped after now (Last > now) is
// kept, since its refill would start later than a fresh key's.
func (p DualBucket) Dead(s DualBucketState, now int64) bool {
	if s.Last > now {
		return false
	}
	p.Refill(&s, now)
	return s.Requests >= p.RequestsPerMin && s.RequestCredit == 0 &&
		s.Tokens >= p.TokensPerMin && s.TokenCredit == 0
}
