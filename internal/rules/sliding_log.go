package rules

import (
	"slices"
	"time"

	"github.com/slidelimit/slidelimit/policy"
)

// SlidingLogHeaderBytes is the fixed part of a SlidingLogState (slice header, base, head, count)
// on a 64-bit platform; the ring adds 4 bytes per unit of Limit.
const SlidingLogHeaderBytes = 40

// SlidingLog is the exact sliding log: it records the time of every admitted unit and admits
// while fewer than Limit fall in the trailing window (now - Window, now]. It keeps "no more than
// Limit in any Window" literally true, for promises such as login attempts, password resets and
// one-time codes, where limits are small (at most MaxLogLimit).
//
// Per key: a SlidingLogState of SlidingLogHeaderBytes (40) plus a ring of Limit uint32s, that is
// 40 + 4*Limit bytes (plus the allocator's rounding of the ring). The state is variable in size
// and holds a slice, so it cannot live in a packed atomic cell: the engine keeps it behind a
// pointer and serializes Takes on one key (a lock), because Take writes the ring in place and so
// cannot be thrown away and retried the way a CAS loop retries.
//
// The ring stores the low 32 bits of each timestamp, and the state the full timestamp of the
// oldest entry. Every entry lies in [oldest, oldest + 2^32), because every live entry is within
// Window <= 2^32 ms of now and the ring is kept sorted, so each full timestamp is recovered
// exactly as oldest + (entry - uint32(oldest)) with wrapping uint32 subtraction. That halves the
// memory of int64 timestamps with no rebasing: dropping the oldest only re-reads the next one.
//
// A SlidingLog is a plain value: safe to copy and to use from any number of goroutines. A state is
// owned by its caller; copying a SlidingLogState shares its ring (use Clone for a snapshot).
type SlidingLog policy.SlidingLog

// SlidingLogState is one key's log: a ring of the low 32 bits of admitted units' timestamps,
// oldest first. Take changes it in place; Peek and Dead only read it. Concurrent use of one state
// must be serialized by its owner.
type SlidingLogState struct {
	ring  []uint32 // len Limit once allocated; entries head … head+count-1 (mod len) are live
	base  int64    // full timestamp of ring[head]; meaningless while count == 0
	head  int32
	count int32
}

// WindowMs returns the window in milliseconds.
func (p SlidingLog) WindowMs() int64 { return int64(p.Window / time.Millisecond) }

// StateBytes returns the bytes one key's state takes: SlidingLogHeaderBytes + 4*Limit, before the
// allocator rounds the ring up to its size class.
func (p SlidingLog) StateBytes() int64 { return SlidingLogHeaderBytes + 4*p.Limit }

// Fresh returns a new key's state: an empty log with its ring allocated (Limit uint32s), so that
// Take never allocates. The zero SlidingLogState is also an empty log; Take allocates its ring on
// the first admission.
func (p SlidingLog) Fresh(int64) SlidingLogState {
	return SlidingLogState{ring: make([]uint32, p.Limit)}
}

// Clone returns a copy of s that shares nothing with it (it allocates the ring). It reads s, so it
// must not run concurrently with a Take on s.
func (s SlidingLogState) Clone() SlidingLogState {
	s.ring = slices.Clone(s.ring)
	return s
}

// at returns the full timestamp of the i-th entry, oldest first (0 <= i < count).
func (s *SlidingLogState) at(i int) int64 {
	j := int(s.head) + i
	if j >= len(s.ring) {
		j -= len(s.ring)
	}
	return s.base + int64(s.ring[j]-uint32(s.base))
}

