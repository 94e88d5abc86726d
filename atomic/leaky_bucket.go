package atomic

import (
	"math"
	satomic "sync/atomic"

	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

// NewLeakyBucket returns the codec for p (it panics with p.Validate's error if p is not valid). Like every Codec it is immutable
// and safe for concurrent use; its methods may race on one cell (each update is one CAS).
//
// One word when the bucket fits (see bucketWord: the level in b = bits.Len(Capacity) bits, the
// credit in thousandths divided by gcd(Rate, 1000), the last drain modulo 2^m ms), which needs
// m = 62 - b - creditBits >= 20 and DrainMs <= 2^(m-3): for example any Capacity up to 2^20 whose
// DrainMs is at most 2^28 ms (3.1 days), or Rate = Capacity = 2^32-1. Horizon 2^(m-2) ms.
//
// Otherwise two words: word 0 is the last drain in ms (below 2^62 for any epoch time), word 1 is
// level<<32 | credit. Nothing wraps: the horizon is unbounded.
func NewLeakyBucket(config policy.LeakyBucket) Codec {
	mustBeValid(config)
	p := rules.LeakyBucket(config)
	if l, ok := newBucketWord(p.Capacity, p.Rate, 1000, p.DrainMs()); ok {
		return &leakyBucketWord{p: p, l: l}
	}
	return &leakyBucketPair{p: p}
}

type leakyBucketWord struct {
	p rules.LeakyBucket
	l bucketWord
}

func (c *leakyBucketWord) Words() int     { return 1 }
func (c *leakyBucketWord) Horizon() int64 { return c.l.horizon }

func (c *leakyBucketWord) decode(w uint64, now int64) rules.LeakyBucketState {
	t, cr, last := c.l.unpack(w, now)
	return rules.LeakyBucketState{Level: t, Credit: cr, Last: last}
}

func (c *leakyBucketWord) encode(s *rules.LeakyBucketState) uint64 {
	return c.l.pack(s.Level, s.Credit, s.Last)
}

func (c *leakyBucketWord) Fresh(now int64) (uint64, uint64) {
	s := c.p.Fresh(now)
	return c.encode(&s), 0
}

func (c *leakyBucketWord) Take(cell *uint64, now, cost int64) (policy.Result, Status) {
	for {
		w := satomic.LoadUint64(cell)
		if w&Flags != 0 {
			return policy.Result{}, statusOf(w)
		}
		s := c.decode(w, now)
		r := c.p.Take(&s, now, cost)
		if !r.Allowed || cost == 0 {
			return r, OK // nothing added; the drain alone is invisible to every decision
		}
		if satomic.CompareAndSwapUint64(cell, w, c.encode(&s)) {
			return r, OK
		}
	}
}

func (c *leakyBucketWord) Admit(cell *uint64, now, cost int64) (bool, Status) {
	for {
		w := satomic.LoadUint64(cell)
		if w&Flags != 0 {
			return false, statusOf(w)
		}
		s := c.decode(w, now)
		c.p.Drain(&s, now)
		if cost > c.p.Capacity-s.Level {
			return false, OK
		}
		if cost == 0 {
			return true, OK
		}
		s.Level += cost
		if satomic.CompareAndSwapUint64(cell, w, c.encode(&s)) {
			return true, OK
		}
	}
}

func (c *leakyBucketWord) Peek(cell *uint64, now int64) (policy.Result, policy.Probe, Status) {
	w := satomic.LoadUint64(cell)
	if w&Flags != 0 {
		return policy.Result{}, policy.Probe{}, statusOf(w)
	}
	r, pr := c.p.Peek(c.decode(w, now), now)
	return r, pr, OK
}

func (c *leakyBucketWord) PeekFresh(now int64) (policy.Result, policy.Probe) {
	return c.p.Peek(c.p.Fresh(now), now)
}

func (c *leakyBucketWord) Dead(w0, _ uint64, ref, now int64) bool {
	t, cr, last := c.l.unpackSince(w0, ref)
	return c.p.Dead(rules.LeakyBucketState{Level: t, Credit: cr, Last: last}, now)
}

// Normalize re-stamps a dead bucket (empty, whatever its time) with now, so that its time stays
// within the horizon of every later reader.
func (c *leakyBucketWord) Normalize(w0, _ uint64, now int64) (uint64, uint64, bool) {
	f, _ := c.Fresh(now)
	return f, 0, f != w0
}

func (c *leakyBucketWord) Stale(w0, _ uint64, now, _ int64) (int64, bool) {
	s := c.decode(w0, now)
	age := now - s.Last
	c.p.Drain(&s, now)
	return age, underHalf(s.Level, c.p.Capacity)
}

type leakyBucketPair struct{ p rules.LeakyBucket }

func (c *leakyBucketPair) Words() int     { return 2 }
func (c *leakyBucketPair) Horizon() int64 { return math.MaxInt64 }

func (c *leakyBucketPair) decode(w0, w1 uint64) rules.LeakyBucketState {
	return rules.LeakyBucketState{Level: int64(w1 >> 32), Credit: int64(w1 & math.MaxUint32), Last: int64(w0)}
}

func (c *leakyBucketPair) encode(s *rules.LeakyBucketState) (uint64, uint64) {
	return uint64(s.Last), uint64(s.Level)<<32 | uint64(s.Credit)
}

func (c *leakyBucketPair) Fresh(now int64) (uint64, uint64) {
	s := c.p.Fresh(now)
	return c.encode(&s)
}

func (c *leakyBucketPair) Take(cell *uint64, now, cost int64) (policy.Result, Status) {
	p := pair(cell)
	for {
		w0, w1 := load128(p)
		if w0&Flags != 0 {
			return policy.Result{}, statusOf(w0)
		}
		s := c.decode(w0, w1)
		r := c.p.Take(&s, now, cost)
		if !r.Allowed || cost == 0 {
			return r, OK
		}
		n0, n1 := c.encode(&s)
		if cas128(p, w0, w1, n0, n1) {
			return r, OK
		}
	}
}

func (c *leakyBucketPair) Admit(cell *uint64, now, cost int64) (bool, Status) {
	p := pair(cell)
	for {
		w0, w1 := load128(p)
		if w0&Flags != 0 {
			return false, statusOf(w0)
		}
		s := c.decode(w0, w1)
		c.p.Drain(&s, now)
		if cost > c.p.Capacity-s.Level {
			return false, OK
		}
		if cost == 0 {
			return true, OK
		}
		s.Level += cost
		n0, n1 := c.encode(&s)
		if cas128(p, w0, w1, n0, n1) {
			return true, OK
		}
	}
}

func (c *leakyBucketPair) Peek(cell *uint64, now int64) (policy.Result, policy.Probe, Status) {
	w0, w1 := load128(pair(cell))
	if w0&Flags != 0 {
		return policy.Result{}, policy.Probe{}, statusOf(w0)
	}
	r, pr := c.p.Peek(c.decode(w0, w1), now)
	return r, pr, OK
}

func (c *leakyBucketPair) PeekFresh(now int64) (policy.Result, policy.Probe) {
	return c.p.Peek(c.p.Fresh(now), now)
}

func (c *leakyBucketPair) Dead(w0, w1 uint64, _, now int64) bool {
	return c.p.Dead(c.decode(w0, w1), now)
}

func (c *leakyBucketPair) Normalize(w0, w1 uint64, _ int64) (uint64, uint64, bool) {
	return w0, w1, false // nothing wraps: a dead state needs no re-encoding
}

func (c *leakyBucketPair) Stale(w0, w1 uint64, now, _ int64) (int64, bool) {
	s := c.decode(w0, w1)
	age := now - s.Last
	c.p.Drain(&s, now)
	return age, underHalf(s.Level, c.p.Capacity)
}

// Refund takes out of the level the units that rules.LeakyBucket.Refund finds exact, drained
// to now.
func (c *leakyBucketWord) Refund(cell *uint64, clock func() int64, cost, resetAt int64) (int64, Status) {
	for {
		w := satomic.LoadUint64(cell)
		if w&Flags != 0 {
			return 0, statusOf(w)
		}
		now := clock() // read after the load: no earlier than any admission the cell holds
		s := c.decode(w, now)
		g := c.p.Refund(&s, now, cost, resetAt)
		if g == 0 || satomic.CompareAndSwapUint64(cell, w, c.encode(&s)) {
			return g, OK
		}
	}
}

// Refund is leakyBucketWord.Refund for the two-word cell.
func (c *leakyBucketPair) Refund(cell *uint64, clock func() int64, cost, resetAt int64) (int64, Status) {
	p := pair(cell)
	for {
		w0, w1 := load128(p)
		if w0&Flags != 0 {
			return 0, statusOf(w0)
		}
		now := clock() // read after the load: no earlier than any admission the cell holds
		s := c.decode(w0, w1)
		g := c.p.Refund(&s, now, cost, resetAt)
		n0, n1 := c.encode(&s)
		if g == 0 || cas128(p, w0, w1, n0, n1) {
			return g, OK
		}
	}
}
