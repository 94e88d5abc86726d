// Package clock provides the time source of the engine: integer milliseconds since the Unix epoch,
// read with one atomic load and a compare. It is a building block of package engine; programs use
// it only to give a limiter a manual clock (NewManual) for tests, vectors and simulations.
//
// A coarse clock is advanced by one background goroutine every resolution (1ms by default), so a
// decision does not pay for time.Now (48ns against 1.6ns for a reading on the VM the benchmarks ran
// on, BenchmarkReading; more where the clock source is not the TSC). It follows the wall clock
// forward and never runs
// backwards: if the wall clock is stepped back, the reading holds until the wall clock catches up.
//
// The goroutine alone cannot bound the reading's lag: when every P is busy (a one-CPU container
// runs GOMAXPROCS=1, and overload is when limiting matters), its ticks wait until the scheduler
// preempts a busy goroutine, some 10ms later. So the readers refresh the clock too: the engine
// calls Due on every decision, which reports true at random once in about RefreshEvery calls (a
// per-thread random number, no shared write), and then reads the time through Refresh. A
// goroutine that keeps deciding therefore refreshes the clock every RefreshEvery decisions, a few
// microseconds' work, and the reading a decision uses lags real time by under 1ms (the reading's
// resolution) plus that: about a millisecond, busy or idle. What is left unbounded is a process
// that decides rarely while its CPUs are busy: there the lag is the schedulers', Go's 10ms
// preemption slice when the process's own goroutines hold every P, and whatever the operating
// system allows when other processes hold the CPUs (tens of milliseconds were seen on an
// overloaded 2-core VM). A caller that needs a reading within the resolution whatever the load
// reads it through Refresh, as redisstore does for its deny cache.
//
// The goroutine sleeps once idleTicks ticks (a second at the default 1ms) have gone by with no
// Refresh and no wake: ticking every millisecond cost an idle process about 2% of a core. A
// process that decides tens of thousands of times a second refreshes the clock many times in
// that span, so its clock does not sleep; one that decides less often may find it asleep. The
// reading then carries a mark that Now's compare finds, and the first reading after it reads the
// wall clock, moves the clock to it and wakes the goroutine, so no reading is ever older than a
// sleeping clock's wall time. Such a wake costs one reading a wall-clock read, at most about once
// a second (a woken clock stays awake at least idleTicks ticks). A task on a timer of its own (the
// engine's sweeper) reads it through Background, which does not wake it.
//
// A manual clock only moves when told to; Refresh leaves it alone.
//
// Times are in [0, MaxMs]: the engine's cells keep flag bits above bit 61, so a later time could
// not be stored. A coarse clock never gets near MaxMs (the year 146 million); a manual clock
// clamps every time it is given into the range (see NewManual), so no reading is ever outside it.
//
// Every method is safe for concurrent use. A Clock must not be copied after first use.
package clock

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // for go:linkname
)

// Clock reports the current time in Unix milliseconds. Make one with NewManual, NewCoarse or
// Acquire. The zero Clock is a coarse clock with no goroutine: it reads 0 (1970) until Refresh
// moves it to the wall clock's time, so a limiter given one would decide its first requests at
// 1970 and then jump; Stop on it does nothing. Every method is safe for concurrent use: Now is
// one atomic load and a compare, and a Clock is shared by every limiter that reads it.
type Clock struct {
	// now is the reading, or, while a coarse clock's goroutine sleeps, the last reading with
	// asleep's bit set, which sends Now to wake instead: so the reading costs one load and a
	// compare, and a clock nobody reads wakes nobody.
	now    atomic.Int64
	manual bool

	stopOnce sync.Once
	stopped  atomic.Bool // set by Stop: Refresh no longer moves the reading
	stop     chan struct{}
	done     chan struct{}
	used     atomic.Bool   // set by Refresh and wake: someone reads the clock, so it stays awake
	wakeC    chan struct{} // wake's signal to the sleeping goroutine (buffered: wake never blocks)
}

// asleep marks the reading of a coarse clock whose goroutine sleeps: the sign bit, so that Now's
// one test finds it (a reading is never negative).
const asleep = math.MinInt64