// expired returns how many entries are at or before cut: a binary search, the ring being sorted.
func (s *SlidingLogState) expired(cut int64) int {
	lo, hi := 0, int(s.count)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s.at(mid) <= cut {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Expire drops the entries that have left the window (now - Window, now]. It moves only the
// state's head, count and base, never writing the ring, so Peek can expire a copy.
func (p SlidingLog) Expire(s *SlidingLogState, now int64) {
	cut := now - p.WindowMs()
	if s.count == 0 || s.base > cut {
		return
	}
	k := s.expired(cut)
	if k == int(s.count) {
		s.count = 0
		return
	}
	next := s.at(k) // read with the old base, which the invariant makes exact
	s.head = int32((int(s.head) + k) % len(s.ring))
	s.count -= int32(k)
	s.base = next
}

// Take decides a request of cost units at now, on the entries in the window (now - Window, now],
// and when it admits cost > 0 units drops the expired entries and records cost copies of now.
// Cost 0 is always admitted and records nothing; a cost above Limit is refused with RetryAfterMs
// 0; a refused request records nothing. Neither writes s: the entries a later reading's window
// dropped are still there for a request whose clock reads earlier (a goroutine that read it a
// moment before), which would otherwise find the log emptier than it was at any time. Remaining is Limit minus the units in the
// window; ResetAtMs is when every recorded unit has left the window (newest + Window), that is
// when the full Limit is available again, and now when the log is empty. cost must not be
// negative. If now is earlier than the newest entry (a racing goroutine read the clock a moment
// later), the units are recorded at the newest entry's time, which keeps the log sorted and is
// stricter, never more lenient.
//
// RetryAfterMs for a refused cost is solved: it needs k = count + cost - Limit entries gone, so
// it is the k-th oldest entry's time + Window - now; for cost 1 on a full log that is docs/policies.md's
// oldest + windowMs - now, with no extra millisecond.
func (p SlidingLog) Take(s *SlidingLogState, now, cost int64) policy.Result {
	e := *s // Expire moves only e's head, count and base
	p.Expire(&e, now)
	r := policy.Result{Limit: p.Limit}
	free := p.Limit - int64(e.count)
	if cost <= free {
		if cost > 0 {
			p.push(&e, now, int(cost))
			*s = e
		}
		r.Allowed = true
	} else if cost <= p.Limit {
		r.RetryAfterMs = e.at(int(cost-free-1)) + p.WindowMs() - now
	}
	r.Remaining = p.Limit - int64(e.count)
	r.ResetAtMs = p.resetAt(&e, now)
	return r
}

// Admit is Take reduced to the decision, for callers that want only Allowed (the engine's Allow
// path), computing no Result. It decides and writes s exactly as Take does: concurrent use of one
// state must be serialized by its owner.
func (p SlidingLog) Admit(s *SlidingLogState, now, cost int64) bool {
	e := *s
	p.Expire(&e, now)
	if cost > p.Limit-int64(e.count) {
		return false
	}
	if cost > 0 {
		p.push(&e, now, int(cost))
		*s = e
	}
	return true
}

// push appends n (1 … Limit - count) copies of now, or of the newest entry's time if later.
func (p SlidingLog) push(s *SlidingLogState, now int64, n int) {
	if len(s.ring) < int(p.Limit) {
		s.grow(int(p.Limit))
	}
	t := now
	if s.count == 0 {
		s.base = t
	} else {
		t = max(t, s.at(int(s.count)-1))
	}
	j := int(s.head) + int(s.count)
	if j >= len(s.ring) {
		j -= len(s.ring)
	}
	for range n {
		s.ring[j] = uint32(t)
		if j++; j == len(s.ring) {
			j = 0
		}
	}
	s.count += int32(n)
}

// grow reallocates the ring to n entries, keeping the live ones in order. It runs only for a state
// not made by Fresh (the zero state), on its first admission.
func (s *SlidingLogState) grow(n int) {
	ring := make([]uint32, n)
	for i := range int(s.count) {
		j := int(s.head) + i
		if j >= len(s.ring) {
			j -= len(s.ring)
		}
		ring[i] = s.ring[j]
	}
	s.ring, s.head = ring, 0
}

func (p SlidingLog) resetAt(s *SlidingLogState, now int64) int64 {
	if s.count == 0 {
		return now
	}
	return s.at(int(s.count)-1) + p.WindowMs()
}

// Peek expires a copy of s at now and reports what a unit request would get, changing nothing
// (the ring is only read). Probe.Count is the units in the window (countOf).
func (p SlidingLog) Peek(s SlidingLogState, now int64) (policy.Result, policy.Probe) {
	return p.PeekCost(s, now, 1)
}

// PeekCost is Peek for a request of cost units (cost >= 0): Allowed and RetryAfterMs are what
// Take would return for it at now; Remaining and ResetAtMs describe the window as it stands.
// Like Peek it expires a copy of s and writes nothing that s shares (its ring).
func (p SlidingLog) PeekCost(s SlidingLogState, now, cost int64) (policy.Result, policy.Probe) {
	p.Expire(&s, now)
	n := int64(s.count)
	free := p.Limit - n
	r := policy.Result{Allowed: cost <= free, Limit: p.Limit, Remaining: free, ResetAtMs: p.resetAt(&s, now)}
	if !r.Allowed && cost <= p.Limit {
		r.RetryAfterMs = s.at(int(cost-free-1)) + p.WindowMs() - now
	}
	return r, policy.Probe{Count: n}
}

// Dead reports whether s, at now, is indistinguishable from a new key's state: every entry has
// left the window. Exact because an empty log's ring contents, head and base are never read
// again before the next push overwrites them, so it decides exactly as Fresh does at now and
// after. Entries stamped after now are in the window, so such a state is never dead.
func (p SlidingLog) Dead(s SlidingLogState, now int64) bool {
	p.Expire(&s, now)
	return s.count == 0
}
