package engine

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	mrand "math/rand/v2"
	"sync"
	satomic "sync/atomic"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/cpu"

	"github.com/slidelimit/slidelimit/atomic"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/evict"
	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/shard"
)

// Limiter is a rate limiter over many keys for one policy. All methods are safe for concurrent use
// by any number of goroutines. A Limiter must not be copied.
type Limiter struct {
	shards []shard.Shard
	shift  uint // a hash's top bits choose its shard: h >> 1 >> shift (a lone shard takes all 64)
	cfg    shard.Config
	codec  atomic.Codec
	clk    *clock.Clock
	// maxCost is the largest cost looked up (math.MaxInt64 unless the codec is a CostChecker); as
	// a uint64 compare it also sends a negative cost the slow way.
	maxCost int64
	// tables is what WithExpectedKeys's tables took at New, counted in presized until Close.
	tables uint64

	// String keys hash with memhash under the random hashSeed, or, with WithSeed, with xxhash
	// mixed with mix[0]: through the func value hash where a word has 64 bits, by a branch on
	// seeded where it has 32 (see hashString).
	hash     func(p unsafe.Pointer, seed, n uintptr) uintptr
	seeded   bool
	hashSeed uint64
	wordSeed uintptr // hashSeed for hash, or mix[0] with WithSeed
	mix      [3]uint64

	pol policy.Policy
	// clockNow is clk.Now, made once: Refund reads the time through it after each load of a
	// cell (see atomic.Refunder).
	clockNow func() int64
	limits   atomic.LimitTaker // nil where per-key limits are not supported
	refunds  atomic.Refunder   // nil where refunds are not supported
	limit    int64
	maxKeys  int64
	atCap    AtCap
	// judgeLimit is the limit EvictStalest judges every key against: the policy's, lowered to the
	// lowest per-key limit TakeWithLimit has been given, so that no key is judged against a limit
	// above its own. Written only when it falls.
	judgeLimit satomic.Int64

	ownsClock bool
	sweeper   *evict.Sweeper
	closeOnce sync.Once
	done      chan struct{} // closed by Close, to wake the calls blocked in Wait

	_            cpu.CacheLinePad
	closed       satomic.Bool
	_            cpu.CacheLinePad
	keys         satomic.Int64 // live keys; written on inserts and evictions only
	refusedAtCap satomic.Int64
	reclaimed    satomic.Int64  // dead keys a request at the cap removed (Stats.ReclaimedAtCap)
	evictedLive  satomic.Int64  // keys EvictStalest evicted (Stats.EvictedAtCap)
	evictCursor  satomic.Uint64 // where EvictStalest's next scan of the shards starts
	_            cpu.CacheLinePad
	// evictPool holds the runners-up of the last EvictStalest sample, stalest first, for the next
	// new keys at the cap to evict before they sample again (see evictStalest); evictNext is the
	// next one to hand out, evictLimit the judgeLimit they were judged against.
	evictMu    sync.Mutex
	evictPool  shard.Candidates
	evictNext  int
	evictLimit int64
}

