package atomic

import (
	"math"
	"sync"
	satomic "sync/atomic"
	"unsafe"

	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

// NewSlidingLog returns the codec for p (it panics with p.Validate's error if p is not valid). It is safe for concurrent use:
// updates of one key serialize on that key's entry lock, as described below. A log's state is up to Limit
// timestamps, far too many for a cell, so the codec owns the logs, in a slab of entries each
// with its own mutex, and a key's one-word cell holds the handle of its entry:
//
//	63   62   61 .............. 0
//	Dead Moved  handle (slab index)
//
// An update locks its entry, then checks that its cell still holds the same handle with neither
// flag set, and only then reads or changes the log; eviction judges the log and marks the cell
// Dead under the same lock (Evict), then frees the entry. That re-check is what keeps a writer
// that loaded the handle before an eviction out of the entry once it is freed and handed to
// another key: the cell it checks is its own key's, which then no longer holds that handle live.
// A rebuild marks cells Moved without the entry's lock, but copies the handle into the new
// table, so a write racing with it still lands in the key's log. No lock is shared between keys
// on the decision path; the slab's mutex is taken only by Fresh (under the shard lock, when a
// key is inserted or revived) and when an entry is freed.
//
// Memory per key: the 8-byte cell in a 16-byte slot, a 64-byte entry (mutex,
// rules.SlidingLogState and the log's creation time, padded to a cache line so that hot keys do
// not share one) and the ring, 4*Limit bytes. A freed entry drops its ring; the slab itself does not shrink, and its
// free entries are reused first.
//
// Timestamps are full-width (the policy's ring holds them relative to the oldest), so nothing
// wraps: the horizon is unbounded and Normalize never re-encodes. At the key cap the log is never
// chosen by EvictStalest (Stale reports it not evictable), because that path marks a cell Dead
// without the entry's lock and without freeing the entry: with WithAtCap(EvictStalest), a full
// sliding-log limiter reclaims dead keys and otherwise refuses new ones.
func NewSlidingLog(config policy.SlidingLog) Codec {
	mustBeValid(config)
	p := rules.SlidingLog(config)
	c := &slidingLog{p: p}
	empty := []*logChunk{}
	c.chunks.Store(&empty)
	return c
}

// logEntry is one key's log and the lock that serializes its updates.
//
// floor is the time the log was created (inserted, or revived after an eviction), and every
// request is decided at no earlier time. A request whose clock reading is older (a goroutine that
// read the clock, stalled, and found the key evicted and revived meanwhile) would otherwise record
// its entries at that older time, in a stretch of the window that the evicted log may still
// have covered, and so count there twice. This is the log's counterpart of the window the sliding
// counter keeps in a zero-count cell, since an empty rules.SlidingLogState keeps no time.
type logEntry struct {
	mu    sync.Mutex
	s     rules.SlidingLogState
	floor int64
	_     [64 - unsafe.Sizeof(sync.Mutex{}) - unsafe.Sizeof(rules.SlidingLogState{}) - 8]byte
}

const logChunkLen = 256

type logChunk [logChunkLen]logEntry

type slidingLog struct {
	p rules.SlidingLog
	// chunks is replaced (copied and extended) under mu when the slab grows, and read without a
	// lock: a handle read from a cell was allocated before the cell was written, so the slice
	// loaded after it holds the handle's chunk.
	chunks satomic.Pointer[[]*logChunk]

	mu   sync.Mutex
	free []uint64 // freed handles, reused first; under mu
	next uint64   // handles below next have been allocated at least once; under mu
}

func (c *slidingLog) Words() int     { return 1 }
func (c *slidingLog) Horizon() int64 { return math.MaxInt64 }

func (c *slidingLog) entry(h uint64) *logEntry {
	return &(*c.chunks.Load())[h/logChunkLen][h%logChunkLen]
}

// Fresh allocates an entry holding an empty log and returns its handle. The engine calls it under
// the shard lock, to insert or revive a key, and always stores the handle in the key's cell.
func (c *slidingLog) Fresh(now int64) (uint64, uint64) {
	c.mu.Lock()
	var h uint64
	if n := len(c.free); n > 0 {
		h = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		h = c.next
		c.next++
		if cs := *c.chunks.Load(); h == uint64(len(cs))*logChunkLen {
			grown := append(cs[:len(cs):len(cs)], new(logChunk))
			c.chunks.Store(&grown)
		}
	}
	c.mu.Unlock()
	e := c.entry(h)
	e.mu.Lock()
	e.s, e.floor = c.p.Fresh(now), now
	e.mu.Unlock()
	return h, 0
}

// release empties entry h's log (dropping its ring) and returns h to the free list. Nothing can
// reach the entry any more: its cell is Dead, or Moved and dropped by a rebuild.
func (c *slidingLog) release(e *logEntry, h uint64) {
	e.s = rules.SlidingLogState{}
	e.mu.Unlock()
	c.mu.Lock()
	c.free = append(c.free, h)
	c.mu.Unlock()
}

// lock returns the entry that cell holds, locked, after checking under its lock that the cell
// still holds it and is live; or the cell's status when it is not live.
func (c *slidingLog) lock(cell *uint64) (*logEntry, Status) {
	for {
		w := satomic.LoadUint64(cell)
		if w&Flags != 0 {
			return nil, statusOf(w)
		}
		e := c.entry(w)
		e.mu.Lock()
		if satomic.LoadUint64(cell) == w {
			return e, OK
		}
		e.mu.Unlock() // evicted, moved, or revived with another entry since: look again
	}
}

func (c *slidingLog) Take(cell *uint64, now, cost int64) (policy.Result, Status) {
	e, st := c.lock(cell)
	if st != OK {
		return policy.Result{}, st
	}
	at := max(now, e.floor)
	r := c.p.Take(&e.s, at, cost)
	e.mu.Unlock()
	if r.RetryAfterMs > 0 {
		r.RetryAfterMs += at - now
	}
	return r, OK
}

func (c *slidingLog) Admit(cell *uint64, now, cost int64) (bool, Status) {
	e, st := c.lock(cell)
	if st != OK {
		return false, st
	}
	ok := c.p.Admit(&e.s, max(now, e.floor), cost)
	e.mu.Unlock()
	return ok, OK
}

func (c *slidingLog) Peek(cell *uint64, now int64) (policy.Result, policy.Probe, Status) {
	return c.peek(cell, now, 1)
}

// peek is Peek and PeekCost: it reads the log under its lock, at the log's floor, and gives the
// wait from now.
func (c *slidingLog) peek(cell *uint64, now, cost int64) (policy.Result, policy.Probe, Status) {
	e, st := c.lock(cell)
	if st != OK {
		return policy.Result{}, policy.Probe{}, st
	}
	at := max(now, e.floor)
	r, pr := c.p.PeekCost(e.s, at, cost)
	e.mu.Unlock()
	if r.RetryAfterMs > 0 {
		r.RetryAfterMs += at - now
	}
	return r, pr, OK
}

// PeekFresh reads an empty log without allocating one (the zero state is an empty log).
func (c *slidingLog) PeekFresh(now int64) (policy.Result, policy.Probe) {
	return c.p.Peek(rules.SlidingLogState{}, now)
}

var _ CostPeeker = (*slidingLog)(nil) // its cell is a handle to the ring: see CostPeeker

// PeekCost reads the log under its lock, as Peek does (see CostPeeker).
func (c *slidingLog) PeekCost(cell *uint64, now, cost int64) (policy.Result, Status) {
	r, _, st := c.peek(cell, now, cost)
	return r, st
}

// PeekFreshCost reads an empty log without allocating one, as PeekFresh does.
func (c *slidingLog) PeekFreshCost(now, cost int64) policy.Result {
	r, _ := c.p.PeekCost(rules.SlidingLogState{}, now, cost)
	return r
}

// Dead judges the log that handle w0 names, under its lock. The table calls it only for a cell it
// has just marked Moved, so no update can start on the log, and one in progress has finished
// once the lock is held.
func (c *slidingLog) Dead(w0, _ uint64, _, now int64) bool {
	e := c.entry(w0 &^ Flags)
	e.mu.Lock()
	dead := c.p.Dead(e.s, now)
	e.mu.Unlock()
	return dead
}

func (c *slidingLog) Normalize(w0, w1 uint64, _ int64) (uint64, uint64, bool) {
	return w0, w1, false // an empty log is a new key's, whatever its entry held before
}

// Stale reports every log as not evictable: see NewSlidingLog.
func (c *slidingLog) Stale(uint64, uint64, int64, int64) (int64, bool) { return 0, false }

// Evict marks the cell Dead and frees its entry if its log is empty at now, judging and marking
// under the entry's lock so that no update can slip in between.
func (c *slidingLog) Evict(cell *uint64, _, now int64) bool {
	w := satomic.LoadUint64(cell)
	if w&Flags != 0 {
		return false
	}
	e := c.entry(w)
	e.mu.Lock()
	if satomic.LoadUint64(cell) != w || !c.p.Dead(e.s, now) || !satomic.CompareAndSwapUint64(cell, w, w|Dead) {
		e.mu.Unlock() // changed since it was loaded, alive, or marked Moved by a rebuild meanwhile
		return false
	}
	c.release(e, w)
	return true
}

// Release frees the entry of a state that a rebuild dropped.
func (c *slidingLog) Release(w0, _ uint64) {
	h := w0 &^ Flags
	e := c.entry(h)
	e.mu.Lock()
	c.release(e, h)
}
