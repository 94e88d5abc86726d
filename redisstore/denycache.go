package redisstore

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v3"

	"github.com/slidelimit/slidelimit/internal/rules"
)

// denyEntry is what Redis said about a key when it refused it: the key's state then, until when
// (on the limiter's clock) the refusal may still hold, and the offset from the limiter's clock to
// the time base the script decided in (the server's, by default).
type denyEntry struct {
	until int64
	off   int64
	st    [5]int64
	log   *rules.SlidingLogState // the sliding log's entries instead of st; never written
}

// denyCache remembers refused keys so that a blocked client costs no round trip. It is bounded:
// at maxKeys it first drops expired entries (at most one sweep per sweepGapMs of limiter time),
// and if still full it does not remember the new key. Safe for concurrent use; a lookup takes no
// lock.
type denyCache struct {
	m       *xsync.MapOf[string, denyEntry]
	maxKeys int
	// n counts the entries, raised under a key's lock before an insert and lowered after a
	// delete, so that it is never below m's size: a cap checked on m's size let goroutines that
	// checked together all insert.
	n         atomic.Int64
	lastSweep atomic.Int64
	// gaveBack counts the refunds and resets Redis has applied, per stripe of keys. A refusal is
	// remembered only if none was applied to its key's stripe while its call was out: one
	// decided on Redis before a refund of the same key would otherwise be stored after the
	// refund forgot the key, and refuse, with no round trip, what Redis now admits. Striped so
	// that refunds of other keys, which rls makes on every request refused on another
	// descriptor, seldom keep a refusal out.
	gaveBack [gaveBackStripes]atomic.Uint64
}

const gaveBackStripes = 256

var stripeSeed = maphash.MakeSeed()

func stripeOf(key string) int { return int(maphash.String(stripeSeed, key) % gaveBackStripes) }

const sweepGapMs = 1000

func newDenyCache(maxKeys int) *denyCache {
	return &denyCache{m: xsync.NewMapOf[string, denyEntry](), maxKeys: maxKeys}
}

// get returns a live entry for key at now, dropping an expired one.
func (c *denyCache) get(key string, now int64) (denyEntry, bool) {
	e, ok := c.m.Load(key)
	if !ok {
		return e, false
	}
	if now >= e.until {
		c.dropIf(key, e)
		return e, false
	}
	return e, true
}

// dropIf deletes key only if it still holds e, so that a fresher entry stored concurrently
// survives.
func (c *denyCache) dropIf(key string, e denyEntry) {
	gone := false
	c.m.Compute(key, func(old denyEntry, loaded bool) (denyEntry, bool) {
		gone = loaded && old == e
		return old, !loaded || old == e
	})
	if gone {
		c.n.Add(-1)
	}
}

// version is read before a call for key whose refusal may be put: put stores the refusal only if
// no refund or reset was applied to the key's stripe since.
func (c *denyCache) version(key string) uint64 { return c.gaveBack[stripeOf(key)].Load() }

func (c *denyCache) put(key string, e denyEntry, now int64, v uint64) {
	if c.n.Load() >= int64(c.maxKeys) {
		if _, ok := c.m.Load(key); !ok {
			c.sweep(now)
			if c.n.Load() >= int64(c.maxKeys) {
				return // full: a flood of refused new keys takes no lock (reserve is the exact check)
			}
		}
	}
	// Checked under the key's lock, which gaveBackTo's delete also takes: a refund counted after
	// the check deletes the entry after it is stored.
	c.m.Compute(key, func(old denyEntry, loaded bool) (denyEntry, bool) {
		if c.gaveBack[stripeOf(key)].Load() != v {
			return old, !loaded // leave the key as it is
		}
		if !loaded && !c.reserve() {
			return old, true // full: the new key is not remembered
		}
		return e, false
	})
}

// reserve counts one more entry if that keeps the cache within maxKeys.
func (c *denyCache) reserve() bool {
	for {
		n := c.n.Load()
		if n >= int64(c.maxKeys) {
			return false
		}
		if c.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// remove deletes key's entry, if any, and uncounts it.
func (c *denyCache) remove(key string) {
	if _, ok := c.m.LoadAndDelete(key); ok {
		c.n.Add(-1)
	}
}

// gaveBackTo records that Redis applied a refund or reset of key, and forgets key: a refusal put
// by a call that was out meanwhile is then either not stored or deleted here.
func (c *denyCache) gaveBackTo(key string) {
	c.gaveBack[stripeOf(key)].Add(1)
	c.remove(key)
}

// forget drops key's entry; the common case (no entry) takes no lock.
func (c *denyCache) forget(key string) {
	if _, ok := c.m.Load(key); ok {
		c.remove(key)
	}
}

// len is the count of entries; one removed concurrently may still be counted.
func (c *denyCache) len() int { return int(c.n.Load()) }

func (c *denyCache) sweep(now int64) {
	last := c.lastSweep.Load()
	if (last != 0 && now-last < sweepGapMs) || !c.lastSweep.CompareAndSwap(last, now) {
		return
	}
	c.m.Range(func(k string, e denyEntry) bool {
		if now >= e.until {
			c.dropIf(k, e)
		}
		return true
	})
}
