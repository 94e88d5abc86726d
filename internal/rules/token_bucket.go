package rules

import "github.com/slidelimit/slidelimit/policy"

// TokenBucket holds up to Burst tokens, refilled at Rate tokens per second; a request of cost n
// takes n tokens. A key idle long enough is full again, so a client can bank an idle period and
// spend it in one burst.
//
// Per key: TokenBucketState, 24 bytes as a Go struct. Its information fits in 32 bits of tokens
// (<= Burst <= MaxLimit), 10 bits of credit (< 1000) and one timestamp, for a packed cell.
//
// The refill is exact integer arithmetic with thousandths of a token carried in Credit (see
// docs/policies.md): refilling in several steps gives the same bucket as one step over the whole span.
// Overflow: a gap above 2^30 ms is clamped to FillMs before the multiply, so Rate*dt is below
// max(2^32 * 2^30, Burst*1000 + Rate) = 2^62, and every intermediate stays below 2^63 for every
// Rate and Burst up to MaxLimit and every time up to 2^62 ms.
//
// A TokenBucket is a plain value: safe to copy and to use from any number of goroutines. Its
// methods are pure functions of their arguments; a state is owned by its caller, and concurrent
// Takes on one state must be serialized by the caller (the engine's CAS loop does that).
type TokenBucket policy.TokenBucket

// TokenBucketState is one key's bucket: whole tokens, the next token's fraction in thousandths
// (0 … 999; always 0 when the bucket is full) and the time of the last refill in ms. It is a
// plain value owned by its holder.
type TokenBucketState struct {
	Tokens int64
	Credit int64
	Last   int64
}

// FillMs returns how long an empty bucket takes to fill: ceil(Burst*1000 / Rate) ms.
func (p TokenBucket) FillMs() int64 { return divCeil(p.Burst*1000, p.Rate) }

// Fresh returns a new key's state at now: a full bucket.
func (p TokenBucket) Fresh(now int64) TokenBucketState {
	return TokenBucketState{Tokens: p.Burst, Last: now}
}

// Refill brings s forward to now. A state whose Last is at or after now (a racing goroutine read
// the clock a moment later) is left as it is, so time never runs backwards for a key.
func (p TokenBucket) Refill(s *TokenBucketState, now int64) {
	dt := now - s.Last
	if dt <= 0 {
		return
	}
	// The clamp only avoids overflow, as FillMs of refill already saturates any bucket. Below
	// 2^30 ms, Rate*dt < 2^62 needs none, which spares a division on the hot path.
	if dt > 1<<30 {
		dt = min(dt, p.FillMs())
	}
	s.Credit += p.Rate * dt
	s.Tokens += s.Credit / 1000
	s.Credit %= 1000
	if s.Tokens >= p.Burst {
		s.Tokens, s.Credit = p.Burst, 0
	}
	s.Last = now
}

// Take refills s to now and decides a request of cost tokens, taking them when admitted.
// Cost 0 is always admitted and takes nothing; a cost above Burst is refused with RetryAfterMs 0;
// a refused request takes nothing (only the refill, invisible to every decision, remains).
// Remaining is the whole tokens left; ResetAtMs is when the bucket will be full again (now when
// it is full). cost must not be negative.
func (p TokenBucket) Take(s *TokenBucketState, now, cost int64) policy.Result {
	p.Refill(s, now)
	r := policy.Result{Limit: p.Burst}
	if s.Tokens >= cost {
		s.Tokens -= cost
		r.Allowed = true
	} else if cost <= p.Burst {
		r.RetryAfterMs = p.wait(s, now, cost)
	}
	r.Remaining = s.Tokens
	r.ResetAtMs = p.resetAt(s, now)
	return r
}

// Peek refills a copy of s to now and reports what a unit request would get, changing nothing.
// Probe.Tokens is the whole tokens in the bucket (docs/policies.md's tokensOf).
func (p TokenBucket) Peek(s TokenBucketState, now int64) (policy.Result, policy.Probe) {
	p.Refill(&s, now)
	r := policy.Result{Allowed: s.Tokens >= 1, Limit: p.Burst, Remaining: s.Tokens, ResetAtMs: p.resetAt(&s, now)}
	if !r.Allowed {
		r.RetryAfterMs = p.wait(&s, now, 1)
	}
	return r, policy.Probe{Tokens: s.Tokens}
}

