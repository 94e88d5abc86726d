package atomic

import (
	"math"
	"math/bits"
	satomic "sync/atomic"

	"github.com/slidelimit/slidelimit/internal/fastdiv"
	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

// NewFixedWindow returns the codec for p (it panics with p.Validate's error if p is not valid): one word for every Limit and
// Window. Like every Codec it is immutable and safe for concurrent use; its methods may race on
// one cell (each update is one CAS). With b = bits.Len(Limit) <= 32 bits of count, k = 62 - b >= 30 bits of window index:
//
//	63   62   61 .............. b   b-1 ..... 0
//	Dead Moved  window index mod 2^k     count
//
// The index is decoded as the sliding counter's is: the one nearest to the reader's own window
// (a racing writer's clock may have moved the state a window ahead), and in Dead the one in
// [ref's index - 2^(k-2), ref's index + 3*2^(k-2)). A state with a non-zero count is dead as soon
// as its window has passed, so the shard's sweep leaves only states of its own window or later,
// and the horizon, 2^(k-2) windows (at least 2^28 ms, three days), leaves a quarter of the index
// space for writers stalled between their clock reading and their compare-and-swap. A state
// with a zero count is a new key's, and is judged dead whatever its window; its window is still
// decoded, so that a reader whose clock is older than a revival counts into the window the cell
// was revived in, never into one whose counts were evicted. When 2^(k-1) windows exceed 2^62 ms
// no index ever wraps and the horizon is unbounded.
func NewFixedWindow(config policy.FixedWindow) Codec {
	mustBeValid(config)
	p := rules.FixedWindow(config)
	w := p.WindowMs()
	b := uint(bits.Len64(uint64(p.Limit)))
	k := 62 - b
	c := &fixedWindowWord{p: p, limit: p.Limit, w: w, div: fastdiv.New(uint64(w)), b: b, k: k, cmask: 1<<b - 1, kmask: 1<<k - 1}
	c.horizon = math.MaxInt64
	if k-1+uint(bits.Len64(uint64(w))) < 63 {
		c.horizon = int64(1) << (k - 2) * w
	}
	return c
}

type fixedWindowWord struct {
	p       rules.FixedWindow
	limit   int64
	w       int64
	div     fastdiv.Divisor
	b, k    uint
	cmask   uint64
	kmask   uint64
	horizon int64
}

func (c *fixedWindowWord) Words() int     { return 1 }
func (c *fixedWindowWord) Horizon() int64 { return c.horizon }

func (c *fixedWindowWord) index(t int64) int64 { return int64(c.div.Div62(uint64(t))) }

// decode unpacks word at now, rolled to now's window when it is from an earlier one, and returns
// the index of the state's window, so that encode needs no division.
func (c *fixedWindowWord) decode(word uint64, now int64) (s rules.FixedWindowState, at int64) {
	n, back := c.back(word, now)
	if back > 0 {
		return rules.FixedWindowState{Window: n * c.w}, n // an earlier window: start from zero
	}
	at = n - back
	return rules.FixedWindowState{Window: at * c.w, Count: int64(word & c.cmask)}, at
}

// back returns now's window index and how many windows before it word's window is (negative
// when a racing writer's clock was ahead of ours).
func (c *fixedWindowWord) back(word uint64, now int64) (n, back int64) {
	n = c.index(now)
	d := (uint64(n) - word>>c.b) & c.kmask
	back = int64(d)
	if d > c.kmask>>1 {
		back -= int64(c.kmask) + 1
	}
	return n, back
}

func (c *fixedWindowWord) encode(idx, count int64) uint64 {
	return (uint64(idx)&c.kmask)<<c.b | uint64(count)
}

func (c *fixedWindowWord) Fresh(now int64) (uint64, uint64) { return c.encode(c.index(now), 0), 0 }

func (c *fixedWindowWord) Take(cell *uint64, now, cost int64) (policy.Result, Status) {
	for {
		word := satomic.LoadUint64(cell)
		if word&Flags != 0 {
			return policy.Result{}, statusOf(word)
		}
		s, at := c.decode(word, now)
		r := c.p.Take(&s, now, cost) // s is rolled already: Take's own roll divides nothing
		if !r.Allowed || cost == 0 {
			return r, OK // nothing to count; the roll alone is invisible to every decision
		}
		if satomic.CompareAndSwapUint64(cell, word, c.encode(at, s.Count)) {
			return r, OK
		}
	}
}

func (c *fixedWindowWord) Admit(cell *uint64, now, cost int64) (bool, Status) {
	for {
		word := satomic.LoadUint64(cell)
		if word&Flags != 0 {
			return false, statusOf(word)
		}
		s, at := c.decode(word, now)
		if cost > c.limit-s.Count {
			return false, OK
		}
		if cost == 0 || satomic.CompareAndSwapUint64(cell, word, c.encode(at, s.Count+cost)) {
			return true, OK
		}
	}
}

func (c *fixedWindowWord) Peek(cell *uint64, now int64) (policy.Result, policy.Probe, Status) {
	word := satomic.LoadUint64(cell)
	if word&Flags != 0 {
		return policy.Result{}, policy.Probe{}, statusOf(word)
	}
	s, _ := c.decode(word, now)
	r, pr := c.p.Peek(s, now)
	return r, pr, OK
}

func (c *fixedWindowWord) PeekFresh(now int64) (policy.Result, policy.Probe) {
	return c.p.Peek(c.p.Fresh(now), now)
}

func (c *fixedWindowWord) Dead(w0, _ uint64, ref, now int64) bool {
	if w0&c.cmask == 0 {
		return true
	}
	base := c.index(ref) - int64(1)<<(c.k-2)
	at := base + int64((w0>>c.b-uint64(base))&c.kmask)
	return at < c.index(now)
}

func (c *fixedWindowWord) Normalize(w0, _ uint64, now int64) (uint64, uint64, bool) {
	f, _ := c.Fresh(now)
	return f, 0, f != w0
}

// Stale reports the time since the start of the window the state was last counted in; a count
// from an earlier window than now's holds nothing.
func (c *fixedWindowWord) Stale(w0, _ uint64, now, limit int64) (int64, bool) {
	n, back := c.back(w0, now)
	return now - (n-back)*c.w, back > 0 || underHalf(int64(w0&c.cmask), judged(limit, c.limit))
}

// Refund gives back units counted in the window ending at resetAt while it is the cell's current
// window (see rules.FixedWindow.Refund). A cell whose window a racing writer moved ahead, or that
// rolled past resetAt's window, gives nothing back.
func (c *fixedWindowWord) Refund(cell *uint64, clock func() int64, cost, resetAt int64) (int64, Status) {
	for {
		word := satomic.LoadUint64(cell)
		if word&Flags != 0 {
			return 0, statusOf(word)
		}
		now := clock() // read after the load: no earlier than any admission the cell holds
		s, at := c.decode(word, now)
		g := c.p.Refund(&s, now, cost, resetAt)
		if g == 0 || satomic.CompareAndSwapUint64(cell, word, c.encode(at, s.Count)) {
			return g, OK
		}
	}
}

// MaxLimit returns the policy's limit: the count field has bits.Len(Limit) bits, and widening it
// would take window-index bits that this layout cannot spare without shortening the horizon, so
// per-key limits may only lower the policy's.
func (c *fixedWindowWord) MaxLimit() int64 { return c.limit }

// TakeLimit is Take against limit (1 <= limit <= MaxLimit) instead of the policy's. The count is
// in units, so a key counted at a higher limit and then lowered below its count is refused, with
// Remaining 0 rather than negative, until the next window starts it from zero.
func (c *fixedWindowWord) TakeLimit(cell *uint64, now, cost, limit int64) (policy.Result, Status) {
	p := c.p
	p.Limit = limit // the count never exceeds the limit it was admitted under, so it still fits
	for {
		word := satomic.LoadUint64(cell)
		if word&Flags != 0 {
			return policy.Result{}, statusOf(word)
		}
		s, at := c.decode(word, now)
		r := p.Take(&s, now, cost)
		r.Remaining = max(r.Remaining, 0)
		if !r.Allowed || cost == 0 {
			return r, OK
		}
		if satomic.CompareAndSwapUint64(cell, word, c.encode(at, s.Count)) {
			return r, OK
		}
	}
}
