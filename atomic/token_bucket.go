package atomic

import (
	"math"
	"math/bits"
	satomic "sync/atomic"

	"github.com/slidelimit/slidelimit/internal/fastdiv"
	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

// This file holds the token bucket's codec and the one-word bucket layout that the leaky bucket
// shares with it.
//
// A bucket's time (its last refill or drain) is stored modulo 2^m ms in a one-word cell, and
// decoded as the one nearest to the reader's now (or, in Dead, as the one in a range anchored at
// the shard's last sweep), exactly as the sliding counter's window index is. The argument that no
// live time can be mistaken for another, with M = 2^m and fill the time the bucket takes to fill
// (or drain) completely:
//
//   - A one-word cell is only used when fill <= M/8, and the codec's horizon is M/4: a decision at
//     now finds its shard swept by a pass that began at ref > now - M/4, or sweeps it first.
//   - That pass saw every state still in the cell and left only live ones: a state not yet full
//     at the visit v >= ref has last > v - fill >= ref - M/8; a dead one was evicted or
//     re-encoded as Fresh(v). A state written since has last >= its writer's now, which a writer
//     stalled between reading the clock and its compare-and-swap may hold for a while: up to M/8
//     more is tolerated.
//   - So now - last < M/4 + M/4 = M/2, and a racing writer whose clock read later is ahead of the
//     reader by far less than M/2: the nearest decoding is exact. Dead decodes into
//     [ref - M/4, ref + 3M/4), which holds every live state even for a sweeper running late.
//
// A full token bucket (an empty leaky bucket) keeps its time too: Fresh(now) stamps now. It could
// be stored without one, as every full bucket decides alike from then on, but not for a reader
// whose clock reading is older than the stamp (a goroutine that read the clock, stalled, and found
// the key evicted and revived meanwhile): with the stamp it refills from the revival, as a reader
// of any other state refills from that state's time; without it, it would refill from its own
// older time and bank the gap twice.

// minWrapBits is the fewest time bits a one-word bucket cell accepts: a horizon of at least 2^18
// ms (4.4 minutes), several sweep periods (at most a minute).
const minWrapBits = 20

// wrapTime decodes times stored modulo 2^m ms.
type wrapTime struct{ mask uint64 }

// near returns the time congruent to t that is nearest to now, in [now - M/2 + 1, now + M/2].
func (w wrapTime) near(t uint64, now int64) int64 {
	d := (uint64(now) - t) & w.mask
	back := int64(d)
	if d > w.mask>>1 {
		back -= int64(w.mask) + 1 // the writer's clock was ahead of ours
	}
	return now - back
}

// from returns the time congruent to t in [lo, lo + M).
func (w wrapTime) from(t uint64, lo int64) int64 { return lo + int64((t-uint64(lo))&w.mask) }

// creditField stores a bucket's credit (0 … unit-1, always a multiple of q = gcd(rate, unit),
// since it starts at 0, grows by rate per ms and is reduced modulo unit) as credit/q, in
// bits.Len(unit/q - 1) bits: 4 bits instead of 10 for 100 tokens a second.
type creditField struct {
	q    int64
	div  fastdiv.Divisor
	bits uint
}

func newCreditField(rate, unit int64) creditField {
	q := gcd(rate, unit)
	return creditField{q: q, div: fastdiv.New(uint64(q)), bits: uint(bits.Len64(uint64(unit/q - 1)))}
}

func (f creditField) pack(credit int64) uint64 { return f.div.Div(uint64(credit)) }
func (f creditField) unpack(v uint64) int64    { return int64(v) * f.q }

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// bucketWord is the one-word layout of a bucket with one amount (tokens, or the leaky bucket's
// level) of at most capacity, a credit in 1/unit and a time:
//
//	63   62   61 ......... b+c   b+c-1 .... b   b-1 ...... 0
//	Dead Moved  last mod 2^m      credit / q      amount
//
// with b = bits.Len(capacity), c = the credit field's bits and m = 62 - b - c. It is used when
// m >= 20 and fill <= 2^(m-3) ms.
type bucketWord struct {
	b, at   uint // amount bits; shift of the time field
	amask   uint64
	cmask   uint64
	credit  creditField
	t       wrapTime
	horizon int64
}

// newBucketWord returns the layout for a bucket, or ok = false when one word cannot hold it.
func newBucketWord(capacity, rate, unit, fill int64) (l bucketWord, ok bool) {
	b := uint(bits.Len64(uint64(capacity)))
	cf := newCreditField(rate, unit)
	if b+cf.bits+minWrapBits > 62 {
		return l, false
	}
	m := 62 - b - cf.bits
	if fill > int64(1)<<(m-3) {
		return l, false
	}
	return bucketWord{
		b: b, at: b + cf.bits, amask: 1<<b - 1, cmask: 1<<cf.bits - 1, credit: cf,
		t: wrapTime{mask: 1<<m - 1}, horizon: int64(1) << (m - 2),
	}, true
}

func (l *bucketWord) pack(amount, credit, last int64) uint64 {
	return (uint64(last)&l.t.mask)<<l.at | l.credit.pack(credit)<<l.b | uint64(amount)
}

// unpack decodes w at now (see the file comment).
func (l *bucketWord) unpack(w uint64, now int64) (amount, credit, last int64) {
	return int64(w & l.amask), l.credit.unpack(w >> l.b & l.cmask), l.t.near(w>>l.at&l.t.mask, now)
}

// unpackSince decodes w for Dead, whose ref is the start of the shard's last complete sweep.
func (l *bucketWord) unpackSince(w uint64, ref int64) (amount, credit, last int64) {
	return int64(w & l.amask), l.credit.unpack(w >> l.b & l.cmask), l.t.from(w>>l.at&l.t.mask, ref-l.horizon)
}

// NewTokenBucket returns the codec for p (it panics with p.Validate's error if p is not valid). Like every Codec it is immutable
// and safe for concurrent use; its methods may race on one cell (each update is one CAS).
//
// One word when the bucket fits (see bucketWord: tokens in b = bits.Len(Burst) bits, the credit
// in thousandths divided by gcd(Rate, 1000), the last refill modulo 2^m ms), which needs
// m = 62 - b - creditBits >= 20 and FillMs <= 2^(m-3): for example any Burst up to 2^20 whose
// FillMs is at most 2^28 ms (3.1 days), or Rate = Burst = 2^32-1. Horizon 2^(m-2) ms.
//
// Otherwise two words: word 0 is the last refill in ms (below 2^62 for any epoch time), word 1
// is tokens<<32 | credit. Nothing wraps: the horizon is unbounded.
func NewTokenBucket(config policy.TokenBucket) Codec {
	mustBeValid(config)
	p := rules.TokenBucket(config)
	if l, ok := newBucketWord(p.Burst, p.Rate, 1000, p.FillMs()); ok {
		return &tokenBucketWord{p: p, l: l}
	}
	return &tokenBucketPair{p: p}
}

type tokenBucketWord struct {
	p rules.TokenBucket
	l bucketWord
}

func (c *tokenBucketWord) Words() int     { return 1 }
func (c *tokenBucketWord) Horizon() int64 { return c.l.horizon }

func (c *tokenBucketWord) decode(w uint64, now int64) rules.TokenBucketState {
	t, cr, last := c.l.unpack(w, now)
	return rules.TokenBucketState{Tokens: t, Credit: cr, Last: last}
}

func (c *tokenBucketWord) encode(s *rules.TokenBucketState) uint64 {
	return c.l.pack(s.Tokens, s.Credit, s.Last)
}

func (c *tokenBucketWord) Fresh(now int64) (uint64, uint64) {
	s := c.p.Fresh(now)
	return c.encode(&s), 0
}

func (c *tokenBucketWord) Take(cell *uint64, now, cost int64) (policy.Result, Status) {
	for {
		w := satomic.LoadUint64(cell)
		if w&Flags != 0 {
			return policy.Result{}, statusOf(w)
		}
		s := c.decode(w, now)
		r := c.p.Take(&s, now, cost)
		if !r.Allowed || cost == 0 {
			return r, OK // nothing taken; the refill alone is invisible to every decision
		}
		if satomic.CompareAndSwapUint64(cell, w, c.encode(&s)) {
			return r, OK
		}
	}
}

func (c *tokenBucketWord) Admit(cell *uint64, now, cost int64) (bool, Status) {
	for {
		w := satomic.LoadUint64(cell)
		if w&Flags != 0 {
			return false, statusOf(w)
		}
		s := c.decode(w, now)
		c.p.Refill(&s, now)
		if s.Tokens < cost {
			return false, OK
		}
		if cost == 0 {
			return true, OK
		}
		s.Tokens -= cost
		if satomic.CompareAndSwapUint64(cell, w, c.encode(&s)) {
			return true, OK
		}
	}
}

func (c *tokenBucketWord) Peek(cell *uint64, now int64) (policy.Result, policy.Probe, Status) {
	w := satomic.LoadUint64(cell)
	if w&Flags != 0 {
		return policy.Result{}, policy.Probe{}, statusOf(w)
	}
	r, pr := c.p.Peek(c.decode(w, now), now)
	return r, pr, OK
}

func (c *tokenBucketWord) PeekFresh(now int64) (policy.Result, policy.Probe) {
	return c.p.Peek(c.p.Fresh(now), now)
}

func (c *tokenBucketWord) Dead(w0, _ uint64, ref, now int64) bool {
	t, cr, last := c.l.unpackSince(w0, ref)
	return c.p.Dead(rules.TokenBucketState{Tokens: t, Credit: cr, Last: last}, now)
}

// Normalize re-stamps a dead bucket (full, whatever its time) with now, so that its time stays
// within the horizon of every later reader.
func (c *tokenBucketWord) Normalize(w0, _ uint64, now int64) (uint64, uint64, bool) {
	f, _ := c.Fresh(now)
	return f, 0, f != w0
}

func (c *tokenBucketWord) Stale(w0, _ uint64, now, _ int64) (int64, bool) {
	s := c.decode(w0, now)
	age := now - s.Last
	c.p.Refill(&s, now)
	return age, underHalf(c.p.Burst-s.Tokens, c.p.Burst)
}

type tokenBucketPair struct{ p rules.TokenBucket }

func (c *tokenBucketPair) Words() int     { return 2 }
func (c *tokenBucketPair) Horizon() int64 { return math.MaxInt64 }

func (c *tokenBucketPair) decode(w0, w1 uint64) rules.TokenBucketState {
	return rules.TokenBucketState{Tokens: int64(w1 >> 32), Credit: int64(w1 & math.MaxUint32), Last: int64(w0)}
}

func (c *tokenBucketPair) encode(s *rules.TokenBucketState) (uint64, uint64) {
	return uint64(s.Last), uint64(s.Tokens)<<32 | uint64(s.Credit)
}

func (c *tokenBucketPair) Fresh(now int64) (uint64, uint64) {
	s := c.p.Fresh(now)
	return c.encode(&s)
}

func (c *tokenBucketPair) Take(cell *uint64, now, cost int64) (policy.Result, Status) {
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

func (c *tokenBucketPair) Admit(cell *uint64, now, cost int64) (bool, Status) {
	p := pair(cell)
	for {
		w0, w1 := load128(p)
		if w0&Flags != 0 {
			return false, statusOf(w0)
		}
		s := c.decode(w0, w1)
		c.p.Refill(&s, now)
		if s.Tokens < cost {
			return false, OK
		}
		if cost == 0 {
			return true, OK
		}
		s.Tokens -= cost
		n0, n1 := c.encode(&s)
		if cas128(p, w0, w1, n0, n1) {
			return true, OK
		}
	}
}

func (c *tokenBucketPair) Peek(cell *uint64, now int64) (policy.Result, policy.Probe, Status) {
	w0, w1 := load128(pair(cell))
	if w0&Flags != 0 {
		return policy.Result{}, policy.Probe{}, statusOf(w0)
	}
	r, pr := c.p.Peek(c.decode(w0, w1), now)
	return r, pr, OK
}

func (c *tokenBucketPair) PeekFresh(now int64) (policy.Result, policy.Probe) {
	return c.p.Peek(c.p.Fresh(now), now)
}

func (c *tokenBucketPair) Dead(w0, w1 uint64, _, now int64) bool {
	return c.p.Dead(c.decode(w0, w1), now)
}

func (c *tokenBucketPair) Normalize(w0, w1 uint64, _ int64) (uint64, uint64, bool) {
	return w0, w1, false // nothing wraps: a dead state needs no re-encoding
}

func (c *tokenBucketPair) Stale(w0, w1 uint64, now, _ int64) (int64, bool) {
	s := c.decode(w0, w1)
	age := now - s.Last
	c.p.Refill(&s, now)
	return age, underHalf(c.p.Burst-s.Tokens, c.p.Burst)
}

// Refund gives back the tokens that rules.TokenBucket.Refund finds exact, refilled to now.
func (c *tokenBucketWord) Refund(cell *uint64, clock func() int64, cost, resetAt int64) (int64, Status) {
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

// Refund is tokenBucketWord.Refund for the two-word cell.
func (c *tokenBucketPair) Refund(cell *uint64, clock func() int64, cost, resetAt int64) (int64, Status) {
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