// New returns a limiter for policy p, or an error naming the field and value of an invalid
// policy or option. Unless WithEviction(false) is given it starts a background sweeper, and
// unless WithClock is given it shares the process's coarse clock; Close stops both. It may be
// called from any goroutine, and the Limiter it returns is safe for concurrent use.
func New(p policy.Policy, opts ...Option) (*Limiter, error) {
	p, ok := rules.Value(p)
	if !ok {
		return nil, errors.New("engine: New: nil policy")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("engine: New: nil option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.expectedKeys > cfg.maxKeys {
		return nil, fmt.Errorf("engine: WithExpectedKeys(%d) is above the key cap, %d (see WithMaxKeys)", cfg.expectedKeys, cfg.maxKeys)
	}
	codec, limit, period, err := codecFor(p)
	if err == nil {
		codec, err = sizeForKeyLimits(p, codec, cfg.maxLimit)
	}
	if err != nil {
		return nil, err
	}
	// Keys fall into shards at random, so a shard's count spreads about its share by the share's
	// square root. Each shard gets room for its share plus four of those, and a few keys more: a
	// shard grows only 9% past what it was sized for (at 7/8 of a table sized for 4/5), which
	// alone covers small shares by too few deviations. At 10M keys in 256 shards that is 2% more
	// memory than the share alone.
	var perShard, tables uint64
	if share := (uint64(cfg.expectedKeys) + uint64(cfg.shards) - 1) / uint64(cfg.shards); share > 0 {
		perShard = share + 4*uint64(math.Ceil(math.Sqrt(float64(share)))) + 8 // exact: share < 2^52
		sc := shard.Config{Codec: codec, ExpectedKeys: perShard}
		tables = uint64(cfg.shards) * sc.MinTableBytes()
		if err := reserveTableMemory(cfg.expectedKeys, tables); err != nil {
			return nil, err
		}
	}
	l := &Limiter{
		shards:  make([]shard.Shard, cfg.shards),
		shift:   uint(63 - bits.TrailingZeros(uint(cfg.shards))),
		codec:   codec,
		pol:     p,
		limit:   limit,
		maxKeys: int64(cfg.maxKeys),
		atCap:   cfg.atCap,
		clk:     cfg.clock,
		done:    make(chan struct{}),
		tables:  tables,
	}
	if l.clk == nil {
		l.clk, l.ownsClock = clock.Acquire(), true
	}
	l.clockNow = l.clk.Now
	l.maxCost = math.MaxInt64
	if cc, ok := codec.(atomic.CostChecker); ok {
		l.maxCost = cc.MaxCost()
	}
	l.limits, _ = codec.(atomic.LimitTaker)
	l.refunds, _ = codec.(atomic.Refunder)
	l.initHash(cfg)
	l.judgeLimit.Store(limit)
	l.cfg = shard.Config{Codec: codec, Evict: cfg.eviction, Shift: 63 - l.shift, Keys: &l.keys, MaxKeys: l.maxKeys, Clock: l.clk}
	l.cfg.ExpectedKeys = perShard
	if cfg.eviction {
		l.cfg.FirstKey = make(chan struct{}, 1) // wakes the sweeper when it idles (see evict.Start)
	}
	now := l.clk.Now()
	for i := range l.shards {
		l.shards[i].Init(&l.cfg, now)
	}
	if cfg.eviction {
		l.sweeper = evict.Start(l.shards, &l.cfg, l.clk, cfg.sweepInterval, period)
	} else {
		l.sweeper = evict.New(l.shards, &l.cfg, l.clk)
	}
	return l, nil
}

// codecFor picks the packed cell for a policy, the limit reported in refusals made before any
// lookup, and how often the sweeper should visit every key.
//
// Each sweep period is the time after which an untouched key's state is certainly dead, so that
// it is gone within about three periods: the window for the window policies (the sliding log and
// the fixed window forget a key one window after its last request), the time to fill (or drain)
// completely for the buckets, a minute for the dual bucket; clamped as sweepPeriod clamps.
func codecFor(p policy.Policy) (atomic.Codec, int64, time.Duration, error) {
	ms := func(v int64) time.Duration {
		return time.Duration(min(v, int64(time.Hour/time.Millisecond))) * time.Millisecond
	}
	switch p := p.(type) {
	case policy.SlidingCounter:
		return atomic.NewSlidingCounter(p), p.Limit, sweepPeriod(p.Window), nil
	case policy.SlidingLog:
		return atomic.NewSlidingLog(p), p.Limit, sweepPeriod(p.Window), nil
	case policy.FixedWindow:
		return atomic.NewFixedWindow(p), p.Limit, sweepPeriod(p.Window), nil
	case policy.TokenBucket:
		return atomic.NewTokenBucket(p), p.Burst, sweepPeriod(ms(rules.TokenBucket(p).FillMs())), nil
	case policy.GCRA:
		return atomic.NewGCRA(p), p.Burst, sweepPeriod(ms(rules.GCRA(p).FillMs())), nil
	case policy.LeakyBucket:
		return atomic.NewLeakyBucket(p), p.Capacity, sweepPeriod(ms(rules.LeakyBucket(p).DrainMs())), nil
	case policy.DualBucket:
		return atomic.NewDualBucket(p), p.TokensPerMin, sweepPeriod(rules.DualPeriodMs * time.Millisecond), nil
	}
	return nil, 0, 0, fmt.Errorf("engine: New: policy type %T (ID %q) is not supported: pass one of package policy's types, as a value or a pointer", p, p.ID())
}

// sweepPeriod visits every key about once per window (a key is dead two windows after its last
// request, so it is gone within three), but not more often than once every two seconds (the cost
// of a pass over ten million keys stays under 2% of a core) nor less than once a minute. A sweep
// interval longer than the period replaces it (see evict.Start).
func sweepPeriod(window time.Duration) time.Duration {
	return min(max(window, 2*time.Second), time.Minute)
}

func (l *Limiter) initHash(cfg config) {
	var seed [24]byte
	if cfg.seeded {
		x := cfg.seed
		for i := range 3 {
			x += 0x9e3779b97f4a7c15
			binary.LittleEndian.PutUint64(seed[8*i:], fmix(x))
		}
	} else {
		_, _ = rand.Read(seed[:]) // crypto/rand.Read never fails on supported platforms
	}
	for i := range l.mix {
		l.mix[i] = binary.LittleEndian.Uint64(seed[8*i:])
	}
	l.seeded, l.hashSeed, l.hash = cfg.seeded, mrand.Uint64(), memhash
	l.wordSeed = uintptr(l.hashSeed)
	if cfg.seeded {
		l.hash, l.wordSeed = seededWordHash, uintptr(l.mix[0])
	}
}

// fmix is MurmurHash3's 64-bit finaliser: a bijection with full avalanche.
func fmix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// nonzero keeps hash 0 free to mark empty slots; the one hash it merges with 1 is a collision like
// any other 64-bit one. Every path that looks a hash up (admit, take, look, refund) applies it,
// so that hashString need not.
func nonzero(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// seededHash is WithSeed's hash: xxhash, the same in every process and 64 bits wide on every
// platform, mixed with the seed.
func seededHash(key string, seed uint64) uint64 {
	return nonzero(fmix(xxhash.Sum64String(key) ^ seed))
}

// seededWordHash is seededHash in memhash's shape, for Limiter.hash (64-bit platforms only: there
// a uintptr holds all 64 bits).
func seededWordHash(p unsafe.Pointer, seed, n uintptr) uintptr {
	return uintptr(seededHash(unsafe.String((*byte)(p), n), uint64(seed)))
}

// noescape hides p from escape analysis, as the runtime's function of that name does. A call
// through a func value is taken to leak its arguments, which would move every key the caller
// built at run time (string(b), a stack buffer) to the heap; neither hash Limiter.hash can hold
// retains p, and the caller keeps the key alive across the call.
//
//go:nosplit
func noescape(p unsafe.Pointer) unsafe.Pointer {
	x := uintptr(p) // a pointer read back from a uintptr's memory is one escape analysis cannot follow
	return *(*unsafe.Pointer)(unsafe.Pointer(&x))
}

// hashKey remixes an integer key under secret keys: a keyed bijection, so that small or sequential
// integers spread over the shards and an outsider cannot pick integers that crowd one shard.
func (l *Limiter) hashKey(k uint64) uint64 {
	return nonzero(fmix(fmix(k^l.mix[1]) ^ l.mix[2]))
}

// now is the time to decide at: the clock's reading, refreshed by the caller now and then (see
// clock.Due).
func (l *Limiter) now() int64 {
	if clock.Due() {
		return l.clk.Refresh()
	}
	return l.clk.Now()
}

func (l *Limiter) refuse(r Reason) Decision { return Decision{Limit: l.limit, Reason: r} }

// msDuration is ms milliseconds as a Duration, saturated at the longest: a state written at a time
// far ahead of the clock (a manual clock set back, which package clock says not to do) can ask for
// a wait past 292 years, which would otherwise wrap negative.
func msDuration(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

func (l *Limiter) decision(r policy.Result, cost int64) Decision {
	d := Decision{
		Allowed:    r.Allowed,
		Limit:      r.Limit,
		Remaining:  r.Remaining,
		RetryAfter: msDuration(r.RetryAfterMs),
		ResetAt:    time.UnixMilli(r.ResetAtMs),
	}
	if r.Allowed {
		d.Counted = cost
	} else {
		d.Reason = ReasonLimited
		if cost > r.Limit {
			d.Reason = ReasonCostAboveLimit
		}
	}
	return d
}

// shardOf returns h's shard, first sweeping it if its horizon has passed (see atomic.Codec.Horizon).
// It is small enough to inline; the sweep is not on the common path.
func (l *Limiter) shardOf(h uint64, now int64) *shard.Shard {
	sh := l.shard(h)
	if sh.Due(now) {
		l.sweepDue(sh, now)
	}
	return sh
}

// shard returns h's shard: the top log2(len(shards)) bits of h. Shifting twice keeps each shift
// below 64 (so it compiles without a check) even for a single shard, where all 64 bits go; the
// index is then below len(shards) for every h, so indexing by pointer leaves the bounds check off
// the hot path.
func (l *Limiter) shard(h uint64) *shard.Shard {
	i := h >> 1 >> (l.shift & 63)
	return (*shard.Shard)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(l.shards)), uintptr(i)*unsafe.Sizeof(shard.Shard{})))
}