// idleTicks is how many ticks go by with no Refresh and no wake before the goroutine sleeps: a
// second at 1ms, long enough that a busy process (one Refresh in about RefreshEvery decisions,
// see Due) keeps its clock awake, and that a process waking it now and then pays a wall-clock
// read at most once a second.
const idleTicks = 1000

// MaxMs is the latest time a Clock reads: 2^62-1 ms after the Unix epoch, some 146 million years.
const MaxMs = 1<<62 - 1

// clamp brings ms into [0, MaxMs].
func clamp(ms int64) int64 { return min(max(ms, 0), MaxMs) }

// NewManual returns a clock that reads startMs until Set or Advance moves it. It starts no
// goroutine; Stop is a no-op. A manual clock clamps every time into [0, MaxMs]: a startMs, Set
// or Advance below 0 reads 0, and one past MaxMs reads MaxMs. Safe to call from any goroutine;
// the clock's methods are safe for concurrent use (see Clock).
func NewManual(startMs int64) *Clock {
	c := &Clock{manual: true}
	c.now.Store(clamp(startMs))
	return c
}

// NewCoarse returns a clock advanced by a background goroutine every resolution (at least 1ms).
// Stop ends the goroutine; the clock then keeps its last reading. Safe to call from any
// goroutine; the clock's methods are safe for concurrent use (see Clock).
func NewCoarse(resolution time.Duration) *Clock {
	resolution = max(resolution, time.Millisecond)
	c := &Clock{stop: make(chan struct{}), done: make(chan struct{}), wakeC: make(chan struct{}, 1)}
	c.now.Store(time.Now().UnixMilli())
	go c.run(resolution)
	return c
}

// run ticks every resolution while the clock is read, and sleeps once idleTicks ticks have gone
// by with nobody refreshing or waking it: a ticker of 1ms cost an idle process about 2% of a
// core.
func (c *Clock) run(resolution time.Duration) {
	defer close(c.done)
	t := time.NewTicker(resolution)
	defer t.Stop()
	for idle := 0; ; {
		select {
		case <-c.stop:
			c.unpark()
			return
		case <-t.C:
			c.tick(time.Now().UnixMilli())
		}
		if idle++; idle < idleTicks {
			continue
		}
		idle = 0
		if c.used.Swap(false) || !c.park() {
			continue
		}
		t.Stop()
		select {
		case <-c.stop:
			c.unpark()
			return
		case <-c.wakeC: // wake has set the reading already
		}
		t.Reset(resolution)
	}
}

// park marks the reading asleep, unless it moved since it was read (a Refresh racing).
func (c *Clock) park() bool {
	cur := c.now.Load()
	return cur >= 0 && c.now.CompareAndSwap(cur, cur|asleep)
}

// unpark clears the asleep mark, for a clock that stops: it then keeps its last reading.
func (c *Clock) unpark() {
	for {
		cur := c.now.Load()
		if cur >= 0 || c.now.CompareAndSwap(cur, cur&math.MaxInt64) {
			return
		}
	}
}

// tick moves the reading forward to ms, never back. A reading marked asleep is left alone: its
// goroutine sleeps, and the reader that finds the mark wakes it (see wake).
func (c *Clock) tick(ms int64) {
	for {
		cur := c.now.Load()
		if cur < 0 || ms <= cur || c.now.CompareAndSwap(cur, ms) {
			return
		}
	}
}

// Now returns the current reading in Unix milliseconds: one atomic load and a compare, except for
// the first reading after the clock's goroutine has slept, which reads the wall clock and wakes it.
// Safe for concurrent use, with every other method: readers racing a Set or Advance see the time
// before or after it.
func (c *Clock) Now() int64 {
	if v := c.now.Load(); v >= 0 {
		return v
	}
	return c.wake()
}

// Background returns the reading for a task that runs on its own timer (the engine's sweeper),
// without keeping a sleeping clock awake: on an awake clock it is Now; on a sleeping one it reads
// the wall clock and moves the sleeping reading forward to it, leaving the goroutine asleep, so
// that every reading after it, the wake's included, is at least as late (a sweep must never judge
// a key at a time later than a decision after it). Safe for concurrent use.
//
// Why: a sweeper that read the clock through Now every 100ms kept it awake, and ticking, for as
// long as any limiter held keys.
func (c *Clock) Background() int64 {
	if v := c.now.Load(); v >= 0 {
		return v
	}
	return c.fromWall(false)
}

