package rules

import "github.com/slidelimit/slidelimit/policy"

// LeakyBucket (as a meter) admits while the bucket, draining at Rate units per second, has room
// for the cost below Capacity. Unlike a token bucket, an idle key banks nothing beyond an empty
// bucket: the policy smooths traffic towards Rate with at most Capacity queued.
//
// Per key: LeakyBucketState, 24 bytes as a Go struct. Its information fits in 32 bits of level
// (<= Capacity <= MaxLimit), 10 bits of credit (< 1000) and one timestamp, for a packed cell.
//
// The drain is exact integer arithmetic with the thousandths already drained from the next unit
// carried in Credit (see docs/policies.md): the water in the bucket is Level*1000 - Credit thousandths,
// and it falls by exactly Rate per ms until empty, so draining in several steps gives the same
// bucket as one step over the whole span. Overflow: a gap above 2^30 ms is clamped to DrainMs
// before the multiply, so Rate*dt is below max(2^32 * 2^30, Capacity*1000 + Rate) = 2^62 for every
// Rate and Capacity up to MaxLimit.
//
// A LeakyBucket is a plain value: safe to copy and to use from any number of goroutines. Its
// methods are pure functions of their arguments; a state is owned by its caller, and concurrent
// Takes on one state must be serialized by the caller (the engine's CAS loop does that).
type LeakyBucket policy.LeakyBucket

// LeakyBucketState is one key's bucket: the level in whole units, the thousandths already
// drained from the next unit (0 … 999; always 0 when empty) and the time of the last drain in
// ms. It is a plain value owned by its holder.
type LeakyBucketState struct {
	Level  int64
	Credit int64
	Last   int64
}

// DrainMs returns how long a full bucket takes to empty: ceil(Capacity*1000 / Rate) ms.
func (p LeakyBucket) DrainMs() int64 { return divCeil(p.Capacity*1000, p.Rate) }

// Fresh returns a new key's state at now: an empty bucket.
func (p LeakyBucket) Fresh(now int64) LeakyBucketState { return LeakyBucketState{Last: now} }

// Drain brings s forward to now. A state whose Last is at or after now (a racing goroutine read
// the clock a moment later) is left as it is, so time never runs backwards for a key.
func (p LeakyBucket) Drain(s *LeakyBucketState, now int64) {
	dt := now - s.Last
	if dt <= 0 {
		return
	}
	// The clamp only avoids overflow, as DrainMs of draining already empties any bucket. Below
	// 2^30 ms, Rate*dt < 2^62 needs none, which spares a division on the hot path.
	if dt > 1<<30 {
		dt = min(dt, p.DrainMs())
	}
	s.Credit += p.Rate * dt
	drained := s.Credit / 1000
	s.Credit %= 1000
	if drained >= s.Level {
		s.Level, s.Credit = 0, 0
	} else {
		s.Level -= drained
	}
	s.Last = now
}

// Take drains s to now and decides a request of cost units, adding them to the level when
// admitted. Cost 0 is always admitted and adds nothing; a cost above Capacity is refused with
// RetryAfterMs 0; a refused request adds nothing (only the drain, invisible to every decision,
// remains). Remaining is the room left, Capacity - Level; ResetAtMs is when the bucket will be
// empty again (now when it is empty). cost must not be negative.
func (p LeakyBucket) Take(s *LeakyBucketState, now, cost int64) policy.Result {
	p.Drain(s, now)
	r := policy.Result{Limit: p.Capacity}
	// cost <= room rather than level+cost <= Capacity: cost may be any int64.
	if cost <= p.Capacity-s.Level {
		s.Level += cost
		r.Allowed = true
	} else if cost <= p.Capacity {
		r.RetryAfterMs = p.wait(s, now, cost)
	}
	r.Remaining = p.Capacity - s.Level
	r.ResetAtMs = p.resetAt(s, now)
	return r
}

// Peek drains a copy of s to now and reports what a unit request would get, changing nothing.
// Probe.Level is the level (docs/policies.md's levelOf).
func (p LeakyBucket) Peek(s LeakyBucketState, now int64) (policy.Result, policy.Probe) {
	p.Drain(&s, now)
	r := policy.Result{Allowed: s.Level < p.Capacity, Limit: p.Capacity, Remaining: p.Capacity - s.Level, ResetAtMs: p.resetAt(&s, now)}
	if !r.Allowed {
		r.RetryAfterMs = p.wait(&s, now, 1)
	}
	return r, policy.Probe{Level: s.Level}
}

// wait solves for the least wait after which cost (Capacity - Level < cost <= Capacity) fits,
// with no other traffic. The level after draining is ceil(water / 1000) with water =
// Level*1000 - Credit - Rate*dt, so the cost fits once water <= (Capacity - cost)*1000, that is
// after ceil(((Level + cost - Capacity)*1000 - Credit) / Rate) ms from the state's time. For
// cost 1 and a full bucket that is docs/policies.md's ceilDiv(1000 - credit, ratePerSec). The need is
// at most Capacity*1000, so the wait is at most DrainMs and the clamp in Drain never bites.
func (p LeakyBucket) wait(s *LeakyBucketState, now, cost int64) int64 {
	return max(s.Last-now, 0) + divCeil((s.Level+cost-p.Capacity)*1000-s.Credit, p.Rate)
}

// resetAt is when the bucket is empty again: its water, Level*1000 - Credit thousandths,
// drained at Rate per ms from the state's time.
func (p LeakyBucket) resetAt(s *LeakyBucketState, now int64) int64 {
	base := max(now, s.Last)
	if s.Level == 0 {
		return base
	}
	return base + divCeil(s.Level*1000-s.Credit, p.Rate)
}

// Dead reports whether s, at now, is indistinguishable from a new key's state: the bucket has
// drained empty by now. Exact because an empty bucket holds {0, 0} and every later drain leaves
// it at {0, 0, t}, which is Fresh(t); a state stamped after now (Last > now) is kept, since its
// drain would start later than a fresh key's.
func (p LeakyBucket) Dead(s LeakyBucketState, now int64) bool {
	if s.Last > now {
		return false
	}
	p.Drain(&s, now)
	return s.Level == 0 && s.Credit == 0
}

// Refund drains s to now and takes out of the level up to cost units added by a request admitted
// with result ResetAtMs resetAt, returning how many it took out. It gives back exactly what leaves
// s as if the request had cost that much less (see refundable, with the water's room below
// Capacity as the amount).
//
// Taking the units out floored at 0 is not exact in general, for the token bucket's reason
// mirrored: the bucket that never saw the request may have drained empty (Level, Credit
// saturate to {0, 0}) and filled again with later requests, and the floored difference would
// then leave less water than it holds.
func (p LeakyBucket) Refund(s *LeakyBucketState, now, cost, resetAt int64) int64 {
	p.Drain(s, now)
	g := refundable(p.Rate, p.DrainMs(), resetAt, s.Last, cost)
	// The exact bound keeps the water at or above zero; the clamp only guards a resetAt that no
	// admission returned. Level - g reaches 0 only when Credit is 0, so the state stays canonical.
	g = min(g, (s.Level*1000-s.Credit)/1000)
	if g <= 0 {
		return 0
	}
	s.Level -= g
	return g
}