func (l *Limiter) sweepDue(sh *shard.Shard, now int64) { sh.SweepAll(&l.cfg, now) }

// admit decides n units for h and reports only whether they were admitted: the path of Allow.
// A tracked key in a shard that needs no sweep is decided here in one codec call; everything else
// (a new or evicted key, a rebuild under way, a cost the policy refuses before lookup) goes the
// general way. A first attempt that finds its cell not live has consumed nothing, so handing over
// to take is safe.
func (l *Limiter) admit(h uint64, n int64) bool {
	h = nonzero(h)
	if uint64(n) > uint64(l.maxCost) || l.closed.Load() {
		return l.admitSlow(h, n)
	}
	now := l.clk.Now()
	sh := l.shard(h)
	if sh.Due(now) {
		return l.admitSlow(h, n)
	}
	t := sh.Table()
	c, free := t.Lookup(h)
	if c == nil {
		return l.admitNew(h, n, now, sh, t, free)
	}
	ok, st := l.codec.Admit(c, now, n)
	if st != atomic.OK {
		return l.admitSlow(h, n)
	}
	// The clock's own goroutine falls behind when every P is busy (see package clock), so now and
	// then a decision refreshes it, for the decisions after it. Here, after the codec's call, little
	// is live across the random number's call.
	if clock.Due() {
		l.clk.Refresh()
	}
	return ok
}

