package rules

import (
	"math"

	"github.com/slidelimit/slidelimit/policy"
)

// GCRA is the generic cell rate algorithm: the token bucket's decisions from one 64-bit word per
// key, the theoretical arrival time (TAT). Time is scaled so that 1 ms = Rate units and one permit
// = 1000 units (docs/policies.md); the bucket's deficit, in thousandths of a permit, is the lag
// TAT - now*Rate when positive, and the bucket is full when the lag is zero or negative.
// With the same Rate and Burst, GCRA and TokenBucket admit and refuse exactly the same requests
// and report the same Result on any sequence with non-decreasing times. On a time earlier than a
// key's last admission GCRA is the stricter of the two (it cannot tell, and counts the gap as a
// larger deficit).
//
// # Representation and range
//
// Scaled time overflows an int64: now*Rate reaches 2^72 for today's Unix milliseconds at Rate
// 2^32-1. So the state holds the scaled TAT modulo 2^64, and every rule reads it only through the
// lag, computed by wrapping subtraction: TAT - uint64(now)*uint64(Rate), read as an int64. That
// is exact whenever the true lag lies in [-2^63, 2^63): always while the bucket is short
// (0 < lag <= Burst*1000 < 2^42), and for a full bucket whose last admission is at most
// MaxIdleMs ago (the lag then is at least -(now - last)*Rate). Every Rate and Burst up to MaxLimit
// and every now >= 0 are accepted.
//
// What the engine must do: (1) refuse a cost that CheckCost rejects before looking the key up,
// creating no state (docs/policies.md); GCRA creates state only on admission. (2) Never read a state
// more than MaxIdleMs after its last admission: forget it (it is Dead long before, as soon as the
// bucket is full) or replace it by Fresh(now), which changes no decision. The evictor does this
// for free; with eviction off the engine must still visit GCRA keys at least every MaxIdleMs. For
// Rate <= 2^20 MaxIdleMs is at least 2^43-1 ms (278 years), so (2) only matters for faster rates; at
// Rate 2^32-1 it is 2^31 ms (24.8 days). A state read later than that may be misjudged as holding
// a deficit.
//
// Per key: GCRAState, one uint64 (8 bytes).
//
// A GCRA is a plain value: safe to copy and to use from any number of goroutines. Its methods are
// pure functions of their arguments; a state is owned by its caller, and concurrent Takes on one
// state must be serialized by the caller (the engine's CAS loop does that).
type GCRA policy.GCRA

// GCRAState is one key's theoretical arrival time in scaled units (ms * Rate), modulo 2^64.
// It is a plain value owned by its holder. The zero state is not a new key's state in general:
// use Fresh.
type GCRAState struct {
	TAT uint64
}

// CheckCost reports whether a request of cost (>= 0) can ever be admitted, that is cost <= Burst.
// The engine calls it before looking the key up and refuses a false one without creating state.
func (p GCRA) CheckCost(cost int64) bool { return cost <= p.Burst }

// FillMs returns how long an empty bucket takes to fill, ceil(Burst*1000 / Rate) ms, as
// TokenBucket.FillMs does: FillMs after its last admission a key's state is a new key's.
func (p GCRA) FillMs() int64 { return divCeil(p.Burst*1000, p.Rate) }

// MaxIdleMs is how long after its last admission a state stays exact: (2^63-1) / Rate ms. See
// the type's documentation; the engine must forget or refresh a state before it is that old.
func (p GCRA) MaxIdleMs() int64 { return math.MaxInt64 / p.Rate }

// scaled is now*Rate modulo 2^64.
func (p GCRA) scaled(now int64) uint64 { return uint64(now) * uint64(p.Rate) }

// Fresh returns a new key's state at now: TAT = now*Rate, a full bucket.
func (p GCRA) Fresh(now int64) GCRAState { return GCRAState{TAT: p.scaled(now)} }