// wait solves for the least wait after which cost (Tokens < cost <= Burst) tokens are there,
// with no other traffic. The refill adds Rate thousandths per ms to Tokens*1000 + Credit, so the
// need is (cost - Tokens)*1000 - Credit thousandths: ceil(need / Rate) ms after the state's time.
// For cost 1 and an empty bucket that is docs/policies.md's ceilDiv(1000 - credit, ratePerSec). The
// need is at most Burst*1000, so the wait is at most FillMs and the clamp in Refill never bites.
func (p TokenBucket) wait(s *TokenBucketState, now, cost int64) int64 {
	return max(s.Last-now, 0) + divCeil((cost-s.Tokens)*1000-s.Credit, p.Rate)
}

// resetAt is when the bucket is full again: its deficit, (Burst - Tokens)*1000 - Credit
// thousandths, refilled at Rate per ms from the state's time.
func (p TokenBucket) resetAt(s *TokenBucketState, now int64) int64 {
	base := max(now, s.Last)
	if s.Tokens >= p.Burst {
		return base
	}
	return base + divCeil((p.Burst-s.Tokens)*1000-s.Credit, p.Rate)
}

// Dead reports whether s, at now, is indistinguishable from a new key's state: the bucket has
// refilled to full by now. Exact because a full bucket holds {Burst, 0} and every later refill
// leaves it at {Burst, 0, t}, which is Fresh(t); a state stamped after now (Last > now) is
// kept, since its refill would start later than a fresh key's.
func (p TokenBucket) Dead(s TokenBucketState, now int64) bool {
	if s.Last > now {
		return false
	}
	p.Refill(&s, now)
	return s.Tokens >= p.Burst && s.Credit == 0
}

// Refund refills s to now and gives back up to cost tokens taken by a request admitted with
// result ResetAtMs resetAt, returning how many it gave back. The tokens given back are exactly
// those that leave s as if the request had cost that much less; see refundable for the rule.
//
// Adding the tokens back capped at Burst is not exact in general: in the bucket that never saw
// the request, a refill that reached Burst lost the overflow (Tokens, Credit saturate to
// {Burst, 0}), and a later take both buckets made draws that bucket below Burst again, so the
// capped sum would then hold more than it does. Example: Burst 10, Rate 1, full; the request
// takes 5; 2 s later both buckets would be full and the charged one holds 7; both take 1 (9 and
// 6): adding 5 back capped gives 10, not 9.
func (p TokenBucket) Refund(s *TokenBucketState, now, cost, resetAt int64) int64 {
	p.Refill(s, now)
	g := refundable(p.Rate, p.FillMs(), resetAt, s.Last, cost)
	// The exact bound keeps the bucket at most full; the clamp only guards a resetAt that no
	// admission returned. Tokens + g == Burst only when Credit is 0, so the state stays canonical.
	g = min(g, (p.Burst*1000-s.Tokens*1000-s.Credit)/1000)
	if g <= 0 {
		return 0
	}
	s.Tokens += g
	return g
}

// refundable is how many of cost units, admitted with result ResetAtMs resetAt, a bucket
// (token bucket, GCRA, leaky bucket) with rate and fill time fillMs can give back exactly at the
// state's time t.
//
// In thousandths, the three share one shape: the amount x (a token bucket's tokens*1000+credit,
// a GCRA's Burst*1000 - lag, a leaky bucket's Capacity*1000 - water) grows by rate a ms and
// saturates at full; an admission of c takes 1000c from it. The bucket that never saw the
// request holds x + 1000k (k units not taken) until the first time that sum would have passed
// full; from then on the difference is lost in a way the state does not record. Other
// admissions only lower both, and other exact refunds are worlds without those requests, so the
// unseen bucket's sum at t is at most x0 + 1000k + rate*(t - t0), where x0 and t0 are the amount
// and time right after the admission. It cannot have saturated while that is at most full:
// rate*(t - t0) <= D - 1000k with D = full - x0, the admission's deficit.
//
// The admission reported resetAt = t0 + ceil(D/rate), so D > rate*(resetAt - t0 - 1); D is a
// multiple of q = gcd(rate, 1000) (the credit only ever moves by rate modulo 1000), as is
// rate*(resetAt - t0 - 1), so D >= rate*(resetAt - t0 - 1) + q. Then the condition holds when
// rate*(resetAt - t - 1) + q >= 1000k, in which t0 cancels out. So the largest exact k is
// floor((rate*(resetAt - t - 1) + q) / 1000): all of cost for a refund soon enough after the
// admission (at once, always when rate divides 1000), fewer or none later. Giving back k leaves
// the state exactly as if the request had cost k less.
func refundable(rate, fillMs, resetAt, t, cost int64) int64 {
	span := resetAt - t - 1
	if span < 0 || cost <= 0 {
		return 0
	}
	span = min(span, fillMs) // a real resetAt is at most fillMs ahead; this only bounds rate*span
	return min(cost, (rate*span+gcd(rate, 1000))/1000)
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