// admitSlow is admit's general way, kept out of line so that admit's frame stays small.
//
//go:noinline
func (l *Limiter) admitSlow(h uint64, n int64) bool {
	r, _ := l.take(h, n, opAdmit, 0)
	return r.Allowed
}

// admitNew is admit for a key its lookup, in table t, found absent and stopped at slot free: the
// insert resumes there (see shard.AcquireFrom) instead of walking the key's probe a second time,
// about 13 slots at the tables' load, which cost a new key about a fifth of its instructions and
// an exit mispredicted on most walks (bench/README.md, "What an insert costs"). The insert writes
// the new key's state with this request already decided in it, where the codec can
// (shard.AdmitFrom); otherwise admitNew decides the new cell itself, as admit does a found one,
// rather than through take's general loop, whose full result cost a new key about 90
// instructions to build and throw away.
//
//go:noinline
func (l *Limiter) admitNew(h uint64, n int64, now int64, sh *shard.Shard, t *shard.Table, free uint64) bool {
	c, at, _, decided, ok := l.acquire(sh, h, now, t, free, n > l.limit, n)
	if c == nil {
		return false // refused at the key cap (see acquire)
	}
	if !decided { // found live (a racing insert), or a codec that cannot decide a fresh state
		var st atomic.Status
		if ok, st = l.codec.Admit(c, at, n); st != atomic.OK {
			// Moved by a rebuild, or evicted, since the insert: nothing was consumed, so the general
			// way decides, as it does for admit.
			return l.admitSlow(h, n)
		}
	}
	if clock.Due() { // as in admit: a flood of new keys must refresh the clock too
		l.clk.Refresh()
	}
	return ok
}

// op selects what take asks of the codec.
type op uint8

const (
	opAdmit     op = iota // the decision only: Allow
	opTake                // the full result: Take
	opTakeLimit           // the full result against a per-key limit
)

