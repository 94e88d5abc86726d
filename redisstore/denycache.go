package redisstore

import (
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
	m         *xsync.MapOf[string, denyEntry]
	maxKeys   int
	lastSweep atomic.Int64
}

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
	c.m.Compute(key, func(old denyEntry, loaded bool) (denyEntry, bool) {
		return old, !loaded || old == e
	})
}

func (c *denyCache) put(key string, e denyEntry, now int64) {
	if c.m.Size() >= c.maxKeys {
		if _, ok := c.m.Load(key); !ok {
			c.sweep(now)
			if c.m.Size() >= c.maxKeys {
				return
			}
		}
	}
	c.m.Store(key, e)
}

// forget drops key's entry; the common case (no entry) takes no lock.
func (c *denyCache) forget(key string) {
	if _, ok := c.m.Load(key); ok {
		c.m.Delete(key)
	}
}

func (c *denyCache) len() int { return c.m.Size() }

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
