package redisstore

import (
	"sync"
	"sync/atomic"
	"time"
)

// breakerBuckets is how many slices the breaker's window is counted in: the window slides by a
// tenth of itself, so a failure leaves the count at most a tenth of a window late.
const breakerBuckets = 10

// maxFatalBackoff caps the cooldown growth after repeated errors that affect every key: probes
// of a server that keeps refusing the password go out at most 64 cooldowns apart.
const maxFatalBackoff = 64

// breaker is a circuit breaker with a single half-open probe. It opens on a failure ratio over a
// sliding window (the default), or on consecutive failures (WithBreaker), or at once on an error
// that affects every key. The closed state costs one atomic load per call before the round trip
// and one short critical section after it; the round trip dominates both. It starts no
// goroutine: the next call after the cooldown is the probe.
type breaker struct {
	// Consecutive rule (threshold > 0) or ratio rule (threshold == 0).
	threshold int64
	ratio     float64
	minCalls  int64
	bucketNs  int64
	cooldown  int64 // ns

	mu      sync.Mutex
	fails   int64 // consecutive failures
	buckets [breakerBuckets]struct{ epoch, ok, bad int64 }

	openedAt atomic.Int64 // monotonic ns since base; 0 = closed
	curCool  atomic.Int64 // the cooldown of the current opening, ns
	backoff  atomic.Int64 // multiplier of the cooldown after fatal errors, 1 when none
	probing  atomic.Bool
	opens    atomic.Uint64
	base     time.Time
}

func newBreaker(cfg config) *breaker {
	b := &breaker{
		threshold: int64(cfg.threshold), ratio: cfg.ratio, minCalls: int64(cfg.minCalls),
		bucketNs: max(int64(cfg.window)/breakerBuckets, 1), cooldown: int64(cfg.cooldown), base: time.Now(),
	}
	b.curCool.Store(b.cooldown)
	b.backoff.Store(1)
	return b
}

// since returns monotonic ns since base, at least 1 so that 0 can mean "closed".
func (b *breaker) since() int64 { return max(int64(time.Since(b.base)), 1) }

// allow reports whether this call may go to Redis, and whether it is the half-open probe (whose
// outcome must be reported with probe = true). While open and not probing, wait is how long
// until the next probe may go.
func (b *breaker) allow() (ok, probe bool, wait time.Duration) {
	opened := b.openedAt.Load()
	if opened == 0 {
		return true, false, 0
	}
	cool := b.curCool.Load()
	elapsed := b.since() - opened
	if elapsed < cool {
		return false, false, time.Duration(cool - elapsed)
	}
	if b.probing.CompareAndSwap(false, true) {
		return true, true, 0
	}
	return false, false, time.Duration(b.curCool.Load()) // at most until the probe in flight fails
}

// wait is the breaker's wait as it stands, for a call that it did not judge (the caller gave up
// first, or the clock was out of range) and that FailClosed refuses all the same: while open, the
// rest of its cooldown, the whole cooldown while another call is the probe, 0 once a probe is
// due; while closed, the cooldown a failure would open it for. It reads the breaker and changes
// nothing, so any number of calls may ask at once.
func (b *breaker) wait() time.Duration {
	opened := b.openedAt.Load()
	cool := b.curCool.Load()
	if opened == 0 {
		return time.Duration(cool)
	}
	if elapsed := b.since() - opened; elapsed < cool {
		return time.Duration(cool - elapsed)
	}
	if b.probing.Load() {
		return time.Duration(cool)
	}
	return 0
}

// record counts one outcome in the window and returns the window's totals.
func (b *breaker) record(bad bool) (ok, failed int64) {
	now := b.since() / b.bucketNs
	cur := &b.buckets[now%breakerBuckets]
	if cur.epoch != now {
		*cur = struct{ epoch, ok, bad int64 }{epoch: now}
	}
	if bad {
		cur.bad++
	} else {
		cur.ok++
	}
	for i := range b.buckets {
		if x := &b.buckets[i]; now-x.epoch < breakerBuckets {
			ok += x.ok
			failed += x.bad
		}
	}
	return ok, failed
}

// success counts a call Redis answered. Only the probe closes an open breaker: a call that was
// already in flight when the breaker opened says less about Redis now than the failures that
// opened it, and the cooldown promised to callers would otherwise end early.
func (b *breaker) success(probe bool) {
	b.mu.Lock()
	opened := b.openedAt.Load() != 0
	if opened && !probe {
		// Judged under the lock, once: a breaker opened after this read (failure and fatal open
		// it outside the lock) is left open, since this call only records a success then.
		b.mu.Unlock()
		return
	}
	b.fails = 0
	if opened {
		// Closing starts a clean window: the failures that opened it are over.
		b.buckets = [breakerBuckets]struct{ epoch, ok, bad int64 }{}
		b.openedAt.Store(0)
		b.curCool.Store(b.cooldown)
		b.backoff.Store(1)
	} else if b.threshold == 0 {
		b.record(false)
	}
	b.mu.Unlock()
	if probe {
		b.probing.Store(false)
	}
}

// failure counts one failed call; a failed probe, the threshold-th consecutive failure, or a
// window whose failure ratio reaches the bound (re)opens the breaker for another cooldown. It
// reports whether this call opened a closed breaker.
func (b *breaker) failure(probe bool) (opened bool) {
	if probe {
		b.openedAt.Store(b.since())
		b.probing.Store(false)
		return false
	}
	b.mu.Lock()
	trip := false
	if b.threshold > 0 {
		b.fails++
		trip = b.fails >= b.threshold
	} else {
		ok, bad := b.record(true)
		trip = ok+bad >= b.minCalls && float64(bad) >= b.ratio*float64(ok+bad)
	}
	b.mu.Unlock()
	if trip && b.openedAt.CompareAndSwap(0, b.since()) {
		b.opens.Add(1)
		return true
	}
	return false
}

// fatal opens the breaker at once, for an error that every key would get (a wrong password, a
// missing permission, a cluster node behind a single-node client): each further request would
// only fail the same way, and with a bad password also dial a new connection. Each fatal failure
// of a probe doubles the cooldown, up to maxFatalBackoff times the configured one, so that a
// misconfigured fleet does not hammer the server; the first success resets it.
func (b *breaker) fatal(probe bool) {
	k := b.backoff.Load()
	if probe {
		k = min(2*k, maxFatalBackoff)
		b.backoff.Store(k)
	}
	b.curCool.Store(k * b.cooldown)
	if probe {
		b.openedAt.Store(b.since())
		b.probing.Store(false)
		return
	}
	if b.openedAt.CompareAndSwap(0, b.since()) {
		b.opens.Add(1)
	}
}

// abandon releases a probe whose outcome says nothing about Redis (the caller gave up first).
func (b *breaker) abandon(probe bool) {
	if probe {
		b.probing.Store(false)
	}
}

func (b *breaker) open() bool { return b.openedAt.Load() != 0 }