// take decides n units for h. It returns the policy's result, or the reason it refused before
// consulting the policy (ReasonOK when it did consult it). For opAdmit only the result's Allowed
// is computed.
func (l *Limiter) take(h uint64, n int64, mode op, limit int64) (policy.Result, Reason) {
	h = nonzero(h)
	// Close is checked before the cost, so that after Close every call answers ReasonClosed
	// whatever its arguments (see Close).
	if l.closed.Load() {
		return policy.Result{}, ReasonClosed
	}
	if n < 0 {
		return policy.Result{}, ReasonNegativeCost
	}
	if n > l.maxCost {
		return policy.Result{}, ReasonCostAboveLimit // refused by the policy, with no lookup and no key
	}
	now := l.clk.Now()
	if clock.Due() {
		now = l.clk.Refresh()
	}
	sh := l.shardOf(h, now)
	t := sh.Table()
	c, free := t.Lookup(h)
	for {
		if c != nil {
			var r policy.Result
			var st atomic.Status
			switch mode {
			case opAdmit:
				r.Allowed, st = l.codec.Admit(c, now, n)
			case opTake:
				r, st = l.codec.Take(c, now, n)
			default:
				r, st = l.limits.TakeLimit(c, now, n, limit)
			}
			switch st {
			case atomic.OK:
				return r, ReasonOK
			case atomic.IsMoved:
				sh.Wait()
				t = sh.Table()
				c, free = t.Lookup(h)
				continue
			}
			t = nil // the cell was found dead: no probe to resume
		}
		// Not tracked, or evicted since: insert or revive under the shard lock, which may move
		// now forward (see shard.Acquire).
		bound := l.limit
		if mode == opTakeLimit {
			bound = limit
		}
		var reason Reason
		if c, now, reason, _, _ = l.acquire(sh, h, now, t, free, n > bound, -1); c == nil {
			return policy.Result{}, reason
		}
	}
}

// takeDecision is take with its outcome as a Decision.
func (l *Limiter) takeDecision(h uint64, n int64) Decision {
	r, reason := l.take(h, n, opTake, 0)
	if reason != ReasonOK {
		return l.refuse(reason)
	}
	return l.decision(r, n)
}

// acquire inserts h (or revives its evicted cell), applying the key cap, and returns the time to
// decide at. The cap is exact: shard.Acquire reserves the key's place in the count under the
// shard lock, and refuses when there is none; making room first, when the count is at the cap,
// only spares that lock.
//
// t and free are where the caller's lookup found h absent (see shard.AcquireFrom); t is nil when
// it found h's cell, dead. A cost of 0 or more is the caller's request, for the insert to decide in
// the state it writes where the codec can (decided, with the decision in admitted: see
// shard.AdmitFrom); take, which needs the full result, passes -1.
//
// hopeless says the request's cost is above the limit, so that it is refused whatever the state.
// Below the cap such a key is still tracked, as the policies' rules say (docs/policies.md); at the
// cap it is refused with ReasonCostAboveLimit before anything is reclaimed or evicted, because
// making room for it would take a live key's units (EvictStalest) for a request that consumes
// nothing, and ReasonKeyCap would tell the caller to wait for a room it cannot use.
func (l *Limiter) acquire(sh *shard.Shard, h uint64, now int64, t *shard.Table, free uint64, hopeless bool, cost int64) (c *uint64, at int64, reason Reason, decided, admitted bool) {
	budget := capTries
	reserved := false
	if l.keys.Load() >= l.maxKeys {
		if c := l.trackedSince(sh, h, t); c != nil {
			return c, now, ReasonOK, false, false
		}
		if hopeless {
			return nil, now, ReasonCostAboveLimit, false, false
		}
		var room bool
		if room, reserved = l.makeRoom(sh, now, &budget); !room {
			budget = 0 // nothing to evict: the insert below succeeds only if a key left meanwhile
		}
	}
	for {
		// When reserved, the insert takes the place an eviction handed over, and is never refused.
		if c, at, decided, admitted = sh.AdmitFrom(&l.cfg, h, now, cost, t, free, reserved); c != nil {
			return c, at, ReasonOK, decided, admitted
		}
		if hopeless { // the cap was reached after the check above
			return nil, at, ReasonCostAboveLimit, false, false
		}
		// At the cap. The room a reclaim makes can be taken by a racing insert before this request
		// reserves it (an eviction's cannot: it is handed over), so it tries again while its budget
		// lasts: that race does not refuse a key, and a flood of new keys costs bounded work each.
		var room bool
		if budget > 0 {
			room, reserved = l.makeRoom(sh, at, &budget)
		}
		if !room {
			l.refusedAtCap.Add(1)
			return nil, at, ReasonKeyCap, false, false
		}
		now = at
	}
}

