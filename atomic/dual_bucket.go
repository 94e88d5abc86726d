package atomic

import (
	"math/bits"

	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

// NewDualBucket returns the codec for p (it panics with p.Validate's error if p is not valid). Like every Codec it is immutable
// and safe for concurrent use; its methods may race on one cell (each update is one CAS). Both layouts store the shared last
// refill modulo 2^m ms, decoded as the bucket layouts' times are (see token_bucket.go): both
// buckets are full 60,000 ms after the last refill, within the 2^(m-3) ms that argument needs for
// any m >= 20 (the least a one-word cell takes), and the horizon is 2^(m-2) ms.
//
// One word, with bR = bits.Len(RequestsPerMin), bT = bits.Len(TokensPerMin), each credit (in
// 1/60000) divided by gcd(perMin, 60000) in cR and cT bits, and m = 62 - bR - bT - cR - cT >= 20:
//
//	63   62   61 ... 62-m   ... cT ...     ... cR ...     bR+bT-1 .. bR   bR-1 .. 0
//	Dead Moved  last mod 2^m  token credit  request credit    tokens        requests
//
// For example 500 requests and 30,000 tokens a minute take 9+15+7+1 bits, leaving m = 30, and
// 60 and 100,000 take 6+17+10+2, leaving 27; rates coprime with 60000 need 16-bit credits, so
// then only bR + bT <= 10 fits (31 and 31 do, 31 and 37 do not).
//
// Otherwise two words, m = 30 (horizon 2^28 ms, three days):
//
//	word 0: Dead, Moved, last mod 2^30 (bits 61…32), request credit (31…16), token credit (15…0)
//	word 1: requests<<32 | tokens
func NewDualBucket(config policy.DualBucket) Codec {
	mustBeValid(config)
	p := rules.DualBucket(config)
	c := &dualBucket{p: p, rc: newCreditField(p.RequestsPerMin, rules.DualPeriodMs), tc: newCreditField(p.TokensPerMin, rules.DualPeriodMs)}
	bR, bT := uint(bits.Len64(uint64(p.RequestsPerMin))), uint(bits.Len64(uint64(p.TokensPerMin)))
	if used := bR + bT + c.rc.bits + c.tc.bits; used+minWrapBits <= 62 {
		m := 62 - used
		c.words = 1
		c.tShift, c.rcShift, c.tcShift, c.timeShift = bR, bR+bT, bR+bT+c.rc.bits, used
		c.rMask, c.tMask, c.rcMask, c.tcMask = 1<<bR-1, 1<<bT-1, 1<<c.rc.bits-1, 1<<c.tc.bits-1
		c.t = wrapTime{mask: 1<<m - 1}
		c.horizon = int64(1) << (m - 2)
		return c
	}
	c.words = 2
	c.t = wrapTime{mask: 1<<30 - 1}
	c.horizon = 1 << 28
	return c
}

// dualBucket serves both layouts: the cell width is a field, so one code path decides for both.
type dualBucket struct {
	p      rules.DualBucket
	words  int
	rc, tc creditField // one-word layout only: the two-word one stores credits as they are
	t      wrapTime
	// One-word field positions (the requests sit at bit 0).
	tShift, rcShift, tcShift, timeShift uint
	rMask, tMask, rcMask, tcMask        uint64
	horizon                             int64
}

func (c *dualBucket) Words() int     { return c.words }
func (c *dualBucket) Horizon() int64 { return c.horizon }

// fields splits a cell into its stored time (modulo 2^m) and its four other fields.
func (c *dualBucket) fields(w0, w1 uint64) (t uint64, s rules.DualBucketState) {
	if c.words == 1 {
		s.Requests = int64(w0 & c.rMask)
		s.Tokens = int64(w0 >> c.tShift & c.tMask)
		s.RequestCredit = c.rc.unpack(w0 >> c.rcShift & c.rcMask)
		s.TokenCredit = c.tc.unpack(w0 >> c.tcShift & c.tcMask)
		return w0 >> c.timeShift & c.t.mask, s
	}
	s.Requests, s.Tokens = int64(w1>>32), int64(w1&(1<<32-1))
	s.RequestCredit, s.TokenCredit = int64(w0>>16&0xffff), int64(w0&0xffff)
	return w0 >> 32 & c.t.mask, s
}

func (c *dualBucket) decode(w0, w1 uint64, now int64) rules.DualBucketState {
	t, s := c.fields(w0, w1)
	s.Last = c.t.near(t, now)
	return s
}

func (c *dualBucket) encode(s *rules.DualBucketState) (uint64, uint64) {
	t := uint64(s.Last) & c.t.mask
	if c.words == 1 {
		return t<<c.timeShift | c.tc.pack(s.TokenCredit)<<c.tcShift | c.rc.pack(s.RequestCredit)<<c.rcShift |
			uint64(s.Tokens)<<c.tShift | uint64(s.Requests), 0
	}
	return t<<32 | uint64(s.RequestCredit)<<16 | uint64(s.TokenCredit), uint64(s.Requests)<<32 | uint64(s.Tokens)
}

func (c *dualBucket) Fresh(now int64) (uint64, uint64) {
	s := c.p.Fresh(now)
	return c.encode(&s)
}

// Take writes on every admission, cost 0 included: a call always spends one request.
func (c *dualBucket) Take(cell *uint64, now, cost int64) (policy.Result, Status) {
	for {
		w0, w1 := Load(cell, c.words)
		if w0&Flags != 0 {
			return policy.Result{}, statusOf(w0)
		}
		s := c.decode(w0, w1, now)
		r := c.p.Take(&s, now, cost)
		if !r.Allowed {
			return r, OK
		}
		n0, n1 := c.encode(&s)
		if CompareAndSwap(cell, c.words, w0, w1, n0, n1) {
			return r, OK
		}
	}
}

func (c *dualBucket) Admit(cell *uint64, now, cost int64) (bool, Status) {
	for {
		w0, w1 := Load(cell, c.words)
		if w0&Flags != 0 {
			return false, statusOf(w0)
		}
		s := c.decode(w0, w1, now)
		c.p.Refill(&s, now)
		if s.Requests < 1 || s.Tokens < cost {
			return false, OK
		}
		s.Requests--
		s.Tokens -= cost
		n0, n1 := c.encode(&s)
		if CompareAndSwap(cell, c.words, w0, w1, n0, n1) {
			return true, OK
		}
	}
}

func (c *dualBucket) Peek(cell *uint64, now int64) (policy.Result, policy.Probe, Status) {
	w0, w1 := Load(cell, c.words)
	if w0&Flags != 0 {
		return policy.Result{}, policy.Probe{}, statusOf(w0)
	}
	r, pr := c.p.Peek(c.decode(w0, w1, now), now)
	return r, pr, OK
}

func (c *dualBucket) PeekFresh(now int64) (policy.Result, policy.Probe) {
	return c.p.Peek(c.p.Fresh(now), now)
}

// Dead decodes the time into [ref - M/4, ref + 3M/4) (see token_bucket.go).
func (c *dualBucket) Dead(w0, w1 uint64, ref, now int64) bool {
	t, s := c.fields(w0, w1)
	s.Last = c.t.from(t, ref-c.horizon)
	return c.p.Dead(s, now)
}

// Normalize re-stamps a dead state (both buckets full) with now, keeping its time within the
// horizon of every later reader.
func (c *dualBucket) Normalize(w0, w1 uint64, now int64) (uint64, uint64, bool) {
	f0, f1 := c.Fresh(now)
	return f0, f1, f0 != w0 || f1 != w1
}

// Stale judges both buckets: a key that has taken half of either is not evictable.
func (c *dualBucket) Stale(w0, w1 uint64, now, _ int64) (int64, bool) {
	s := c.decode(w0, w1, now)
	age := now - s.Last
	c.p.Refill(&s, now)
	return age, underHalf(c.p.RequestsPerMin-s.Requests, c.p.RequestsPerMin) && underHalf(c.p.TokensPerMin-s.Tokens, c.p.TokensPerMin)
}
