package redisstore

import (
	"sync/atomic"
	"time"
)

// breaker is a consecutive-failure circuit breaker with a single half-open probe. The closed
// state costs one atomic load per call; the clock is read only while open. It starts no
// goroutine: the next call after the cooldown is the probe.
type breaker struct {
	threshold int64
	cooldown  int64 // ns

	fails    atomic.Int64
	openedAt atomic.Int64 // monotonic ns since base; 0 = closed
	probing  atomic.Bool
	opens    atomic.Uint64
	base     time.Time
}

func newBreaker(threshold int, cooldown time.Duration) *breaker {
	return &breaker{threshold: int64(threshold), cooldown: int64(cooldown), base: time.Now()}
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
	elapsed := b.since() - opened
	if elapsed < b.cooldown {
		return false, false, time.Duration(b.cooldown - elapsed)
	}
	if b.probing.CompareAndSwap(false, true) {
		return true, true, 0
	}
	return false, false, time.Duration(b.cooldown)
}

// success closes the breaker: Redis answered.
func (b *breaker) success(probe bool) {
	b.fails.Store(0)
	if b.openedAt.Load() != 0 {
		b.openedAt.Store(0)
	}
	if probe {
		b.probing.Store(false)
	}
}

// failure counts one failed call; the threshold-th consecutive one, or a failed probe, (re)opens
// the breaker for another cooldown.
func (b *breaker) failure(probe bool) {
	if probe {
		b.openedAt.Store(b.since())
		b.probing.Store(false)
		return
	}
	if b.fails.Add(1) >= b.threshold && b.openedAt.CompareAndSwap(0, b.since()) {
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