// trackedSince returns h's live cell in sh's current table when the caller's lookup found h absent
// in t and a rebuild has replaced t since, or nil. Making room at the key cap must not precede
// finding such a key: it would evict a live key for a request that needs no room, and the key
// evicted may be h itself, whose units counted since would be lost. In AllowBatch this happens
// with no race: a run looks its keys up in the tables they had when it began, and a decision
// earlier in the run may insert h (a key repeated in the run) and rebuild its table. Only a
// request at the cap pays for the check, and only when its table was replaced.
func (l *Limiter) trackedSince(sh *shard.Shard, h uint64, t *shard.Table) *uint64 {
	cur := sh.Table()
	if t == nil || t == cur {
		return nil // the caller found h's cell dead, or looked in the current table
	}
	c := cur.Find(h)
	if c == nil {
		return nil
	}
	if w0, _ := atomic.Load(c, l.codec.Words()); w0&atomic.Flags != 0 {
		return nil // evicted, or moved by yet another rebuild: the usual way handles both
	}
	return c
}

// capTries bounds the bounded reclaims and EvictStalest samples one request at the key cap makes,
// together.
const capTries = 8

// capReclaimBudget bounds the slots one request at the key cap may sweep looking for dead keys.
const capReclaimBudget = 64

// makeRoom tries to get below the key cap: reclaim dead keys near the shard's cursor, then, if so
// configured, evict the stalest evictable key of a sample taken across the limiter, each taking
// one from *budget. It reports whether it made room, and whether that room is reserved for the
// caller (an eviction hands the evicted key's place over: the caller must then insert with
// shard.AdmitFrom's reserved, or shard.AcquireReserved).
func (l *Limiter) makeRoom(sh *shard.Shard, now int64, budget *int) (room, reserved bool) {
	*budget--
	if n := sh.Reclaim(&l.cfg, now, capReclaimBudget); n > 0 {
		l.reclaimed.Add(int64(n))
		if l.keys.Load() < l.maxKeys {
			return true, false
		}
	}
	if l.atCap != EvictStalest {
		return false, false
	}
	// Concurrent requests at the cap sample the same keys and pick the same stalest one; only one
	// compare-and-swap evicts it. A request that lost samples again (the winner's choice is gone
	// from the sample now) while its budget lasts.
	for *budget > 0 {
		*budget--
		evicted, found := l.evictStalest(sh, now)
		if evicted || !found {
			return evicted, evicted
		}
	}
	return false, false
}

// The EvictStalest sample: up to evictShards shards holding keys, evictPerShard live keys each,
// found among at most evictScan shards from a rotating cursor (the new key's own shard first).
// The scan bound keeps a limiter with many more shards than keys from reading every shard for
// each new key at the cap; the cursor makes successive new keys look at different shards.
const (
	evictShards   = 4
	evictPerShard = 16
	evictScan     = 1024
)

