package shard

import (
	"math"
	"sync"
	satomic "sync/atomic"
	"unsafe"

	"github.com/slidelimit/slidelimit/atomic"
	"github.com/slidelimit/slidelimit/clock"
	"golang.org/x/sys/cpu"
)

// Shard is one shard: its current table, read without a lock, and the mutex that serialises
// inserts, rebuilds and full sweeps. The read-mostly fields and the mutable ones sit on separate
// cache lines, so inserts into a shard do not slow lookups in it. A Shard must not be copied.
type Shard struct {
	shardRead
	_ [lineSize - unsafe.Sizeof(shardRead{})]byte
	shardWrite
	_ [lineSize - unsafe.Sizeof(shardWrite{})]byte
}

// shardRead is what every lookup reads: the first of a Shard's two lines.
type shardRead struct {
	table   satomic.Pointer[Table]
	horizon satomic.Int64 // a decision at or after this time must sweep the shard first
	swept   satomic.Int64 // when the last complete sweep began (see Codec.Dead)
}

// shardWrite is what inserts and sweeps change: the second line.
type shardWrite struct {
	mu     sync.Mutex
	used   uint64 // slots holding a key in the current table; under mu
	cursor uint64 // where the next bounded reclaim starts; under mu
	live   satomic.Int64
	fresh  atomic.FreshAdmitter // cfg.Codec's, if it is one: asserted once, not on every insert
}

// lineSize is the cache line's size, 64 bytes at least: where the platform reports less (32 on
// 32-bit ARM and MIPS, 0 on wasm) the fields of a half would not fit in it. Shards are exactly two
// lines long, so that in an array of them (whose start the allocator aligns) the fields every
// lookup reads share one line.
const lineSize = max(unsafe.Sizeof(cpu.CacheLinePad{}), 64)

// Config is what every shard of one engine shares. It is read-only after Init.
type Config struct {
	// Codec is the engine's policy packed into cells: it sets every table's cell width (Words), a
	// new key's state (Fresh), which states sweeps and rebuilds drop or re-encode (Dead, Normalize,
	// Horizon) and which keys the key cap may evict (Stale); where it is also an atomic.Evictor, an
	// atomic.LiveFilter or an atomic.FreshAdmitter, the shard uses those too. Like the rest of
	// Config it is read-only after Init: the tables' cell width and every cell's encoding follow
	// from it.
	Codec atomic.Codec
	// Evict makes sweeps and rebuilds drop dead keys; without it they only re-encode them.
	Evict bool
	// Shift is the number of hash bits that chose the shard.
	Shift uint
	// Keys counts live keys across all shards; every insert, revival and eviction updates it.
	Keys *satomic.Int64
	// MaxKeys caps Keys (0: no cap). Acquire reserves a key's place in Keys before it inserts or
	// revives the key, so the cap holds exactly, whatever the number of racing inserts.
	MaxKeys int64
	// Clock is read under the shard lock when a key is inserted or revived (see Acquire).
	Clock *clock.Clock
	// FirstKey, when not nil, is sent to without blocking each time Keys rises from 0, so that a
	// background sweeper idle while there was no key looks again at once.
	FirstKey chan struct{}
	// ExpectedKeys, when above 0, is the number of keys each shard is sized for from the start:
	// its first table, and every table a rebuild makes, has room for that many at the target
	// load, so that growing to it copies no key, and a shard emptied by eviction keeps that room.
	ExpectedKeys uint64
}

// MinTable returns the fewest slots a shard's table ever has: its first table's size. It only reads
// cfg: safe for concurrent use, as Config is read-only after Init.
func (cfg *Config) MinTable() uint64 { return max(minSlots, sizeFor(cfg.ExpectedKeys)) }

// MinTableBytes returns the memory a table of MinTable slots takes for cfg.Codec's cells: what
// each shard allocates at Init. It only reads cfg: safe for concurrent use, as Config is read-only
// after Init.
func (cfg *Config) MinTableBytes() uint64 { return tableBytes(cfg.MinTable(), cfg.Codec.Words()) }

// evictor returns the codec's own eviction, when its state lives outside the cell.
func (cfg *Config) evictor() atomic.Evictor {
	ev, _ := cfg.Codec.(atomic.Evictor)
	return ev
}

