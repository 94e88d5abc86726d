package atomic

import (
	"fmt"
	"math"
	"math/bits"
	satomic "sync/atomic"

	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

// NewSlidingCounter returns the codec for p (it panics with p.Validate's error if p is not valid): a one-word cell when the
// counts are small enough to leave room for the window, otherwise a two-word cell.
//
// One-word layout, with b = bits.Len(Limit) bits per count (b <= 21, so Limit < 2^21) and
// k = 62 - 2b >= 20 bits of window index:
//
//	63   62   61 ........ 2b   2b-1 ..... b   b-1 ..... 0
//	Dead Moved  window index     previous       current
//	            mod 2^k
//
// The window index is stored modulo 2^k. A reader decodes it as the one nearest to its own
// window: d = (now's index - stored) mod 2^k counts the windows since the state was written
// (or, above 2^(k-1), how far a racing writer's clock ran ahead). That is unambiguous as long as
// no state with a non-zero count goes unvisited for 2^(k-1) windows, which the shard's sweeps
// guarantee: each full sweep re-encodes or evicts every dead state, and a decision that finds its
// shard's sweep overdue (Horizon) sweeps the shard itself before deciding. A state whose counts
// are both zero is a new key's, so sweeps evict it or, with eviction off, re-encode it in the
// current window. It is stored half the index space away from the window it is in (see idle),
// and decoded back to that window: never taken as the reader's own, since a reader whose clock
// reading is older must count into the window the cell was last written in, not into a window
// whose counts may have been evicted since.
//
// Two-word layout (Limit >= 2^21): word 0 is the full window index (below 2^62 for any epoch
// time), word 1 is previous<<32 | current; both counts fit 32 bits because Limit < 2^32. Nothing
// wraps, so the horizon is unbounded.
//
// Like every Codec it is immutable and safe for concurrent use; its methods may race on one cell.
func NewSlidingCounter(p policy.SlidingCounter) Codec { return NewSlidingCounterUpTo(p, p.Limit) }

// NewSlidingCounterUpTo is NewSlidingCounter with cells sized for per-key limits up to maxLimit
// (raised to p.Limit when below it; above policy.MaxLimit it panics), for TakeLimit. The Codec is
// immutable and safe for concurrent use, as NewSlidingCounter's is.
func NewSlidingCounterUpTo(p policy.SlidingCounter, maxLimit int64) Codec {
	mustBeValid(p)
	if maxLimit > policy.MaxLimit {
		panic(fmt.Sprintf("atomic: NewSlidingCounterUpTo: maxLimit %d is above policy.MaxLimit, %d", maxLimit, int64(policy.MaxLimit)))
	}
	w := rules.SlidingCounter(p).WindowMs()
	rule := rules.SlidingCounter(p).Compile()
	maxLimit = max(maxLimit, p.Limit)
	b := uint(bits.Len64(uint64(maxLimit)))
	if b <= 21 {
		k := 62 - 2*b
		c := &slidingCounterWord{p: rule, w: w, b: b, k: k, cmask: 1<<b - 1, kmask: 1<<k - 1, max: maxLimit}
		c.horizon = math.MaxInt64
		if k-1+uint(bits.Len64(uint64(w))) <= 63 { // else 2^(k-1) windows outlast any int64 time
			c.horizon = (int64(1)<<(k-1) - 4) * w
		}
		return c
	}
	return &slidingCounterPair{p: rule, w: w, max: maxLimit}
}

type slidingCounterWord struct {
	p       rules.SlidingCounterRule
	max     int64
	w       int64
	b, k    uint
	cmask   uint64
	kmask   uint64
	horizon int64
}

func (c *slidingCounterWord) Words() int { return 1 }

// LivePattern matches a state written in now's window or the one before (with no flag set).
// Such a state is never one whose counts are both zero: those, dead as they are, are written half
// the index space away (see idle), where a sweep or a new key's reclaim at the key cap finds them.
func (c *slidingCounterWord) LivePattern(now int64) (mask, a, b uint64) {
	n := uint64(c.p.Index(now))
	shift := 2 * c.b
	return Flags | c.kmask<<shift, (n & c.kmask) << shift, ((n - 1) & c.kmask) << shift
}
func (c *slidingCounterWord) Horizon() int64 { return c.horizon }

// decode unpacks word at now. It also returns now's window index n and the state's own index,
// so that encode needs no division.
func (c *slidingCounterWord) decode(word uint64, now int64) (s rules.SlidingCounterState, n, at int64) {
	n = c.p.Index(now)
	counts := word & (1<<(2*c.b) - 1)
	idx := word >> (2 * c.b)
	if counts == 0 {
		idx -= c.kmask>>1 + 1 // written by idle, half the index space away from its window
	}
	d := (uint64(n) - idx) & c.kmask
	back := int64(d)
	if d > c.kmask>>1 {
		back -= int64(c.kmask) + 1 // the writer's clock was ahead of ours
	}
	at = n - back
	return rules.SlidingCounterState{Window: at * c.w, Previous: int64(counts >> c.b), Current: int64(counts & c.cmask)}, n, at
}

// encode packs s, whose window index is idx; a state with both counts zero is written as idle
// says, the one form decode reads back.
func (c *slidingCounterWord) encode(s rules.SlidingCounterState, idx int64) uint64 {
	if s.Previous == 0 && s.Current == 0 {
		return c.idle(idx)
	}
	return (uint64(idx)&c.kmask)<<(2*c.b) | uint64(s.Previous)<<c.b | uint64(s.Current)
}

func (c *slidingCounterWord) Fresh(now int64) (uint64, uint64) { return c.idle(c.p.Index(now)), 0 }

// idle is the state with both counts zero in window n. Its index bits say n + 2^(k-1), half the
// index space away, where LivePattern does not vouch for it: a key holding nothing (a query's, a
// refused first request's, one refunded to nothing) is dead, and a sweep or a new key's reclaim
// at the key cap must see that without waiting two windows for the pattern to pass it by. decode
// takes the half back (every state with both counts zero is written here, through encode or
// Fresh and FreshAdmit), so that it decides,
// peeks and ages exactly as the same state stored at n would, for readers in any window. The fast
// paths (Admit, sameWindow), which compare the bits with the reader's own window and do not
// decode, never take it for a reader's: no reader is 2^(k-1) windows from a state (see Horizon).
// Two windows back, where it first went, was a laggard's own window, which the fast paths then
// counted into.
func (c *slidingCounterWord) idle(n int64) uint64 {
	return ((uint64(n) + c.kmask>>1 + 1) & c.kmask) << (2 * c.b & 63)
}

// FreshAdmit: a fresh state carries nothing into now's window, so the estimate before the request
// is 0, and the rule admits cost (>= 0) when it is within the limit.
func (c *slidingCounterWord) FreshAdmit(now, cost int64) (uint64, uint64, bool) {
	n := c.p.Index(now)
	if uint64(cost-1) >= uint64(c.p.Limit()) { // 0, or above the limit: nothing is counted
		return c.idle(n), 0, cost == 0
	}
	// cost <= limit < 2^b: within Current's bits.
	return (uint64(n)&c.kmask)<<(2*c.b&63) | uint64(cost), 0, true
}

func (c *slidingCounterWord) Take(cell *uint64, now, cost int64) (policy.Result, Status) {
	return c.take(cell, now, cost, &c.p)
}

func (c *slidingCounterWord) MaxLimit() int64 { return c.max }

func (c *slidingCounterWord) TakeLimit(cell *uint64, now, cost, limit int64) (policy.Result, Status) {
	rule := c.p.WithLimit(limit)
	return c.take(cell, now, cost, &rule)
}

func (c *slidingCounterWord) Refund(cell *uint64, clock func() int64, cost, resetAt int64) (int64, Status) {
	for {
		word := satomic.LoadUint64(cell)
		if word&Flags != 0 {
			return 0, statusOf(word)
		}
		now := clock() // read after the load: no earlier than any admission the cell holds
		s, n, at := c.decode(word, now)
		g := c.p.Refund(&s, n*c.w, cost, resetAt)
		if g == 0 || c.store(cell, word, s, n, at) {
			return g, OK
		}
	}
}

func (c *slidingCounterWord) take(cell *uint64, now, cost int64, rule *rules.SlidingCounterRule) (policy.Result, Status) {
	word := satomic.LoadUint64(cell)
	fast := true
	for {
		if word&Flags != 0 {
			return policy.Result{}, statusOf(word)
		}
		if fast {
			ok, est, done := c.sameWindow(cell, &word, now, cost, rule.Limit())
			if done {
				r := policy.Result{Allowed: ok, Limit: rule.Limit(), ResetAtMs: (c.p.Index(now) + 1) * c.w}
				if ok || cost > rule.Limit() {
					r.Remaining = remaining(rule.Limit(), est, cost, ok)
					return r, OK
				}
				// A refusal's retry-after is the general path's to solve.
				fast, word = false, satomic.LoadUint64(cell)
				continue
			}
			if word&Flags != 0 {
				continue
			}
		}
		s, n, at := c.decode(word, now)
		r := rule.TakeAt(&s, now, n*c.w, cost)
		if !r.Allowed || cost == 0 {
			return r, OK // nothing to count; the roll alone is invisible to every decision
		}
		if c.store(cell, word, s, n, at) {
			return r, OK
		}
		word = satomic.LoadUint64(cell)
	}
}

// remaining is Result.Remaining for a decision against limit with estimate est before it.
func remaining(limit, est, cost int64, admitted bool) int64 {
	if admitted {
		est += cost
	}
	return max(limit-est, 0)
}

// sameWindow is the common case of a decision, kept to a few instructions between the load and
// the compare-and-swap so that goroutines contending for one hot key retry quickly: the cell is
// in now's window already, so only Current can change and the carried part of Previous is fixed
// for this now. It decides cost (> 0) against limit by the contract's rule and counts it.
// done is false when the cell is not in now's window (or not live): word then holds the cell's
// latest value for the general path. When done, ok reports the decision and est the estimate
// before it; word is unspecified.
func (c *slidingCounterWord) sameWindow(cell *uint64, word *uint64, now, cost, limit int64) (ok bool, est int64, done bool) {
	n := c.p.Index(now)
	b := c.b & 63 // masked shifts compile without checks for counts past 63
	w := *word
	if w&Flags != 0 || (w>>(2*b&63))&c.kmask != uint64(n)&c.kmask || cost <= 0 {
		return false, 0, false
	}
	carried := c.p.Carried(int64(w>>b&c.cmask), now-n*c.w)
	for {
		est = carried + int64(w&c.cmask)
		if cost > limit || est+cost > limit {
			return false, est, true
		}
		// cur + cost <= limit < 2^b: the addition stays within Current's bits.
		if satomic.CompareAndSwapUint64(cell, w, w+uint64(cost)) {
			return true, est, true
		}
		w = satomic.LoadUint64(cell)
		if w&Flags != 0 || w>>b != *word>>b {
			*word = w // the window or Previous changed (or the cell died): start over
			return false, 0, false
		}
	}
}

// Admit decides cost units at now and counts them when admitted: the path of Allow. The common
// case, a live cell already in now's window and a cost within the limit, is decided here in
// one load and one compare-and-swap (sameWindow's loop, written out so that Allow makes no
// further call); anything else goes the general way.
func (c *slidingCounterWord) Admit(cell *uint64, now, cost int64) (bool, Status) {
	word := satomic.LoadUint64(cell)
	n := c.p.Index(now)
	b := c.b & 63 // masked shifts compile without checks for counts past 63
	// The flags sit just above the window index, so this one compare also finds the cell live.
	for word>>(2*b&63) == uint64(n)&c.kmask && uint64(cost-1) < uint64(c.p.Limit()) {
		est := c.p.Carried(int64(word>>b&c.cmask), now-n*c.w) + int64(word&c.cmask)
		if est+cost > c.p.Limit() {
			return false, OK
		}
		// cur + cost <= limit < 2^b: the addition stays within Current's bits.
		if satomic.CompareAndSwapUint64(cell, word, word+uint64(cost)) {
			return true, OK
		}
		word = satomic.LoadUint64(cell) // lost a race: most often to a request in the same window
	}
	return c.admit(cell, now, cost)
}

// admit is Admit's general way: a cell not live or not in now's window, a cost of 0 or above the
// limit, or a race lost to a window change. Admit has just tried the same-window case, so this
// goes straight to the policy.
func (c *slidingCounterWord) admit(cell *uint64, now, cost int64) (bool, Status) {
	word := satomic.LoadUint64(cell)
	for {
		if word&Flags != 0 {
			return false, statusOf(word)
		}
		s, n, at := c.decode(word, now)
		if !c.p.Admit(&s, now, n*c.w, cost) {
			return false, OK
		}
		if cost == 0 || c.store(cell, word, s, n, at) {
			return true, OK
		}
		word = satomic.LoadUint64(cell)
	}
}

// store writes s over word, unless the cell changed since word was read. A state rolled to now's
// window (index n) is stored there; one a racing writer had moved ahead stays at its index at.
func (c *slidingCounterWord) store(cell *uint64, word uint64, s rules.SlidingCounterState, n, at int64) bool {
	if s.Window == n*c.w {
		at = n
	}
	return satomic.CompareAndSwapUint64(cell, word, c.encode(s, at))
}

func (c *slidingCounterWord) Peek(cell *uint64, now int64) (policy.Result, policy.Probe, Status) {
	word := satomic.LoadUint64(cell)
	if word&Flags != 0 {
		return policy.Result{}, policy.Probe{}, statusOf(word)
	}
	s, n, _ := c.decode(word, now)
	r, pr := c.p.PeekAt(s, now, n*c.w)
	return r, pr, OK
}

func (c *slidingCounterWord) PeekFresh(now int64) (policy.Result, policy.Probe) {
	return c.p.Peek(c.p.Fresh(now), now)
}

func (c *slidingCounterWord) Dead(w0, _ uint64, ref, now int64) bool {
	counts := w0 & (1<<(2*c.b) - 1)
	if counts == 0 {
		return true
	}
	// Every live state's window lies in [ref's window - 2^(k-2), ref's window + 3*2^(k-2)): written
	// after the last sweep began (with a wide margin for stalled writers) and before the horizon,
	// 2^(k-1) - 4 windows on, which no decision passes without sweeping first.
	base := c.p.Index(ref) - int64(1)<<(c.k-2)
	at := base + int64((w0>>(2*c.b)-uint64(base))&c.kmask)
	return c.p.Dead(rules.SlidingCounterState{Window: at * c.w, Previous: int64(counts >> c.b), Current: int64(counts & c.cmask)}, now)
}

func (c *slidingCounterWord) Normalize(w0, _ uint64, now int64) (uint64, uint64, bool) {
	f, _ := c.Fresh(now)
	return f, 0, f != w0
}

func (c *slidingCounterWord) Stale(w0, _ uint64, now, limit int64) (int64, bool) {
	s, _, _ := c.decode(w0, now)
	return now - s.Window, underHalf(c.p.Estimate(s, now), judged(limit, c.p.Limit()))
}

type slidingCounterPair struct {
	p   rules.SlidingCounterRule
	max int64
	w   int64
}

func (c *slidingCounterPair) Words() int     { return 2 }
func (c *slidingCounterPair) Horizon() int64 { return math.MaxInt64 }

func (c *slidingCounterPair) decode(w0, w1 uint64) rules.SlidingCounterState {
	return rules.SlidingCounterState{Window: int64(w0) * c.w, Previous: int64(w1 >> 32), Current: int64(w1 & math.MaxUint32)}
}

func (c *slidingCounterPair) encode(s rules.SlidingCounterState) (uint64, uint64) {
	return uint64(c.p.Index(s.Window)), uint64(s.Previous)<<32 | uint64(s.Current)
}

func (c *slidingCounterPair) Fresh(now int64) (uint64, uint64) { return c.encode(c.p.Fresh(now)) }

// FreshAdmit, as for the one-word cell: the estimate before a new key's first request is 0.
func (c *slidingCounterPair) FreshAdmit(now, cost int64) (uint64, uint64, bool) {
	w0 := uint64(c.p.Index(now))
	if cost > c.p.Limit() {
		return w0, 0, false
	}
	return w0, uint64(cost), true // cost <= limit < 2^32: within Current's half
}

func (c *slidingCounterPair) Take(cell *uint64, now, cost int64) (policy.Result, Status) {
	return c.take(cell, now, cost, &c.p)
}

func (c *slidingCounterPair) MaxLimit() int64 { return c.max }

func (c *slidingCounterPair) TakeLimit(cell *uint64, now, cost, limit int64) (policy.Result, Status) {
	rule := c.p.WithLimit(limit)
	return c.take(cell, now, cost, &rule)
}

func (c *slidingCounterPair) Refund(cell *uint64, clock func() int64, cost, resetAt int64) (int64, Status) {
	p := pair(cell)
	for {
		w0, w1 := load128(p)
		if w0&Flags != 0 {
			return 0, statusOf(w0)
		}
		now := clock() // read after the load: no earlier than any admission the cell holds
		s := c.decode(w0, w1)
		g := c.p.Refund(&s, c.p.Start(now), cost, resetAt)
		n0, n1 := c.encode(s)
		if g == 0 || cas128(p, w0, w1, n0, n1) {
			return g, OK
		}
	}
}

func (c *slidingCounterPair) take(cell *uint64, now, cost int64, rule *rules.SlidingCounterRule) (policy.Result, Status) {
	p := pair(cell)
	for {
		w0, w1 := loadRising(p) // the window index only rises
		if w0&Flags != 0 {
			return policy.Result{}, statusOf(w0)
		}
		s := c.decode(w0, w1)
		r := rule.TakeAt(&s, now, c.p.Start(now), cost)
		if !r.Allowed || cost == 0 {
			return r, OK
		}
		n0, n1 := c.encode(s)
		if cas128(p, w0, w1, n0, n1) {
			return r, OK
		}
	}
}

// Admit is slidingCounterWord.Admit for the two-word cell: the common case in one consistent
// read and one 16-byte compare-and-swap, the rest the general way.
func (c *slidingCounterPair) Admit(cell *uint64, now, cost int64) (bool, Status) {
	p := pair(cell)
	w0, w1, ok := tryLoadRising(p)
	n := c.p.Index(now)
	// w0 holds the flags above the window index: equal to n, the cell is live and in now's window.
	for ok && w0 == uint64(n) && uint64(cost-1) < uint64(c.p.Limit()) {
		est := c.p.Carried(int64(w1>>32), now-n*c.w) + int64(w1&math.MaxUint32)
		if est+cost > c.p.Limit() {
			return false, OK
		}
		// cur + cost <= limit < 2^32: the addition stays within Current's half.
		if cas128(p, w0, w1, w0, w1+uint64(cost)) {
			return true, OK
		}
		w0, w1, ok = tryLoadRising(p) // lost a race
	}
	return c.admit(cell, now, cost)
}

func (c *slidingCounterPair) admit(cell *uint64, now, cost int64) (bool, Status) {
	p := pair(cell)
	for {
		w0, w1 := loadRising(p) // the window index only rises
		if w0&Flags != 0 {
			return false, statusOf(w0)
		}
		s := c.decode(w0, w1)
		if !c.p.Admit(&s, now, c.p.Start(now), cost) {
			return false, OK
		}
		n0, n1 := c.encode(s)
		if cost == 0 || cas128(p, w0, w1, n0, n1) {
			return true, OK
		}
	}
}

func (c *slidingCounterPair) Peek(cell *uint64, now int64) (policy.Result, policy.Probe, Status) {
	w0, w1 := load128(pair(cell))
	if w0&Flags != 0 {
		return policy.Result{}, policy.Probe{}, statusOf(w0)
	}
	r, pr := c.p.Peek(c.decode(w0, w1), now)
	return r, pr, OK
}

func (c *slidingCounterPair) PeekFresh(now int64) (policy.Result, policy.Probe) {
	return c.p.Peek(c.p.Fresh(now), now)
}

func (c *slidingCounterPair) Dead(w0, w1 uint64, _, now int64) bool {
	return c.p.Dead(c.decode(w0, w1), now)
}

func (c *slidingCounterPair) Normalize(w0, w1 uint64, now int64) (uint64, uint64, bool) {
	return w0, w1, false // nothing wraps: a dead state needs no re-encoding
}

func (c *slidingCounterPair) Stale(w0, w1 uint64, now, limit int64) (int64, bool) {
	s := c.decode(w0, w1)
	return now - s.Window, underHalf(c.p.Estimate(s, now), judged(limit, c.p.Limit()))
}