// evictStalest evicts the stalest key of a sample across the limiter that holds less than half of
// its limit (see WithAtCap), judged against the lowest limit any key has been given, and reports
// whether it did, and whether it found a key to evict (one it lost to a racing eviction or
// renewal is found but not evicted).
//
// A sample keeps its evictKeep stalest qualifying keys: the request evicts the first, and the
// next new keys at the cap evict the others before sampling again, so one sample's cost is shared
// by up to evictKeep new keys. A pooled key is evicted only if its state is still the one judged
// (one compare-and-swap against that state, as for the sampler's own): a key renewed meanwhile is
// skipped, and time only lowers what an unchanged state holds. The pool is dropped when the
// judged limit has fallen since.
func (l *Limiter) evictStalest(sh *shard.Shard, now int64) (evicted, found bool) {
	limit := l.judgeLimit.Load()
	for {
		c, ok := l.pooled(limit)
		if !ok {
			break
		}
		if shard.EvictCandidateKeep(&l.cfg, &c) {
			l.countEviction(&c, now)
			return true, true
		}
	}
	best := shard.NewCandidates(evictKeep)
	sampled := 0
	if sh.Live() > 0 {
		sh.SampleStalestN(&l.cfg, now, limit, evictPerShard, &best)
		sampled++
	}
	n := uint64(len(l.shards))
	// The next scan starts where this one stopped. (Advancing by a fixed step would not rotate
	// wherever the step is a multiple of the shard count: by evictScan, every limiter of up to
	// 1024 shards would sample shards 0 to 2 for every new key.) Concurrent scans may start at
	// the same shard; the cursor only spreads the samples.
	from := l.evictCursor.Load()
	i := uint64(0)
	for ; i < min(n, evictScan) && sampled < evictShards; i++ {
		s := &l.shards[(from+i)%n]
		if s == sh || s.Live() == 0 {
			continue
		}
		s.SampleStalestN(&l.cfg, now, limit, evictPerShard, &best)
		sampled++
	}
	l.evictCursor.Add(max(i, 1))
	if best.Len() == 0 {
		return false, false
	}
	// TakeWithLimit lowers judgeLimit before its take, so a sampled state holding a take at a new
	// lowest limit L may have been judged against the limit read above, from before the lowering:
	// a key holding half of L or more would be evicted. Every such lowering precedes the take the
	// sample read, so it is visible to this load: a limit that fell calls for a new sample (a
	// lower limit only protects more keys, so nothing found means nothing to find).
	if l.judgeLimit.Load() != limit {
		return false, true
	}
	if best.Len() > 1 {
		l.evictMu.Lock()
		// Not after Close, which emptied the pool under this lock having marked the limiter
		// closed first: a sample racing it would keep its cells, and old tables, alive again.
		if !l.closed.Load() {
			l.evictPool, l.evictNext, l.evictLimit = best, 1, limit
		}
		l.evictMu.Unlock()
	}
	if !shard.EvictCandidateKeep(&l.cfg, best.At(0)) {
		return false, true
	}
	l.countEviction(best.At(0), now)
	return true, true
}

// evictKeep is how many of a sample's stalest keys are evicted, by as many new keys at the cap,
// before the next sample; at most shard.MaxCandidates.
const evictKeep = 8

// pooled hands out the next key of the last sample's pool, if it was judged against limit.
func (l *Limiter) pooled(limit int64) (shard.Candidate, bool) {
	l.evictMu.Lock()
	defer l.evictMu.Unlock()
	if l.evictNext >= l.evictPool.Len() || l.evictLimit != limit {
		return shard.Candidate{}, false
	}
	c := *l.evictPool.At(l.evictNext)
	l.evictNext++
	return c, true
}

// countEviction counts c's key, just evicted, in Stats: as a reclaim when its judged state was
// dead already, else as a live key evicted.
func (l *Limiter) countEviction(c *shard.Candidate, now int64) {
	if c.Dead(&l.cfg, now) {
		l.reclaimed.Add(1) // dead already: the same as a reclaim's, whichever way it was found
	} else {
		l.evictedLive.Add(1)
	}
}

// peek is Peek (n = 1) and PeekN. maxCost is at least 1, so a unit's peek is never refused for
// its cost.
func (l *Limiter) peek(h uint64, n int64) Decision {
	switch {
	case l.closed.Load():
		return l.refuse(ReasonClosed)
	case n < 0:
		return l.refuse(ReasonNegativeCost)
	case n > l.maxCost:
		return l.refuse(ReasonCostAboveLimit) // as take refuses it: before any lookup
	}
	r, _, _ := l.look(h, n)
	d := l.decision(r, n)
	d.Counted = 0 // a peek counts nothing
	return d
}

func (l *Limiter) inspect(h uint64) (policy.Probe, bool) {
	if l.closed.Load() {
		return policy.Probe{}, false // as Peek refuses: a closed limiter reads and sweeps nothing
	}
	_, pr, tracked := l.look(h, 1)
	return pr, tracked
}

