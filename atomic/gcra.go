package atomic

import (
	"math/bits"
	satomic "sync/atomic"

	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

// NewGCRA returns the codec for p (it panics with p.Validate's error if p is not valid): one word for every Rate and Burst, as
// cheap as the sliding counter's smallest cell. Like every Codec it is immutable and safe for
// concurrent use; its methods may race on one cell (each update is one CAS).
//
//	63   62   61 ................................. 0
//	Dead Moved  TAT mod 2^62 (scaled: 1 ms = Rate, one permit = 1000)
//
// policy.GCRA keeps the TAT modulo 2^64 and reads it only through the lag TAT - now*Rate; the cell
// keeps it modulo 2^62, and a reader recovers the lag as the 62-bit difference sign-extended,
// which is exact while the true lag lies in [-2^61, 2^61). A live lag is at most Burst*1000 < 2^42
// (plus Rate per ms that a racing writer's clock ran ahead); a full bucket's lag falls by Rate a
// ms. The horizon, 2^59/Rate ms (at least 2^27 ms, 37 hours), keeps it in range: a state that is
// not full when the shard's sweep visits it at v >= ref has TAT > v*Rate; a full one is evicted
// there or re-encoded as Fresh(v); one written since has TAT >= its writer's now*Rate, and a
// writer may have stalled up to 2^59/Rate ms after reading its clock. So at any decision at
// now < ref + horizon the lag exceeds -2^60. Dead decodes relative to the sweep instead, into
// [ref*Rate - 2^60, ref*Rate + 3*2^60).
//
// A state is created only on admission: MaxCost tells the engine to refuse a cost above
// Burst before any lookup, and a new key's bucket is full, so it admits any other cost.
func NewGCRA(config policy.GCRA) Codec {
	mustBeValid(config)
	p := rules.GCRA(config)
	h := int64(1<<59) / p.Rate
	return &gcraWord{p: p, rate: uint64(p.Rate), horizon: h}
}

const gcraMask = 1<<62 - 1

type gcraWord struct {
	p       rules.GCRA
	rate    uint64
	horizon int64
}

func (c *gcraWord) Words() int     { return 1 }
func (c *gcraWord) Horizon() int64 { return c.horizon }

// MaxCost returns Burst: GCRA refuses a larger cost before any lookup, creating no state
// (rules.GCRA.CheckCost).
func (c *gcraWord) MaxCost() int64 { return c.p.Burst }

// decode returns the TAT modulo 2^64 that w holds, read at now, and now*Rate.
func (c *gcraWord) decode(w uint64, now int64) (tat, sc uint64) {
	sc = uint64(now) * c.rate
	lag := int64((w-sc)<<2) >> 2 // the 62-bit difference, sign-extended
	return sc + uint64(lag), sc
}

func (c *gcraWord) Fresh(now int64) (uint64, uint64) { return uint64(now) * c.rate & gcraMask, 0 }

func (c *gcraWord) Take(cell *uint64, now, cost int64) (policy.Result, Status) {
	for {
		w := satomic.LoadUint64(cell)
		if w&Flags != 0 {
			return policy.Result{}, statusOf(w)
		}
		tat, _ := c.decode(w, now)
		s := rules.GCRAState{TAT: tat}
		r := c.p.Take(&s, now, cost)
		// Cost 0 may only move a TAT in the past up to now: a full bucket either way.
		if !r.Allowed || cost == 0 {
			return r, OK
		}
		if satomic.CompareAndSwapUint64(cell, w, s.TAT&gcraMask) {
			return r, OK
		}
	}
}

func (c *gcraWord) Admit(cell *uint64, now, cost int64) (bool, Status) {
	for {
		w := satomic.LoadUint64(cell)
		if w&Flags != 0 {
			return false, statusOf(w)
		}
		tat, sc := c.decode(w, now)
		lag := int64(tat - sc)
		if cost > c.p.Burst || lag > (c.p.Burst-cost)*1000 {
			return false, OK
		}
		if cost == 0 {
			return true, OK
		}
		n := sc + uint64(max(lag, 0)+cost*1000)
		if satomic.CompareAndSwapUint64(cell, w, n&gcraMask) {
			return true, OK
		}
	}
}

func (c *gcraWord) Peek(cell *uint64, now int64) (policy.Result, policy.Probe, Status) {
	w := satomic.LoadUint64(cell)
	if w&Flags != 0 {
		return policy.Result{}, policy.Probe{}, statusOf(w)
	}
	tat, _ := c.decode(w, now)
	r, pr := c.p.Peek(rules.GCRAState{TAT: tat}, now)
	return r, pr, OK
}

func (c *gcraWord) PeekFresh(now int64) (policy.Result, policy.Probe) {
	return c.p.Peek(c.p.Fresh(now), now)
}

// Dead reads the lag at ref, exact as explained above, and compares it with the refill from ref to
// now in 128 bits: a sweeper running late (a paused process, a manual clock's jump) may be any
// distance past ref, where the lag at now would not fit 64 bits. The state is dead iff its lag at
// now, lagRef - (now - ref)*Rate, is at most 0.
func (c *gcraWord) Dead(w0, _ uint64, ref, now int64) bool {
	base := uint64(ref)*c.rate - 1<<60
	lagRef := int64(base + (w0-base)&gcraMask - uint64(ref)*c.rate) // in [-2^60, 3*2^60)
	d := now - ref
	if d < 0 {
		hi, lo := bits.Mul64(uint64(-d), c.rate)
		return hi == 0 && lo < 1<<62 && lagRef <= -int64(lo)
	}
	hi, lo := bits.Mul64(uint64(d), c.rate)
	return hi != 0 || lo >= 1<<62 || lagRef <= int64(lo)
}

// Normalize moves a dead TAT (at or before now*Rate: a full bucket) up to now*Rate, keeping its
// lag within the horizon of every later reader.
func (c *gcraWord) Normalize(w0, _ uint64, now int64) (uint64, uint64, bool) {
	f, _ := c.Fresh(now)
	return f, 0, f != w0
}

// Stale reports, for want of a last-update time (the TAT does not keep one), the ms of refill the
// bucket holds, (Burst*1000 - lag) / Rate: it grows by one for every ms a key is left alone, and
// is largest for the fullest bucket, whose eviction changes the least. What the key holds is
// judged in whole permits, Burst minus the whole tokens left, as the token bucket judges it and
// as Inspect reports it: the lag (1000 a permit) rounded up. Judged on the exact lag, a key that
// took half its burst would turn evictable a millisecond later, with Inspect still showing half
// taken. No overflow: the decoded lag lies in [-2^61, 2^61).
func (c *gcraWord) Stale(w0, _ uint64, now, _ int64) (int64, bool) {
	tat, sc := c.decode(w0, now)
	lag := int64(tat - sc)
	tokens := max(c.p.Burst*1000-max(lag, 0), 0) / 1000
	return (c.p.Burst*1000 - lag) / c.p.Rate, underHalf(c.p.Burst-tokens, c.p.Burst)
}

// Refund moves the TAT back for the permits that rules.GCRA.Refund finds exact. Their lag stays
// non-negative and at most Burst*1000, well inside the 62-bit cell's exact range.
func (c *gcraWord) Refund(cell *uint64, clock func() int64, cost, resetAt int64) (int64, Status) {
	for {
		w := satomic.LoadUint64(cell)
		if w&Flags != 0 {
			return 0, statusOf(w)
		}
		now := clock() // read after the load: no earlier than any admission the cell holds
		tat, _ := c.decode(w, now)
		s := rules.GCRAState{TAT: tat}
		g := c.p.Refund(&s, now, cost, resetAt)
		if g == 0 || satomic.CompareAndSwapUint64(cell, w, s.TAT&gcraMask) {
			return g, OK
		}
	}
}
