// Package clock provides the time source of the engine: integer milliseconds since the Unix epoch,
// read with one atomic load.
//
// A coarse clock is advanced by one background goroutine every resolution (1ms by default), so a
// decision never pays for time.Now (about 96ns on the machines this was measured on, more than a
// whole decision). It follows the wall clock forward and never runs backwards: if the wall clock
// is stepped back, the reading holds until the wall clock catches up. A manual clock only moves
// when told to, for tests, vectors and simulations.
//
// Times are in [0, MaxMs]: the engine's cells keep flag bits above bit 61, so a later time could
// not be stored. A coarse clock never gets near MaxMs (the year 146 million); a manual clock
// clamps every time it is given into the range (see NewManual), so no reading is ever outside it.
//
// Every method is safe for concurrent use. A Clock must not be copied after first use.
package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock reports the current time in Unix milliseconds.
type Clock struct {
	now    atomic.Int64
	manual bool

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// MaxMs is the latest time a Clock reads: 2^62-1 ms after the Unix epoch, some 146 million years.
const MaxMs = 1<<62 - 1

// clamp brings ms into [0, MaxMs].
func clamp(ms int64) int64 { return min(max(ms, 0), MaxMs) }

// NewManual returns a clock that reads startMs until Set or Advance moves it. It starts no
// goroutine; Stop is a no-op. A manual clock clamps every time into [0, MaxMs]: a startMs, Set
// or Advance below 0 reads 0, and one past MaxMs reads MaxMs.
func NewManual(startMs int64) *Clock {
	c := &Clock{manual: true}
	c.now.Store(clamp(startMs))
	return c
}

// NewCoarse returns a clock advanced by a background goroutine every resolution (at least 1ms).
// Stop ends the goroutine; the clock then keeps its last reading.
func NewCoarse(resolution time.Duration) *Clock {
	resolution = max(resolution, time.Millisecond)
	c := &Clock{stop: make(chan struct{}), done: make(chan struct{})}
	c.now.Store(time.Now().UnixMilli())
	go c.run(resolution)
	return c
}

func (c *Clock) run(resolution time.Duration) {
	defer close(c.done)
	t := time.NewTicker(resolution)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.tick(time.Now().UnixMilli())
		}
	}
}

// tick moves the reading forward to ms, never back.
func (c *Clock) tick(ms int64) {
	for {
		cur := c.now.Load()
		if ms <= cur || c.now.CompareAndSwap(cur, ms) {
			return
		}
	}
}

// Now returns the current reading in Unix milliseconds. It is one atomic load.
func (c *Clock) Now() int64 { return c.now.Load() }

// Manual reports whether c is a manual clock.
func (c *Clock) Manual() bool { return c.manual }

// Set moves a manual clock to ms (clamped into [0, MaxMs]), forward or back. It panics on a
// coarse clock, whose time is not the caller's to set.
func (c *Clock) Set(ms int64) {
	c.mustBeManual("Set")
	c.now.Store(clamp(ms))
}

// Advance moves a manual clock by d (truncated to whole milliseconds; forward for a positive d)
// and returns the new reading, which stops at 0 and at MaxMs rather than wrap. Concurrent
// Advances add up. It panics on a coarse clock.
func (c *Clock) Advance(d time.Duration) int64 {
	c.mustBeManual("Advance")
	step := int64(d / time.Millisecond)
	for {
		cur := c.now.Load()
		next := int64(MaxMs)
		if step < MaxMs-cur { // cur <= MaxMs, so MaxMs-cur does not overflow
			next = clamp(cur + step) // cur >= 0 and step < MaxMs-cur: no overflow either way
		}
		if c.now.CompareAndSwap(cur, next) {
			return next
		}
	}
}

func (c *Clock) mustBeManual(op string) {
	if !c.manual {
		panic("clock: " + op + " called on a coarse clock")
	}
}

// Stop ends a coarse clock's goroutine and waits for it to exit. It is idempotent, and a no-op on
// a manual clock.
func (c *Clock) Stop() {
	if c.manual {
		return
	}
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.done
}

var shared struct {
	mu    sync.Mutex
	refs  int
	clock *Clock
}

// Acquire returns the process-wide coarse clock (1ms resolution), starting it if no one holds it,
// so that any number of limiters share one ticking goroutine. Each Acquire must be paired with one
// Release.
func Acquire() *Clock {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.refs == 0 {
		shared.clock = NewCoarse(time.Millisecond)
	}
	shared.refs++
	return shared.clock
}

// Release gives back a clock obtained from Acquire; the last Release stops its goroutine.
func Release(c *Clock) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if c != shared.clock || shared.refs == 0 {
		return
	}
	shared.refs--
	if shared.refs == 0 {
		shared.clock.Stop()
		shared.clock = nil
	}
}