// look reads h's state at the current time, writing nothing: what a request of cost units would
// get, and, for a unit, the probe values (a request of another cost reports none).
func (l *Limiter) look(h uint64, cost int64) (policy.Result, policy.Probe, bool) {
	h = nonzero(h)
	now := l.now()
	sh := l.shardOf(h, now)
	for {
		c := sh.Table().Find(h)
		if c == nil {
			r, pr := l.peekFresh(now, cost)
			return r, pr, false
		}
		var r policy.Result
		var pr policy.Probe
		var st atomic.Status
		if cost == 1 {
			r, pr, st = l.codec.Peek(c, now)
		} else {
			r, st = atomic.PeekCost(l.codec, c, now, cost)
		}
		switch st {
		case atomic.OK:
			return r, pr, true
		case atomic.IsDead:
			r, pr := l.peekFresh(now, cost)
			return r, pr, false
		}
		sh.Wait()
	}
}

// peekFresh is look for a key not tracked.
func (l *Limiter) peekFresh(now, cost int64) (policy.Result, policy.Probe) {
	if cost == 1 {
		return l.codec.PeekFresh(now)
	}
	return atomic.PeekFreshCost(l.codec, now, cost), policy.Probe{}
}

// Len returns the number of keys tracked: live keys with eviction on, every key ever seen with
// eviction off. It is one atomic load, and may lag concurrent inserts and evictions.
func (l *Limiter) Len() int { return int(l.keys.Load()) }

// Stats is a snapshot of a limiter's bookkeeping, filled by (*Limiter).Stats. It is a plain value
// that the caller owns: read it from any goroutine once filled, but fill one from one at a time.
type Stats struct {
	Keys int64 // live keys (Len)
	// Evicted counts the keys the background sweeper removed since New (not the dead keys a
	// table's rebuild drops, nor those a decision's own sweep of a shard the sweeper fell behind
	// on removes).
	Evicted      int64
	RefusedAtCap int64 // requests refused because the key cap was reached
	// ReclaimedAtCap counts the dead keys (state equal to a new key's) that requests at the key
	// cap removed to make room, sweeping a few slots themselves or, under EvictStalest, choosing
	// one as the stalest of their sample, since New; not the sweeper's evictions.
	ReclaimedAtCap int64
	// EvictedAtCap counts the keys still holding state that WithAtCap(EvictStalest) evicted to
	// make room for new ones, since New; not the sweeper's evictions.
	EvictedAtCap int64
	Shards       int    // number of shards
	TableBytes   uint64 // memory held by the shards' tables
}

// Stats fills s without allocating; a nil s is left alone. It reads every shard's table pointer
// without locking, so under concurrent inserts the figures are a close snapshot, not an exact one.
func (l *Limiter) Stats(s *Stats) {
	if s == nil {
		return
	}
	s.Keys = l.keys.Load()
	s.Evicted = l.sweeper.Evicted()
	s.RefusedAtCap = l.refusedAtCap.Load()
	s.ReclaimedAtCap = l.reclaimed.Load()
	s.EvictedAtCap = l.evictedLive.Load()
	s.Shards = len(l.shards)
	s.TableBytes = 0
	for i := range l.shards {
		s.TableBytes += l.shards[i].Table().Bytes()
	}
}

// Close stops the limiter's background sweeper and releases the shared coarse clock (stopping its
// goroutine if no other limiter holds it). Close is checked before any argument, so every call
// that starts after Close has returned reports the closed limiter, whatever its key, cost or
// per-key limit: Take, TakeWithLimit, Peek and their ...Key forms return ReasonClosed; Allow,
// AllowN, AllowKey and the batches report false; Wait returns ErrClosed, even for a ctx already
// done; AsLimiter's Take returns ErrClosed; Refund gives back 0; Inspect reports a zero Probe and
// false. A call running concurrently with Close may still be decided as before it. Close is
// idempotent, safe to call from any goroutine, and always returns nil.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.done)
		l.sweeper.Stop()
		l.evictMu.Lock()
		l.evictPool, l.evictNext = shard.Candidates{}, 0 // its cells would keep old tables alive
		l.evictMu.Unlock()
		if l.tables > 0 {
			releaseTableMemory(l.tables)
		}
		if l.ownsClock {
			clock.Release(l.clk)
		}
	})
	return nil
}