// wake is Now for a reading marked asleep (see fromWall).
//
//go:noinline
func (c *Clock) wake() int64 { return c.fromWall(true) }

// fromWall moves a reading marked asleep to the wall clock's time (never back) and returns it,
// clearing the mark and waking the goroutine if wake is set, keeping it otherwise; if another
// reader woke the clock first, it returns that reading.
func (c *Clock) fromWall(wake bool) int64 {
	ms := time.Now().UnixMilli()
	for {
		cur := c.now.Load()
		if cur >= 0 {
			return cur
		}
		next := max(ms, cur&math.MaxInt64)
		mark := next | asleep
		if wake {
			mark = next
		}
		if mark == cur || c.now.CompareAndSwap(cur, mark) {
			if wake {
				c.used.Store(true)
				select {
				case c.wakeC <- struct{}{}:
				default: // a signal is pending already
				}
			}
			return next
		}
	}
}

// RefreshEvery is about how many calls to Due pass between two that report true.
const RefreshEvery = 512

// Due reports, at random once in about RefreshEvery calls, that its caller should read the time
// through Refresh rather than Now. It costs a per-thread random number and a compare, and
// writes nothing shared, so it can sit on every decision's path. Safe for concurrent use.
func Due() bool { return cheaprand()&(RefreshEvery-1) == 0 }

// DueFor is Due for a caller about to make n decisions at one reading: it reports true about
// n times in RefreshEvery calls (always, for n >= RefreshEvery), so that the clock is refreshed
// as often per decision as when each decision calls Due. Safe for concurrent use.
func DueFor(n int) bool { return cheaprand()&(RefreshEvery-1) < uint32(min(max(n, 0), RefreshEvery)) }

// Refresh moves a coarse clock's reading forward to the wall clock's, if it lags, and returns the
// reading: a reader's own tick, for when the clock's goroutine cannot run (see the package
// comment). On a manual clock, and on a coarse clock after Stop, it is Now. Safe for concurrent
// use: racing Refreshes each move the reading forward only, so it never goes back.
//
//go:noinline
func (c *Clock) Refresh() int64 {
	if !c.manual && !c.stopped.Load() {
		if !c.used.Load() { // a write only once in idleTicks: the word is shared by every reader
			c.used.Store(true)
		}
		c.tick(time.Now().UnixMilli())
	}
	return c.Now()
}

// cheaprand is the runtime's per-thread random number generator (wyrand), the one behind map
// iteration order; the runtime keeps it reachable by linkname.
//
//go:linkname cheaprand runtime.cheaprand
func cheaprand() uint32

// Manual reports whether c is a manual clock. Safe for concurrent use: a clock's kind never
// changes.
func (c *Clock) Manual() bool { return c.manual }

// Set moves a manual clock to ms (clamped into [0, MaxMs]), forward or back. It panics on a
// coarse clock, whose time is not the caller's to set. Safe for concurrent use: one atomic store,
// which a concurrent Advance may build on or overwrite, and which readers see at their next Now.
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
// a manual clock. Safe for concurrent use: concurrent Stops all return once the goroutine has
// exited, and readers go on reading the last reading.
func (c *Clock) Stop() {
	if c.manual || c.done == nil { // no goroutine to end: a manual or a zero Clock
		return
	}
	c.stopOnce.Do(func() {
		c.stopped.Store(true)
		close(c.stop)
	})
	<-c.done
}

var shared struct {
	mu    sync.Mutex
	refs  int
	clock *Clock
}

// Acquire returns the process-wide coarse clock (1ms resolution), starting it if no one holds it,
// so that any number of limiters share one ticking goroutine. Each Acquire must be paired with one
// Release. Acquire and Release may be called from any goroutine: they take a process-wide lock.
func Acquire() *Clock {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.refs == 0 {
		shared.clock = NewCoarse(time.Millisecond)
	}
	shared.refs++
	return shared.clock
}

// Release gives back a clock obtained from Acquire; the last Release stops its goroutine. Safe
// from any goroutine, as Acquire is.
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