// Take decides a request of cost permits at now, advancing TAT by cost*1000 when admitted.
// docs/policies.md's "refuse iff s < tat - tolerance + (cost-1)*1000" is, in terms of the lag,
// "refuse iff lag > (Burst - cost)*1000", and "store max(s, tat) + cost*1000" is
// "store s + max(lag, 0) + cost*1000". Cost 0 is admitted (for any non-decreasing time); a cost
// above Burst is refused, changes nothing, and has RetryAfterMs 0; a refused request changes
// nothing. Remaining is the whole permits available now (tokensOf); ResetAtMs is when the bucket
// is full again, ceil(TAT / Rate) (now when it is full).
//
// Overflow: the lag of a state within MaxIdleMs is exact; the stored lag after admission is at most
// (Burst - cost)*1000 + cost*1000 = Burst*1000 < 2^42.
func (p GCRA) Take(s *GCRAState, now, cost int64) policy.Result {
	sc := p.scaled(now)
	lag := int64(s.TAT - sc)
	r := policy.Result{Limit: p.Burst}
	if cost <= p.Burst {
		if room := (p.Burst - cost) * 1000; lag <= room {
			lag = max(lag, 0) + cost*1000
			s.TAT = sc + uint64(lag)
			r.Allowed = true
		} else {
			r.RetryAfterMs = divCeil(lag-room, p.Rate)
		}
	}
	r.Remaining = p.tokens(lag)
	r.ResetAtMs = now + divCeil(max(lag, 0), p.Rate)
	return r
}

// Peek reports what a unit request would get at now, changing nothing. Probe.Tokens is
// docs/policies.md's tokensOf.
//
// RetryAfterMs is docs/policies.md's ceilDiv(target, rate) - now with target = TAT - (Burst-1)*1000;
// as now*Rate is a whole number of ms, that is ceil((lag - (Burst-1)*1000) / Rate). It equals the
// token bucket's ceil((1000 - credit) / Rate) because the lag is exactly the bucket's deficit.
func (p GCRA) Peek(s GCRAState, now int64) (policy.Result, policy.Probe) {
	lag := int64(s.TAT - p.scaled(now))
	room := (p.Burst - 1) * 1000
	tokens := p.tokens(lag)
	r := policy.Result{Allowed: lag <= room, Limit: p.Burst, Remaining: tokens, ResetAtMs: now + divCeil(max(lag, 0), p.Rate)}
	if !r.Allowed {
		r.RetryAfterMs = divCeil(lag-room, p.Rate)
	}
	return r, policy.Probe{Tokens: tokens}
}

// tokens is docs/policies.md's tokensOf: avail = s - (tat - Burst*1000) = Burst*1000 - lag, whole
// permits, at most Burst. A lag at or below zero is a full bucket (and must not be subtracted:
// it may be near -2^63).
func (p GCRA) tokens(lag int64) int64 {
	if lag <= 0 {
		return p.Burst
	}
	avail := p.Burst*1000 - lag
	if avail <= 0 {
		return 0
	}
	return avail / 1000
}

// Dead reports whether s, at now, is indistinguishable from a new key's state: the lag is zero or
// negative (TAT <= now*Rate), a full bucket. Exact because every rule reads the lag only through
// max(lag, 0) or through comparisons with non-negative bounds, which any lag <= 0 passes alike, at
// now and at every later time (the lag only falls as time passes, until MaxIdleMs).
func (p GCRA) Dead(s GCRAState, now int64) bool { return int64(s.TAT-p.scaled(now)) <= 0 }

// Refund moves s's TAT back for up to cost permits taken by a request admitted at result
// ResetAtMs resetAt, and returns how many it gave back. The lag is the equivalent token
// bucket's deficit, so the token bucket's rule applies as it is (see refundable): moving the TAT
// back by 1000 per permit is exact while the bucket that never saw the request cannot have
// filled, which also keeps the TAT at or after now*Rate; past that, lowering it to
// max(TAT - cost*1000, now*Rate) would, like the token bucket's capped add, credit permits that
// bucket has since lost.
func (p GCRA) Refund(s *GCRAState, now, cost, resetAt int64) int64 {
	sc := p.scaled(now)
	lag := int64(s.TAT - sc)
	g := refundable(p.Rate, p.FillMs(), resetAt, now, cost)
	// The exact bound keeps the lag non-negative; the clamp only guards a resetAt that no
	// admission returned.
	g = min(g, max(lag, 0)/1000)
	if g <= 0 {
		return 0
	}
	s.TAT = sc + uint64(lag-g*1000)
	return g
}