// Init gives the shard an empty table. now starts the sweep horizon. It must run before any
// other method, and before the shard is shared with other goroutines: it takes no lock.
func (s *Shard) Init(cfg *Config, now int64) {
	s.fresh, _ = cfg.Codec.(atomic.FreshAdmitter)
	s.table.Store(newTable(cfg.MinTable(), cfg.Codec.Words(), cfg.Shift))
	s.swept.Store(now)
	s.horizon.Store(addClamped(now, cfg.Codec.Horizon()))
}

func addClamped(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Table returns the current table. It takes no lock.
func (s *Shard) Table() *Table { return s.table.Load() }

// Due reports whether a decision at now must sweep the shard first (see Codec.Horizon). It takes
// no lock: one atomic load.
func (s *Shard) Due(now int64) bool { return now >= s.horizon.Load() }

// Live returns the number of live keys in the shard: one atomic load, which may lag concurrent
// inserts and evictions.
func (s *Shard) Live() int64 { return s.live.Load() }

// Wait blocks until any rebuild in progress has published its table: a caller that found a Moved
// cell waits here instead of spinning. Safe for concurrent use.
func (s *Shard) Wait() {
	s.mu.Lock()
	//lint:ignore SA2001 an empty critical section is the point: it waits out the rebuild holding mu
	s.mu.Unlock()
}

// Acquire returns h's live cell in the current table, inserting h with a new key's state, or
// reviving its evicted cell, when needed; created reports that it did. It returns the time the
// caller must decide at: now, or the clock's reading under the lock if that is later. It returns
// a nil cell, and changes nothing, when h would be a new live key and cfg.Keys is at cfg.MaxKeys.
//
// Why the clock is read again: the key's old state was judged dead by an evictor (or a rebuild)
// at the evictor's time, which may be later than the caller's now, read before it waited for the
// lock. A request decided at that earlier time might still fall in the old state's window and be
// counted a second time there. Reading the clock under the lock, after every eviction and rebuild
// that led here, gives a time at which the old state was dead for certain.
//
// h must not be 0 (see the package comment). Safe for concurrent use: it inserts under the
// shard's mutex, and racing calls for one key return one cell.
func (s *Shard) Acquire(cfg *Config, h uint64, now int64) (cell *uint64, created bool, at int64) {
	return s.AcquireFrom(cfg, h, now, nil, 0)
}

// AcquireFrom is Acquire for a caller whose lock-free Table.Lookup of h, in table from, found h
// absent and stopped at slot free: if from is still the shard's table, the probe under the lock
// resumes there instead of walking h's probe sequence a second time. A nil from is Acquire. Safe
// for concurrent use, as Acquire is.
func (s *Shard) AcquireFrom(cfg *Config, h uint64, now int64, from *Table, free uint64) (cell *uint64, created bool, at int64) {
	cell, created, at, _, _ = s.acquire(cfg, h, now, from, free, false, -1)
	return cell, created, at
}

// AcquireReserved is AcquireFrom for a caller that holds a place in cfg.Keys already, from
// EvictCandidateKeep: a new or revived key takes that place instead of reserving one, so it cannot
// be refused at the cap, and a key found live (a racing insert of the same key) gives it back.
// It is safe for concurrent use, as Acquire is: it inserts under the shard's mutex.
func (s *Shard) AcquireReserved(cfg *Config, h uint64, now int64, from *Table, free uint64) (cell *uint64, created bool, at int64) {
	cell, created, at, _, _ = s.acquire(cfg, h, now, from, free, true, -1)
	return cell, created, at
}

// AdmitFrom is AcquireFrom, or AcquireReserved when reserved, for a caller that decides a request
// of cost units (cost >= 0) on the cell at once, as Allow does. When it inserts or revives h and
// cfg.Codec is an atomic.FreshAdmitter, it writes h's new state with that request already decided
// (and counted when admitted) at at, and reports decided, with the decision in admitted. The state
// is written before any other goroutine can see it (a new key's) or decide on it (a revived key's,
// under the lock), so the request is h's first, as the caller's own decision after the insert
// would be. Otherwise decided is false, and the caller decides on cell at at as usual. It is safe
// for concurrent use, as Acquire is: it inserts under the shard's mutex.
//
// Why: a new key's own decision is otherwise a second write to the cell, a compare-and-swap, and
// the codec's decoding of a state it has just written; a flood of new keys pays them on every
// request (bench/README.md, "A new key's first request, decided as it is written").
func (s *Shard) AdmitFrom(cfg *Config, h uint64, now, cost int64, from *Table, free uint64, reserved bool) (cell *uint64, at int64, decided, admitted bool) {
	cell, _, at, decided, admitted = s.acquire(cfg, h, now, from, free, reserved, cost)
	return cell, at, decided, admitted
}

// acquire is AcquireFrom, AcquireReserved and AdmitFrom; cost < 0 decides nothing. It unlocks
// after inserted returns rather than deferring the unlock: a deferred unlock cost every insert
// about 30 instructions of some 550, the call to inserted about 10 (counted with
// bench/scripts/instructions.sh).
func (s *Shard) acquire(cfg *Config, h uint64, now int64, from *Table, free uint64, reserved bool, cost int64) (cell *uint64, created bool, at int64, decided, admitted bool) {
	s.mu.Lock()
	cell, created, at, decided, admitted = s.inserted(cfg, h, now, from, free, reserved, cost)
	s.mu.Unlock()
	return cell, created, at, decided, admitted
}

// inserted is acquire's work, under s.mu.
func (s *Shard) inserted(cfg *Config, h uint64, now int64, from *Table, free uint64, reserved bool, cost int64) (cell *uint64, created bool, at int64, decided, admitted bool) {
	words := cfg.Codec.Words()
	if cfg.Clock != nil {
		now = max(now, cfg.Clock.Now())
	}
	t := s.table.Load()
	var i uint64
	var found bool
	if t == from && free < t.n {
		// Every slot from h's home to free held another key when Lookup passed it, and still does.
		i, found = t.slotFrom(h, free)
	} else {
		i, found = t.slot(h)
	}
	if found {
		c := t.cellOf(i)
		if w0, _ := atomic.Load(c, words); w0&atomic.Dead == 0 {
			if reserved {
				cfg.Keys.Add(-1) // the place is not needed
			}
			return c, false, now, false, false // a racing insert got there first
		}
		// Evicted: the slot is still h's, and only the lock holder writes a dead cell.
		if !reserved && !reserve(cfg) {
			return nil, false, now, false, false
		}
		f0, f1, decided, admitted := s.first(cfg, now, cost)
		atomic.Store(c, words, f0, f1)
		s.live.Add(1)
		return c, true, now, decided, admitted
	}
	if !reserved && !reserve(cfg) {
		return nil, false, now, false, false
	}
	if (s.used+1)*loadDen > t.n*loadNum {
		t = s.rebuild(cfg, now, 1)
		i, _ = t.slot(h)
	}
	f0, f1, decided, admitted := s.first(cfg, now, cost)
	t.put(i, h, words, f0, f1)
	s.used++
	s.live.Add(1)
	return t.cellOf(i), true, now, decided, admitted
}

// first returns a new key's state at now, with a first request of cost units decided in it
// (decided) when cost >= 0 and the codec can (see AdmitFrom).
func (s *Shard) first(cfg *Config, now, cost int64) (w0, w1 uint64, decided, admitted bool) {
	if cost >= 0 && s.fresh != nil {
		w0, w1, admitted = s.fresh.FreshAdmit(now, cost)
		return w0, w1, true, admitted
	}
	w0, w1 = cfg.Codec.Fresh(now)
	return w0, w1, false, false
}

// reserve counts one more live key in cfg.Keys unless that would pass cfg.MaxKeys. Only
// reservations raise Keys (evictions lower it), so the count never exceeds the cap, not even for
// a moment.
func reserve(cfg *Config) bool {
	if cfg.MaxKeys <= 0 {
		if cfg.Keys.Add(1) == 1 {
			cfg.firstKey()
		}
		return true
	}
	for {
		n := cfg.Keys.Load()
		if n >= cfg.MaxKeys {
			return false
		}
		if cfg.Keys.CompareAndSwap(n, n+1) {
			if n == 0 {
				cfg.firstKey()
			}
			return true
		}
	}
}

// firstKey tells cfg.FirstKey's reader, if any and not told already, that Keys rose from 0.
func (cfg *Config) firstKey() {
	select {
	case cfg.FirstKey <- struct{}{}:
	default:
	}
}

func (s *Shard) addLive(cfg *Config, d int64) {
	s.live.Add(d)
	cfg.Keys.Add(d)
}

// rebuild copies the live cells into a new table with room for extra more keys and publishes it;
// under mu. The live count is read under mu, where it can only fall (inserts and revivals take
// mu; only eviction runs without it), so the new table always has room for every cell copied.
// Every cell of the old table is marked Moved before it is copied, so an update racing with the
// copy fails its compare-and-swap and retries in the new table. A rebuild visits every cell, so it
// is also a full sweep: dead states are dropped (or re-encoded) and the horizon renewed.
func (s *Shard) rebuild(cfg *Config, now int64, extra uint64) *Table {
	old := s.table.Load()
	words := cfg.Codec.Words()
	ref := s.swept.Load()
	size := sizeFor
	if cfg.MaxKeys > 0 && cfg.Keys.Load() >= cfg.MaxKeys {
		// At the key cap, keys come only as others go, and an evicted key keeps its slot until
		// the next rebuild: the table fills with churn, not growth. A lower load leaves room for
		// more of it, so that each rebuild serves more new keys (see sizeAtCap).
		size = sizeAtCap
	}
	nt := newTable(max(size(uint64(s.live.Load())+extra), cfg.MinTable()), words, cfg.Shift)
	var used uint64
	var dropped int64
	fill := nt.filler(words)
	// As in SweepRange, most live states pass one mask test instead of Dead's decoding: a tenth
	// of an insert's time at 10M keys went to Dead in rebuilds.
	pat := s.livePattern(cfg, now)
	for i := range old.n {
		k, c := old.at(i)
		if k == 0 {
			continue
		}
		w0, w1, live := atomic.Mark(c, words, atomic.Moved)
		if !live {
			continue // evicted earlier; already uncounted
		}
		if !pat.vouches(w0) && cfg.Codec.Dead(w0, w1, ref, now) {
			if cfg.Evict {
				if ev := cfg.evictor(); ev != nil {
					ev.Release(w0, w1)
				}
				dropped++
				continue
			}
			w0, w1, _ = cfg.Codec.Normalize(w0, w1, now)
		}
		fill.fill(k, w0, w1) // no key is in nt twice: each was in old once
		used++
	}
	s.table.Store(nt)
	s.used = used
	s.addLive(cfg, -dropped)
	s.renewHorizon(cfg, now)
	return nt
}

// renewHorizon records a complete sweep that began at start.
func (s *Shard) renewHorizon(cfg *Config, start int64) {
	raise(&s.swept, start)
	raise(&s.horizon, addClamped(start, cfg.Codec.Horizon()))
}

func raise(v *satomic.Int64, to int64) {
	for {
		cur := v.Load()
		if to <= cur || v.CompareAndSwap(cur, to) {
			return
		}
	}
}

// livePattern is the codec's atomic.LiveFilter pattern at now, for judging a shard's cells: a state
// it vouches for is live, with no decoding.
type livePattern struct {
	on         bool
	mask, a, b uint64
}

// livePattern returns s's pattern at now, off where the codec has none or s is past its horizon:
// the pattern reads window bits as now's, which is exact only within the horizon.
func (s *Shard) livePattern(cfg *Config, now int64) livePattern {
	lf, ok := cfg.Codec.(atomic.LiveFilter)
	if !ok || s.Due(now) {
		return livePattern{}
	}
	p := livePattern{on: true}
	p.mask, p.a, p.b = lf.LivePattern(now)
	return p
}

// vouches reports whether state word w0 is live for certain.
func (p livePattern) vouches(w0 uint64) bool {
	m := w0 & p.mask
	return p.on && (m == p.a || m == p.b)
}

// SweepRange visits slots [from, to) of table t at now without taking the lock: each dead state
// is evicted (marked Dead, if unchanged since it was judged) or re-encoded. It returns the number
// of keys evicted. t must be a table this shard published; if it has since been replaced, the
// visit is harmless (every cell there is Moved) but not a sweep of the shard.
func (s *Shard) SweepRange(cfg *Config, t *Table, from, to uint64, now int64) (evicted int) {
	words := cfg.Codec.Words()
	ref := s.swept.Load()
	to = min(to, t.n)
	ev := cfg.evictor()
	pat := s.livePattern(cfg, now)
	for i := from; i < to; i++ {
		k, c := t.at(i)
		if k == 0 {
			continue
		}
		if pat.on && pat.vouches(satomic.LoadUint64(c)) {
			continue // live for certain: no decoding
		}
		if s.sweepCell(cfg, c, words, ref, now, ev) {
			evicted++
		}
	}
	return evicted
}

// sweepLocked is SweepRange for a caller that holds s.mu, so that no insert runs meanwhile: it
// finds the keys the live pattern does not vouch for with Table.nextSuspectLocked.
func (s *Shard) sweepLocked(cfg *Config, t *Table, from, to uint64, now int64) (evicted int) {
	words := cfg.Codec.Words()
	ref := s.swept.Load()
	to = min(to, t.n)
	ev := cfg.evictor()
	pat := s.livePattern(cfg, now)
	mask, a, b := pat.mask, pat.a, pat.b
	if !pat.on {
		mask, a, b = 0, 1, 1 // a pattern no state matches: every key is a suspect
	}
	for i := from; ; i++ {
		if i = t.nextSuspectLocked(i, to, mask, a, b); i >= to {
			return evicted
		}
		if s.sweepCell(cfg, t.cellOf(i), words, ref, now, ev) {
			evicted++
		}
	}
}

// sweepCell evicts (marks Dead) or, without eviction, re-encodes the state in cell c if it is dead
// at now, unless it changed since it was judged, and reports whether it evicted it.
func (s *Shard) sweepCell(cfg *Config, c *uint64, words int, ref, now int64, ev atomic.Evictor) bool {
	if ev != nil {
		if cfg.Evict && ev.Evict(c, ref, now) {
			s.addLive(cfg, -1)
			return true
		}
		return false
	}
	w0, w1 := atomic.Load(c, words)
	if w0&atomic.Flags != 0 || !cfg.Codec.Dead(w0, w1, ref, now) {
		return false
	}
	if cfg.Evict {
		if atomic.MarkIf(c, words, w0, w1, atomic.Dead) {
			s.addLive(cfg, -1)
			return true
		}
	} else if n0, n1, changed := cfg.Codec.Normalize(w0, w1, now); changed {
		atomic.CompareAndSwap(c, words, w0, w1, n0, n1)
	}
	return false
}

// Swept records that a sweep of table t which started at start has visited every slot. If t is
// still current, the horizon is renewed from start, and a table left mostly empty by eviction is
// rebuilt smaller. It is safe for concurrent use: the horizon is raised with compare-and-swap,
// and the rebuild takes the shard's mutex.
func (s *Shard) Swept(cfg *Config, t *Table, start, now int64) {
	if s.table.Load() != t {
		return // rebuilt mid-sweep: the new table's cells were not all visited
	}
	s.renewHorizon(cfg, start)
	if s.sparse(cfg, t) {
		s.mu.Lock()
		if s.table.Load() == t && s.sparse(cfg, t) {
			s.rebuild(cfg, now, 0)
		}
		s.mu.Unlock()
	}
}

// sparse reports whether t holds so few live keys that a rebuild would shrink it.
func (s *Shard) sparse(cfg *Config, t *Table) bool {
	live := uint64(s.live.Load())
	return t.n > cfg.MinTable() && live*4 < t.n && sizeFor(live) < t.n
}

// SweepAll sweeps the whole shard under its lock, for a decision that found the shard's horizon
// passed (the background sweeper, if any, fell behind: a paused process, or eviction off). It
// does nothing when the horizon has not passed at now: another caller swept the shard first.
func (s *Shard) SweepAll(cfg *Config, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.Due(now) {
		return
	}
	t := s.table.Load()
	s.sweepLocked(cfg, t, 0, t.n, now)
	s.renewHorizon(cfg, now)
}

// Reclaim evicts dead keys among up to budget slots from a rotating cursor, and reports how many.
// It bounds the work a request for a new key at the key cap can cause. It is safe for concurrent
// use: it sweeps under the shard's mutex.
func (s *Shard) Reclaim(cfg *Config, now int64, budget uint64) int {
	if !cfg.Evict {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.table.Load()
	from := s.cursor % t.n
	budget = min(budget, t.n) // a whole table at most, and from + budget cannot wrap
	s.cursor = from + budget
	n := s.sweepLocked(cfg, t, from, from+budget, now)
	if from+budget > t.n {
		n += s.sweepLocked(cfg, t, 0, from+budget-t.n, now)
	}
	return n
}

// Candidate is the stalest evictable key found so far by SampleStalest, over any number of
// shards; the zero Candidate holds none. It belongs to the goroutine that fills it.
type Candidate struct {
	shard  *Shard
	cell   *uint64
	w0, w1 uint64
	age    int64
}

// Found reports whether c holds a key (a plain read of c). c belongs to the goroutine that fills
// it.
func (c *Candidate) Found() bool { return c.cell != nil }

// Dead reports whether the state SampleStalest judged for c's key was dead at now (see
// Codec.Dead): the stalest key of a sample is often one no sweep has reached yet. A plain read of
// c; the shard's sweep reference is read atomically.
func (c *Candidate) Dead(cfg *Config, now int64) bool {
	return c.cell != nil && cfg.Codec.Dead(c.w0, c.w1, c.shard.swept.Load(), now)
}

// SampleStalest visits up to sample live keys from the shard's rotating cursor and keeps in best
// the one renewed longest ago that the codec allows to be evicted, judged against limit (see
// Codec.Stale: never a key holding half its limit or more). It takes the shard's lock for the
// cursor; best may already hold a key of another shard.
func (s *Shard) SampleStalest(cfg *Config, now, limit int64, sample int, best *Candidate) {
	cs := Candidates{keep: 1}
	if best.Found() {
		cs.c[0], cs.n = *best, 1
	}
	s.SampleStalestN(cfg, now, limit, sample, &cs)
	if cs.n > 0 {
		*best = cs.c[0]
	}
}

// MaxCandidates is the most keys a Candidates keeps.
const MaxCandidates = 8

// Candidates keeps the stalest evictable keys SampleStalestN has found so far, over any number of
// shards, stalest first: up to the number NewCandidates was given (the zero Candidates keeps
// one). It belongs to the goroutine that fills it; a filled one may be handed to another
// goroutine as a value.
type Candidates struct {
	c    [MaxCandidates]Candidate
	n    int
	keep int
}

// NewCandidates returns an empty Candidates that keeps up to n keys, n in [1, MaxCandidates]. A
// pure function of n; the Candidates it returns belongs to the goroutine that fills it.
func NewCandidates(n int) Candidates { return Candidates{keep: min(max(n, 1), MaxCandidates)} }

// Len is the number of keys cs holds (a plain read). cs belongs to the goroutine that fills it.
func (cs *Candidates) Len() int { return cs.n }

// At returns the i-th stalest key cs holds, i in [0, Len()). The pointer is into cs, and like cs
// belongs to the goroutine that fills it.
func (cs *Candidates) At(i int) *Candidate { return &cs.c[i] }

// offer keeps c if it is among the keep stalest so far; among keys of equal age the first offered
// stays ahead.
func (cs *Candidates) offer(c Candidate) {
	i := cs.n
	if i == cs.keep {
		if c.age <= cs.c[i-1].age {
			return
		}
		i--
	} else {
		cs.n++
	}
	for ; i > 0 && cs.c[i-1].age < c.age; i-- {
		cs.c[i] = cs.c[i-1]
	}
	cs.c[i] = c
}

// SampleStalestN is SampleStalest that keeps the stalest evictable keys of the sample in cs,
// as many as cs keeps, beside any it holds already: one sample can then make room for several
// new keys (each eviction still checks that its key's state is the one judged). It is safe for
// concurrent use on the shard (it reads the shard under its mutex); cs belongs to the caller.
func (s *Shard) SampleStalestN(cfg *Config, now, limit int64, sample int, cs *Candidates) {
	if cs.keep == 0 {
		cs.keep = 1
	}
	words := cfg.Codec.Words()
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.table.Load()
	seen := 0
	step := uint64(0)
	for ; step < t.n && seen < sample; step++ {
		i := (s.cursor + step) % t.n
		k, c := t.at(i)
		if k == 0 {
			continue
		}
		w0, w1 := atomic.Load(c, words)
		if w0&atomic.Flags != 0 {
			continue
		}
		seen++
		if age, ok := cfg.Codec.Stale(w0, w1, now, limit); ok {
			cs.offer(Candidate{shard: s, cell: c, w0: w0, w1: w1, age: age})
		}
	}
	s.cursor += step
}

// EvictCandidate evicts c's key if its state is still the one SampleStalest judged (a key renewed
// since, or moved to a new table, is left alone), and reports whether it did. It takes no lock:
// one compare-and-swap decides it against every concurrent update, sweep and eviction.
func EvictCandidate(cfg *Config, c *Candidate) bool {
	if c.cell == nil || !atomic.MarkIf(c.cell, cfg.Codec.Words(), c.w0, c.w1, atomic.Dead) {
		return false
	}
	c.shard.addLive(cfg, -1)
	return true
}

// EvictCandidateKeep is EvictCandidate that keeps the evicted key's place in cfg.Keys for the
// caller, who must then call AcquireReserved, once: a key evicted to make room for a new one hands
// its place straight to it, so that a racing insert cannot take the room and refuse the new key.
// It takes no lock: one compare-and-swap decides it, as for EvictCandidate.
func EvictCandidateKeep(cfg *Config, c *Candidate) bool {
	if c.cell == nil || !atomic.MarkIf(c.cell, cfg.Codec.Words(), c.w0, c.w1, atomic.Dead) {
		return false
	}
	c.shard.live.Add(-1)
	return true
}
