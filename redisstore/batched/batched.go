package batched

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/redisstore/internal/bound"
	"github.com/slidelimit/slidelimit/redisstore/internal/check"
)

// The errors are sentinel values, compared with errors.Is; safe to share between goroutines.
var (
	// ErrOffline is returned (wrapping redisstore.ErrUnavailable) with a decision the process
	// made alone, with the limit divided by the fleet size (see Take): while Redis is unreachable,
	// and for a request whose lease Redis answered with an error reply about that key alone (the
	// key holds another type, or a value that is no fleet state: another program wrote it). Such a
	// reply is wrapped too, naming the key with its subject written as "…", and does not take the
	// limiter offline: only that request is decided alone, and the next one for the key asks Redis
	// again. The Decision is usable; the units it admitted are charged to Redis when Redis answers
	// for the key again. Under WithOfflineMode(FailClosed) or (FailOpen) the Decision is that
	// mode's instead, and counts nothing, and the error (ErrOffline to errors.Is) says so.
	ErrOffline = fmt.Errorf("%w: batched: deciding locally with the limit divided by the fleet size", redisstore.ErrUnavailable)

	// What WithOfflineMode's FailClosed and FailOpen return instead: ErrOffline to errors.Is,
	// worded for what they did.
	errOfflineClosed = &offlineError{"batched: offline: refused, counting nothing (WithOfflineMode(FailClosed))"}
	errOfflineOpen   = &offlineError{"batched: offline: admitted, counting nothing (WithOfflineMode(FailOpen))"}
	// ErrClosed is returned by Take after Close. It is the root package's ErrClosed.
	ErrClosed = slidelimit.ErrClosed
)

// Limiter applies one sliding-window-counter limit per key across a fleet of processes, deciding
// in process from quota leased from Redis. Every process that builds a Limiter with the same name,
// policy and prefix on the same Redis shares one limit per key.
//
// All methods are safe for concurrent use by any number of goroutines. New starts one goroutine,
// which exchanges counts with Redis every sync interval; Close stops it. Through a client that
// does not set the context's deadline on its socket (see New), each call to Redis also runs on a
// goroutine of its own, which ends with the call.
type Limiter struct {
	client redis.UniversalClient
	name   string
	space  string // name and window, in every key name (see space)
	cfg    config
	id     string
	pol    policy.SlidingCounter
	rule   rules.SlidingCounterRule
	limit  int64
	w      int64
	clk    *clock.Clock
	ownClk bool
	ttl    string
	// bounded bounds each call by the caller's deadline and the timeout where the client does
	// not set them on its socket (see bound.Call), and lets Close wait for a call given up on.
	bounded *bound.Calls

	entries *xsync.MapOf[string, *entry]
	holding *xsync.MapOf[*entry, struct{}]
	renew   chan *entry
	// local decides while Redis is unreachable, per key, with the limit divided by the fleet.
	local *engine.Limiter

	members, epochK, quietK string
	// cluster: the client is a *redis.ClusterClient, which follows MOVED and ASK itself; from
	// any other client those replies say that it talks to a cluster node it cannot route for
	// (see transportFailure). Set by New, read only.
	cluster bool
	// leaseEpoch is the epoch token from the last answered heartbeat, nil before the first one;
	// the lease script checks it while epochCheck holds (see leaseLua and checkedEpoch).
	leaseEpoch atomic.Pointer[string]
	epochCheck atomic.Bool
	fleet      atomic.Int64 // the size shares are divided by, at least 1 (see WithInitialFleetSize)
	offline    atomic.Bool
	quietUntil atomic.Int64 // ms: after a data loss, no lease before this (every process re-declares first)
	// lossSaid: going offline on a lease's EPOCHLOST logged the loss, so the heartbeat that
	// finds the new epoch does not log it again.
	lossSaid atomic.Bool
	// saidHint is the last error every key gets that goOffline logged, in words (see
	// check.EveryKey), so that each is logged once.
	saidHint atomic.Pointer[string]

	closed    atomic.Bool
	closeOnce sync.Once
	stop      chan struct{}
	done      chan struct{}

	// syncer state, touched by the exchange only (one at a time, under syncMu)
	syncMu     sync.Mutex
	epoch      string
	lastForget int64
	// lossGen counts the data losses seen; redeclare says the last one's re-declaration has not
	// been acknowledged for every key yet, so the next exchange sends it again (each entry's
	// declared says which loss it has re-declared for, so that none is declared twice).
	lossGen   uint64
	redeclare bool
	// liveEnd is when the longest liveness among the fleet's members ends, as the last answered
	// heartbeat saw it: after a data loss (which empties the membership too) every member that
	// was live has had a heartbeat, and so re-declared, by then, whatever its sync interval.
	liveEnd int64

	leases, returns, charges, offlineDecisions, exchanges, failures, refusedLocally *xsync.Counter
}

// entry is one key's local lease. cell packs the window index (low 32 bits) the lease belongs to
// and the units left in it, so that the hot path is one load and one compare-and-swap.
type entry struct {
	cell   atomic.Uint64
	head   atomic.Int64  // the fleet's headroom (limit - estimate) at the last exchange
	low    atomic.Uint32 // renew in the background once fewer units are left
	queued atomic.Bool   // waiting in the renewal queue

	key  string
	rkey string

	mu       keyLock // serializes everything below, and every exchange for this key
	dead     bool    // forgotten: removed from the table, to be looked up again
	declared uint64  // the data loss (Limiter.lossGen) this key has re-declared its counts for
	// rec[0] is the window of the cell, rec[1] the one before.
	rec [2]winRec
	// Rate tracking: units used up to markWin/mark at the last exchange, at time lastAt.
	markWin, mark, lastAt int64
	// The refusal Redis gave last, if it still answers: written under mu, read without it, so
	// that a key at its fleet-wide limit refuses without taking the lock.
	deny atomic.Pointer[denial]
	// seq is odd while a holder of mu has units of the lease out of the cell (set aside for a
	// request it asks Redis about), or is changing the cell and the refusal together: a reader of
	// both without mu answers only from reads that no such change overlapped (a seqlock). The
	// cell's other changes need no section: decisions from the lease only shrink it (a refusal
	// read with more units held stays a refusal), a roll moves it to another window (which the
	// reader then does not answer for), and Close's give-back follows closed, which the reader
	// checks after its reads.
	seq atomic.Uint32
}

// denial is a refusal remembered until until for requests needing at least need more units in
// window win: until then Redis would refuse them as well, but for units other processes have
// given back since, which until, at most one sync interval away, bounds how long this process
// overlooks. st is the counts Redis returned with it, at redisNow on the script's clock and at on
// this one: the wait for a larger need is solved on them. Never changed once stored.
type denial struct {
	win, until, need int64
	st               rules.SlidingCounterState
	at, redisNow     int64
}

// winRec is what this process knows of its own counts in one window.
type winRec struct {
	win      int64 // window start (ms), -1 for none
	granted  int64 // units leased (and so counted in Redis) by this process
	unused   int64 // of those, units left when the window ended
	returned bool  // unused was given back (or given up on)
	off      int64 // units admitted while Redis was unreachable
	offSent  int64 // of those, units charged to Redis
}

const cellMask = 1<<32 - 1

// keyLock is an entry's mutex: a one-slot channel, so that a request waiting for it behind
// another call for the same key (a lease, or an exchange's pipeline, each up to a timeout) can
// give up when its ctx is done. It is not on the path of a decision from local quota, nor of a
// refusal a remembered one answers (refuseUnlocked): a channel hands the lock to the next waiter
// in turn, which must first be scheduled, and when every refusal of a key at its fleet-wide
// limit took the lock, they queued behind one another (the side-by-side run in docs/fleet.md
// fell from about 5 M decisions/s to 0.4-1.5 M, with a p99 of milliseconds).
type keyLock chan struct{}

func newKeyLock() keyLock { return make(keyLock, 1) }

// Lock waits for the lock.
func (k keyLock) Lock() { k <- struct{}{} }

// LockCtx waits for the lock until ctx is done, and reports whether it got it. A lock free now is
// taken even if ctx is already done.
func (k keyLock) LockCtx(ctx context.Context) bool {
	select {
	case k <- struct{}{}:
		return true
	default:
	}
	select {
	case k <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// Unlock releases the lock, which must be held.
func (k keyLock) Unlock() { <-k }

func cellOf(idx, rem int64) uint64 { return uint64(uint32(idx))<<32 | uint64(uint32(rem)) }

// New returns a batched limiter named name (printable ASCII without spaces, braces or ':', at most
// 64 bytes) applying policy p, which must be a policy.SlidingCounter, to every key across the
// fleet of processes that share client's Redis. A go-redis client needs ContextTimeoutEnabled:
// true, or read and write timeouts no longer than WithTimeout's, and no negative timeout but -1;
// New refuses one that has not. With ContextTimeoutEnabled false go-redis sets only its own
// timeouts on the socket, so each call to Redis then runs on a goroutine of its own, and Take
// (and the exchange, and Close) stop waiting at ctx's deadline or the timeout all the same, while
// the call goes on, holding its connection, until those socket timeouts end it (or Redis
// answers); hence the bound on them. A client of another type (a wrapper) is not looked inside:
// its calls run so too. New registers the process in the fleet with one heartbeat
// (if Redis does not answer, the limiter starts offline and keeps trying) and starts the
// exchange goroutine. The Limiter does not close client.
func New(client redis.UniversalClient, name string, p policy.Policy, opts ...Option) (*Limiter, error) {
	if check.IsNil(client) {
		return nil, errors.New("batched: client is nil")
	}
	if err := check.Name("batched", "name", name, false, 64); err != nil {
		return nil, err
	}
	p, ok := rules.Value(p)
	if !ok {
		return nil, errors.New("batched: policy is nil")
	}
	sc, ok := p.(policy.SlidingCounter)
	if !ok {
		return nil, fmt.Errorf("batched: policy %q (%T) is not available in batched mode; use sliding-counter", p.ID(), p)
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("batched: nil option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if err := check.Client("batched", client, cfg.timeout); err != nil {
		return nil, err
	}
	w := rules.SlidingCounter(sc).WindowMs()
	sp := space(name, w)
	l := &Limiter{
		client: client, name: name, cfg: cfg, pol: sc, rule: rules.SlidingCounter(sc).Compile(), limit: sc.Limit, w: w,
		bounded: bound.New(client),
		entries: xsync.NewMapOf[string, *entry](),
		holding: xsync.NewMapOf[*entry, struct{}](),
		renew:   make(chan *entry, 1<<14),
		members: membersKey(cfg.prefix, sp), epochK: epochKey(cfg.prefix, sp), quietK: quietKey(cfg.prefix, sp), space: sp,
		stop: make(chan struct{}), done: make(chan struct{}),
		leases: xsync.NewCounter(), returns: xsync.NewCounter(), charges: xsync.NewCounter(),
		offlineDecisions: xsync.NewCounter(), exchanges: xsync.NewCounter(), failures: xsync.NewCounter(),
		refusedLocally: xsync.NewCounter(),
	}
	l.ttl = fmt.Sprint(2*l.w + DefaultSkew.Milliseconds())
	if l.id = cfg.id; l.id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		l.id = hex.EncodeToString(b[:])
	}
	if l.clk = cfg.clock; l.clk == nil {
		l.clk, l.ownClk = clock.Acquire(), true
	}
	var err error
	if l.local, err = engine.New(sc, engine.WithClock(l.clk)); err != nil {
		l.release()
		return nil, err
	}
	l.fleet.Store(cfg.fleet0)
	l.epochCheck.Store(singleServer(client))
	_, l.cluster = client.(*redis.ClusterClient)
	l.syncMu.Lock()
	l.heartbeat(l.clk.Now())
	l.syncMu.Unlock()
	if cfg.manual {
		close(l.done)
	} else {
		go l.run()
	}
	return l, nil
}

func (l *Limiter) release() {
	if l.local != nil {
		_ = l.local.Close()
	}
	if l.ownClk {
		clock.Release(l.clk)
	}
}

// Allow reports whether one unit for key is admitted now, counting it if so. With quota leased
// for key's current window it decides in process, allocating nothing; otherwise it is Take(ctx
// background, key, 1), which may make one round trip to Redis. Safe for concurrent use.
func (l *Limiter) Allow(key string) bool {
	if e, ok := l.entries.Load(key); ok {
		idx := l.rule.Index(l.clk.Now())
		for {
			c := e.cell.Load()
			if uint32(c>>32) != uint32(idx) || uint32(c) == 0 || l.closed.Load() {
				break
			}
			if e.cell.CompareAndSwap(c, c-1) {
				if uint32(c)-1 < e.low.Load() {
					l.askRenewal(e)
				}
				return true
			}
		}
	}
	d, _ := l.Take(context.Background(), key, 1)
	return d.Allowed
}

// Take decides n units for key now and returns the Decision, with the engine's fields and
// Reason values: an admitted request is counted (in Redis, as part of a lease, before it is
// admitted), a refused one consumes nothing, n = 0 is a query that is always admitted, a negative
// n is refused with ReasonNegativeCost and a cost above the limit with ReasonCostAboveLimit.
//
// With quota leased for key's current window, Take decides in process without allocating.
// Otherwise it leases with one script call bounded by ctx's deadline and the limiter's timeout,
// with any client New accepts (a ctx cancelled without a deadline does not cut the call short: it
// ends at the timeout, as in redisstore); concurrent callers for the same key wait for that one
// call (or for an exchange's pipeline that holds the key), each until its own ctx is done: one that gives up waiting takes from the key's lease if
// the call has refilled it, and otherwise gets ctx's error with a refusal, counting nothing. A
// lease call whose reply is lost (to the caller's deadline or the limiter's timeout) may still
// have been granted on Redis; that grant is not given back, and stays counted there, against the
// fleet but never admitted, until its window no longer weighs: less admission, never more. A
// request that a refusal Redis gave earlier in the window still answers is refused in process,
// with no round trip and without waiting for the key's lock, except where the lock's holder may
// change the answer: during its round trip to Redis (which may bring the lease's rest back, or a
// grant), while Redis is unreachable or quiet after a data loss, and while the key's lease runs
// ahead of this process's clock.
// Remaining is what this process holds plus the fleet's headroom at the last exchange with Redis
// (a key this process has not yet asked Redis for reports the whole limit); RetryAfter is solved
// from the fleet's counts less the units this process's lease still holds, which go back when the
// window ends: with no other process, it is the engine's RetryAfter, whatever the cost.
//
// While Redis is unreachable Take decides locally with the limit divided by the fleet size N (the
// size last heard from Redis, kept as WithInitialFleetSize describes; that option's value until
// Redis has answered once), and returns that Decision with an error wrapping ErrOffline (and
// redisstore.ErrUnavailable), queries included. Its Remaining is the lease's rest plus what the
// share has left; a request the rest cannot cover whole is decided on the share alone. (Under
// WithOfflineMode(FailClosed) or (FailOpen), such a request gets that mode's Decision instead,
// with Remaining 0; queries are answered as here.) A cost
// above the limit is refused with ReasonCostAboveLimit and no error, as online: it needs no Redis,
// and no failure mode applied to ErrOffline may admit it. Its Limit is the policy's; a cost above the share but within the limit is refused with
// ReasonLimited and RetryAfter the sync interval, when the next heartbeat tries Redis again. A
// lease that Redis answers with an error reply about the key alone (a key of another type, say)
// is decided so too, for that request only, with the reply wrapped in the error beside
// ErrOffline (naming the key with its subject written as "…"); the limiter stays online.
//
// A ctx already done when the request cannot be decided from local quota is returned as ctx's
// error with a refusal, and nothing is counted (not even alone while offline); a decision from
// local quota does not look at ctx. A nil ctx is taken as context.Background(). Safe for
// concurrent use.
func (l *Limiter) Take(ctx context.Context, key string, n int64) (slidelimit.Decision, error) {
	if n > 0 {
		if e, ok := l.entries.Load(key); ok {
			now := l.clk.Now()
			idx := l.rule.Index(now)
			for {
				c := e.cell.Load()
				if uint32(c>>32) != uint32(idx) || int64(uint32(c)) < n || l.closed.Load() {
					if d, ok := l.refuseUnlocked(ctx, e, n); ok {
						return d, nil
					}
					break
				}
				if e.cell.CompareAndSwap(c, c-uint64(n)) {
					rem := uint32(c) - uint32(n)
					if rem < e.low.Load() {
						l.askRenewal(e)
					}
					return slidelimit.Decision{Allowed: true, Limit: l.limit, Remaining: int64(rem) + max(e.head.Load(), 0),
						ResetAt: time.UnixMilli((idx + 1) * l.w), Reason: slidelimit.ReasonOK, Counted: n}, nil
				}
			}
		}
	}
	return l.slow(ctx, key, n)
}

// askRenewal queues e for the next exchange, once.
func (l *Limiter) askRenewal(e *entry) {
	if e.queued.Load() || !e.queued.CompareAndSwap(false, true) {
		return
	}
	select {
	case l.renew <- e:
	default:
		// The queue is full: the key renews on its slow path when it runs out.
		e.queued.Store(false)
	}
}

func (l *Limiter) slow(ctx context.Context, key string, n int64) (slidelimit.Decision, error) {
	switch {
	case l.closed.Load():
		return slidelimit.Decision{Limit: l.limit, Reason: slidelimit.ReasonClosed}, ErrClosed
	case n < 0:
		return slidelimit.Decision{Limit: l.limit, Reason: slidelimit.ReasonNegativeCost}, nil
	}
	now := l.clk.Now()
	idx := l.rule.Index(now)
	if n == 0 || n > l.limit {
		// A query, or a cost no window can hold: both are answered with the key's window and
		// what it has left, as the engine answers them, and neither needs Redis.
		d := slidelimit.Decision{Allowed: n == 0, Limit: l.limit, ResetAt: time.UnixMilli((idx + 1) * l.w), Reason: slidelimit.ReasonOK}
		if n > 0 {
			d.Reason = slidelimit.ReasonCostAboveLimit
		}
		head, held := l.limit, int64(0) // a key never asked for: the whole limit, as far as this process knows
		if e, ok := l.entries.Load(key); ok {
			head, held = max(e.head.Load(), 0), rest(e, idx)
		}
		if l.offline.Load() || now < l.quietUntil.Load() {
			// Offline, a request takes from the lease's rest, or from this process's share alone
			// (see decideEntry): the fleet's headroom heard last is not there to take.
			d.Remaining = held + l.local.TakeWithLimit(key, 0, l.share()).Remaining
			if n > 0 {
				// Refused whatever Redis holds: no failure mode may admit it, nor give it a wait.
				return d, nil
			}
			return d, ErrOffline // a query is answered from the share in every mode (see WithOfflineMode)
		}
		d.Remaining = held + head
		return d, nil
	}
	if ctx == nil {
		ctx = context.Background() // as documented: a nil ctx is a programming error, not a panic
	}
	for {
		e, _ := l.entries.LoadOrCompute(key, func() *entry { return l.newEntry(key, idx) })
		if d, live, err := l.decideEntry(ctx, e, n); live {
			return d, err
		}
	}
}

// refuseUnlocked is the locked path's answer for a request that its key's remembered refusal
// answers, given without e.mu: at a key's fleet-wide limit most requests are such refusals, and
// under the lock they would queue behind one another. It answers only where the locked path would
// give the same answer (a cost within the limit, the cell on the clock's window without n units,
// Redis reachable, the limiter open, ctx not done, and no holder of e.mu with units out of the
// cell meanwhile), and reports whether it did. It reads the clock afresh, after the sequence, as
// the locked path reads it once it holds the lock.
func (l *Limiter) refuseUnlocked(ctx context.Context, e *entry, n int64) (slidelimit.Decision, bool) {
	if n > l.limit || e.deny.Load() == nil || l.closed.Load() || l.offline.Load() || (ctx != nil && ctx.Err() != nil) {
		return slidelimit.Decision{}, false
	}
	seq := e.seq.Load()
	now := l.clk.Now()
	idx := l.rule.Index(now)
	if seq&1 != 0 || now < l.quietUntil.Load() {
		return slidelimit.Decision{}, false
	}
	c := e.cell.Load()
	if uint32(c>>32) != uint32(idx) || int64(uint32(c)) >= n {
		// The cell is on another window (to be rolled, or running ahead of this clock), or holds
		// the request: the locked path decides.
		return slidelimit.Decision{}, false
	}
	d, ok := l.remembered(e, now, idx, int64(uint32(c)), n)
	if !ok || e.seq.Load() != seq || l.closed.Load() || l.offline.Load() {
		// The flags again: read only before the sequence, a Close or an outage meanwhile could
		// be answered as a refusal with nothing held.
		return slidelimit.Decision{}, false
	}
	l.refusedLocally.Inc()
	return d, true
}

// decideEntry decides under e's lock, unless e has been dropped (live false). The deferred unlock
// keeps a panic below (a caller's recovered one included) from leaving the key locked for good,
// and with it the exchange that flushes the key, and Close.
func (l *Limiter) decideEntry(ctx context.Context, e *entry, n int64) (d slidelimit.Decision, live bool, err error) {
	if !e.mu.LockCtx(ctx) {
		// The caller gave up waiting behind another call for the key. The lock holder may have
		// leased meanwhile, so local quota is tried once more, as the fast path would.
		if !l.closed.Load() {
			idx := l.rule.Index(l.clk.Now())
			if rem, ok := takeLocal(e, idx, n); ok {
				if rem < int64(e.low.Load()) {
					l.askRenewal(e)
				}
				return l.admitted(e, idx, rem, n), true, nil
			}
		}
		return slidelimit.Decision{Limit: l.limit, Reason: slidelimit.ReasonLimited}, true, ctx.Err()
	}
	defer e.mu.Unlock()
	if e.dead {
		return d, false, nil
	}
	d, err = l.decideLocked(ctx, e, n)
	return d, true, err
}

func (l *Limiter) newEntry(key string, idx int64) *entry {
	e := &entry{key: key, rkey: stateKey(l.cfg.prefix, l.space, key), markWin: -1, mu: newKeyLock()}
	e.rec[0].win, e.rec[1].win = -1, -1
	e.cell.Store(cellOf(idx-1, 0))
	e.head.Store(l.limit)
	return e
}

// roll moves e's cell to window idx, turning what was left of the old window's lease into its
// unused part, to be given back. Called with e.mu held.
func (l *Limiter) roll(e *entry, idx int64) {
	start := idx * l.w
	for {
		c := e.cell.Load()
		if int32(uint32(idx)-uint32(c>>32)) < 0 || start < e.rec[0].win {
			// Never back: a caller's time is older than a decision that already rolled e.
			return
		}
		if uint32(c>>32) == uint32(idx) {
			if e.rec[0].win != start {
				e.rec[1], e.rec[0] = e.rec[0], winRec{win: start}
			}
			return
		}
		if !e.cell.CompareAndSwap(c, cellOf(idx, 0)) {
			continue
		}
		unused := int64(uint32(c))
		if e.rec[0].win == start-l.w {
			e.rec[1] = e.rec[0]
			e.rec[1].unused, e.rec[1].returned = unused, unused == 0
		} else {
			// Two windows or more ago: nothing of it weighs on any estimate any more.
			e.rec[1] = winRec{win: -1}
		}
		e.rec[0] = winRec{win: start}
		e.low.Store(0)
		return
	}
}

// takeLocal takes n units from e's lease for window idx if it holds them.
func takeLocal(e *entry, idx, n int64) (int64, bool) {
	for {
		c := e.cell.Load()
		if uint32(c>>32) != uint32(idx) || int64(uint32(c)) < n {
			return int64(uint32(c)), false
		}
		if e.cell.CompareAndSwap(c, c-uint64(n)) {
			return int64(uint32(c)) - n, true
		}
	}
}

// addLocal adds g leased units to e's cell for window idx (the cell is on idx: e.mu is held),
// and returns the units it holds then.
func addLocal(e *entry, idx, g int64) int64 {
	for {
		c := e.cell.Load()
		left := int64(uint32(c)) + g
		if g == 0 || e.cell.CompareAndSwap(c, cellOf(idx, left)) {
			return left
		}
	}
}

// takeAll takes every unit e's cell holds for window idx, and returns how many.
func takeAll(e *entry, idx int64) int64 {
	for {
		c := e.cell.Load()
		if uint32(c>>32) != uint32(idx) || uint32(c) == 0 {
			return 0
		}
		if e.cell.CompareAndSwap(c, cellOf(idx, 0)) {
			return int64(uint32(c))
		}
	}
}

// remembered refuses n units for e at now from the refusal Redis gave last, if that refusal
// answers them, with held units of window idx's lease counted toward the request. The refusal
// was solved for its need; a larger need waits longer, so the wait is solved again for this need
// on the counts Redis returned then (other processes only add to them until the window ends),
// less what the lease holds now (see ownWait). It reads e's refusal without e.mu and writes
// nothing.
func (l *Limiter) remembered(e *entry, now, idx, held, n int64) (slidelimit.Decision, bool) {
	start, need := idx*l.w, n-held
	d := e.deny.Load()
	if d == nil || d.win != start || now >= d.until || need < d.need {
		return slidelimit.Decision{}, false
	}
	wait, refused := l.ownWait(d.st, d.redisNow+max(now-d.at, 0), held, n)
	if !refused {
		return slidelimit.Decision{}, false
	}
	retry := max(wait, d.until-now, 1)
	return slidelimit.Decision{Limit: l.limit, Remaining: held + max(e.head.Load(), 0), RetryAfter: time.Duration(retry) * time.Millisecond,
		ResetAt: time.UnixMilli(start + l.w), Reason: slidelimit.ReasonLimited}, true
}

// ownWait reports whether Redis's counts st refuse n units at now to a process that holds held
// units of its lease in st's window, and the wait until they would not, solved by the policy's
// own step. The held units are counted in st.Current: within the window the request needs only
// n - held more, but once the window ends the lease's rest is given back and the request needs
// all n again. Solving n on the counts less the held units gives both: within the window the
// same wait as n - held on the counts, and past its end the wait that the units really used
// give, so that one process alone is told the engine's RetryAfter whatever the cost (solved for
// n - held on st, it was told to come back too soon, while the held units still counted).
func (l *Limiter) ownWait(st rules.SlidingCounterState, now, held, n int64) (wait int64, refused bool) {
	st.Current = max(st.Current-held, 0)
	res := l.rule.Take(&st, now, n)
	return res.RetryAfterMs, !res.Allowed
}

func (l *Limiter) admitted(e *entry, idx, rem, n int64) slidelimit.Decision {
	return slidelimit.Decision{Allowed: true, Limit: l.limit, Remaining: rem + max(e.head.Load(), 0),
		ResetAt: time.UnixMilli((idx + 1) * l.w), Reason: slidelimit.ReasonOK, Counted: n}
}

// decideLocked decides n > 0 units for e, with e.mu held.
func (l *Limiter) decideLocked(ctx context.Context, e *entry, n int64) (slidelimit.Decision, error) {
	now := l.clk.Now()
	idx := l.rule.Index(now)
	l.roll(e, idx)
	if e.rec[0].win > idx*l.w {
		// The entry runs in Redis's window, ahead of this clock (see applyGrant).
		idx = e.rec[0].win / l.w
	}
	start := idx * l.w
	rem, ok := takeLocal(e, idx, n)
	if ok {
		return l.admitted(e, idx, rem, n), nil
	}
	if err := ctx.Err(); err != nil {
		// Everything below counts (alone, while offline) or answers for Redis: a caller that has
		// given up gets its own error back and nothing is counted for it.
		return slidelimit.Decision{Limit: l.limit, Reason: slidelimit.ReasonLimited}, err
	}
	if l.closed.Load() {
		// Close sets closed before its give-back visits each entry under e.mu, so a lease taken
		// after that visit would stay counted on Redis for a process that has left, and a charge
		// recorded offline would never be sent.
		return slidelimit.Decision{Limit: l.limit, Reason: slidelimit.ReasonClosed}, ErrClosed
	}
	// Read before the quiet: a heartbeat that finds a data loss starts the quiet before it
	// publishes the new epoch, so a lease sent with the new epoch is never one of the quiet's.
	epoch := l.checkedEpoch()
	if l.offline.Load() || now < l.quietUntil.Load() {
		return l.decideOffline(e, n)
	}
	// A refusal Redis gave earlier answers first, as refuseUnlocked does, before anything is set
	// aside: set aside (seq odd) even briefly, it would send concurrent refusals to this lock,
	// each of which would then do the same.
	if d, ok := l.remembered(e, now, idx, rem, n); ok {
		l.refusedLocally.Inc()
		return d, nil
	}
	// Sized before the rest is set aside: wantFor measures the key's use from what the cell holds.
	want := l.wantFor(e, now, n-rem)
	// What the lease has left is set aside for this request while Redis is asked for the rest.
	// Left in the cell, it could be taken by a decision on the fast path meanwhile, and this
	// request refused with the units Redis has just granted it.
	e.seq.Add(1)
	defer e.seq.Add(1)
	held := takeAll(e, idx)
	need := n - held
	want = max(want, need)
	adj := l.adjustments(e, false)
	cctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	cmd, err := l.lease(cctx, l.leaseKeys(e, epoch), l.leaseArgs(now, want, need, adj, epoch))
	if epoch != "" && crossSlot(err) {
		// The script never ran: the server is a cluster node after all. Ask again without the
		// epoch, as on a cluster (see checkedEpoch).
		l.epochCheck.Store(false)
		cmd, err = l.lease(cctx, l.leaseKeys(e, ""), l.leaseArgs(now, want, need, adj, ""))
	}
	cancel()
	l.leases.Inc()
	var r reply
	if err == nil {
		r, err = parseReply(cmd)
	}
	if err != nil {
		addLocal(e, idx, held)
		l.failed(e, adj)
		if callerGaveUp(ctx) {
			// The caller gave up (cancelled, or its own deadline passed first): that says nothing
			// about Redis.
			err := ctx.Err()
			if err == nil {
				err = context.DeadlineExceeded
			}
			return slidelimit.Decision{Limit: l.limit, Reason: slidelimit.ReasonLimited}, err
		}
		err = check.OwnTimeout(err, cctx, l.cfg.timeout)
		if l.transportFailure(err) {
			l.goOffline(err)
		}
		if hint := check.EveryKey(err, l.cluster); hint != "" {
			err = misconfigured(hint, err)
		}
		err = fmt.Errorf("%w: %w", l.offlineErr(), l.hideSubject(e, err))
		l.reportErr(err)
		d, _ := l.decideOffline(e, n)
		return d, err
	}
	l.acked(e, adj)
	if r.grant >= need && r.win == start {
		// Granted in this window: the request takes what it set aside and need units of the
		// grant, which never enter the cell.
		_, left := l.applyGrant(e, idx, now, r, need, n)
		return l.admitted(e, idx, left, n), nil
	}
	// Refused, or granted in a later window than this clock's (see applyGrant), whose lease
	// what was set aside is not part of: it goes back to its own window's lease first.
	addLocal(e, idx, held)
	idx, _ = l.applyGrant(e, idx, now, r, 0, 0)
	start = idx * l.w
	if rem, ok = takeLocal(e, idx, n); ok {
		return l.admitted(e, idx, rem, n), nil
	}
	// Refused: Redis's counts say need more units do not fit before RetryAfter, which the
	// policy's own step solves (see ownWait).
	st := rules.SlidingCounterState{Window: r.win, Current: r.cur, Previous: r.prev}
	wait, _ := l.ownWait(st, r.now, rem, n)
	retry := max(wait, 1)
	// Remembered no further than the window's end, and than one sync interval: other processes
	// give units back within the window too (their previous window's rest, early in this one, and
	// all they hold when they close), which only Redis sees; asked again after S, it answers with
	// them.
	e.deny.Store(&denial{win: start, until: min(now+retry, start+l.w, now+l.cfg.sync.Milliseconds()), need: need, st: st, at: now, redisNow: r.now})
	return slidelimit.Decision{Limit: l.limit, Remaining: rem + max(e.head.Load(), 0), RetryAfter: time.Duration(retry) * time.Millisecond,
		ResetAt: time.UnixMilli(start + l.w), Reason: slidelimit.ReasonLimited}, nil
}

// hideSubject returns err, a failed lease of e's, with e's subject written as "…" wherever the
// server's reply quotes e's key (the lease script's own error does), and, for a reply about that
// key alone, the key named so in front. errors.As still finds the reply, whose own text keeps the
// subject; only what is printed, to logs and to the WithOnError hook, leaves it out.
func (l *Limiter) hideSubject(e *entry, err error) error {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return err // a transport failure, which names no key
	}
	named := withoutSubject(e.rkey, l.space)
	msg := check.HideKey(err.Error(), e.rkey, named)
	if !l.transportFailure(err) {
		msg = "key " + named + ": " + msg
	}
	return &keyReply{err: err, msg: msg}
}

// keyReply is an error reply about a key, with its text rewritten by hideSubject.
type keyReply struct {
	err error
	msg string
}

func (k *keyReply) Error() string { return k.msg }
func (k *keyReply) Unwrap() error { return k.err }

// lease runs the lease script once, bounded by ctx's deadline whatever the client (see
// bound.Call).
func (l *Limiter) lease(ctx context.Context, keys []string, args []any) (*redis.Cmd, error) {
	if l.bounded.Follows() {
		return leaseScript.run(ctx, l.client, keys, args...)
	}
	// The call may outlive lease (see bound.Call): it gets copies of what it reads, so that the
	// direct call's keys and args stay off the heap.
	ks, as := slices.Clone(keys), slices.Clone(args)
	return bound.Call(ctx, l.bounded, func(ctx context.Context) (*redis.Cmd, error) {
		return leaseScript.run(ctx, l.client, ks, as...)
	})
}

// callerGaveUp reports whether ctx is done or its deadline has passed: a socket read bounded by
// that deadline can fail a moment before ctx's own timer fires.
func callerGaveUp(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// decideOffline decides n units for e alone, with the limit divided by the fleet size last heard
// from Redis (WithInitialFleetSize's until Redis first answers), and records what it admitted so
// that the units are charged to Redis when it returns.
func (l *Limiter) decideOffline(e *entry, n int64) (slidelimit.Decision, error) {
	l.offlineDecisions.Inc()
	switch l.cfg.offline {
	case slidelimit.FailClosed:
		// Refused without counting: a refused request consumes nothing, here or in Redis later.
		return slidelimit.Decision{Limit: l.limit, Reason: slidelimit.ReasonLimited, RetryAfter: l.cfg.sync}, errOfflineClosed
	case slidelimit.FailOpen:
		return slidelimit.Decision{Allowed: true, Limit: l.limit, Reason: slidelimit.ReasonOK}, errOfflineOpen
	}
	d := l.local.TakeWithLimit(e.key, n, l.share())
	// The share is this process's part of the limit, not the key's limit: a cost above the share
	// but within the limit is admissible once Redis answers, which the next heartbeat (one sync
	// interval away) tries.
	d.Limit = l.limit
	if d.Reason == slidelimit.ReasonCostAboveLimit && n <= l.limit {
		d.Reason, d.RetryAfter = slidelimit.ReasonLimited, l.cfg.sync
	}
	// The engine read the clock again: its window may be the next one.
	win := d.ResetAt.UnixMilli() - l.w
	// The lease's rest in the decision's window stays for later requests it can cover whole.
	d.Remaining += rest(e, win/l.w)
	if d.Allowed {
		// Charge the window the engine decided in.
		if win > e.rec[0].win {
			l.roll(e, win/l.w)
		}
		for i := range e.rec {
			if e.rec[i].win == win {
				e.rec[i].off += n
			}
		}
		// Owed to Redis: the exchange charges it once Redis answers again.
		l.holding.Store(e, struct{}{})
	}
	return d, ErrOffline
}

// offlineErr is the error an offline decision comes with, worded for WithOfflineMode's mode.
func (l *Limiter) offlineErr() error {
	switch l.cfg.offline {
	case slidelimit.FailClosed:
		return errOfflineClosed
	case slidelimit.FailOpen:
		return errOfflineOpen
	}
	return ErrOffline
}

// offlineError is ErrOffline in other words (see errOfflineClosed).
type offlineError struct{ clause string }

func (e *offlineError) Error() string { return redisstore.ErrUnavailable.Error() + ": " + e.clause }
func (e *offlineError) Unwrap() error { return ErrOffline }

// share is each process's limit while Redis is away: the limit divided by the fleet size last
// heard from Redis (WithInitialFleetSize's until Redis first answers), at least 1.
func (l *Limiter) share() int64 { return max(l.limit/max(l.fleet.Load(), 1), 1) }

// maxChunk is the largest lease: WithMaxChunk's, or the limit divided by four times the fleet.
func (l *Limiter) maxChunk() int64 {
	if l.cfg.maxChunk > 0 {
		return min(l.cfg.maxChunk, l.limit)
	}
	return max(l.limit/(4*max(l.fleet.Load(), 1)), 1)
}

// used returns the units e has used in window rec[0] so far.
func used(e *entry, idx int64) int64 { return e.rec[0].granted - rest(e, idx) }

// rest returns the units e's cell holds for window idx: 0 when the cell is on another window.
func rest(e *entry, idx int64) int64 {
	if c := e.cell.Load(); uint32(c>>32) == uint32(idx) {
		return int64(uint32(c))
	}
	return 0
}

// wantFor sizes a lease for e: about two sync intervals of the key's rate since the last exchange,
// and at least need, capped at maxChunk (or need, if larger). A key seen for the first time leases
// exactly what its request needs, so a key that is never hot costs what per-decision mode costs.
func (l *Limiter) wantFor(e *entry, now, need int64) int64 {
	if e.lastAt == 0 {
		return need
	}
	idx := l.rule.Index(now)
	u := used(e, idx)
	switch e.markWin {
	case e.rec[0].win:
		u -= e.mark
	case e.rec[1].win:
		u += e.rec[1].granted - e.rec[1].unused - e.mark
	}
	dt := max(now-e.lastAt, 1)
	rate := float64(max(u, 0)) / float64(dt) // units per ms
	want := need + int64(2*rate*float64(l.cfg.sync.Milliseconds()))
	return max(min(want, l.maxChunk()), need)
}

// reply is the lease script's answer.
type reply struct{ grant, win, cur, prev, now int64 }

func parseReply(cmd *redis.Cmd) (reply, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return reply{}, err
	}
	if len(v) != 5 {
		return reply{}, fmt.Errorf("batched: lease script returned %v, want 5 values", v)
	}
	return reply{v[0], v[1], v[2], v[3], v[4]}, nil
}

// adj is up to two signed adjustments, one per window of e.
type adj struct {
	win   [2]int64
	delta [2]int64
	ret   [2]int64 // the part of delta that returns unused units
	off   [2]int64 // off counts the charge brings Redis up to
	lost  bool
	gen   uint64 // with lost, the data loss it re-declares for
}

// adjustments says what e must tell Redis: the previous window's unused lease, to give back, and
// units admitted while Redis was away, to charge. After a data loss (lost) it re-declares
// everything the process has counted in both windows instead.
func (l *Limiter) adjustments(e *entry, lost bool) adj {
	var a adj
	if lost && e.declared == l.lossGen {
		lost = false // re-declared already, by an earlier try that failed for other keys
	}
	a.lost, a.gen = lost, l.lossGen
	for i := range e.rec {
		r := &e.rec[i]
		a.win[i] = r.win
		a.off[i] = r.off
		if r.win < 0 {
			continue
		}
		if lost {
			a.delta[i] = r.granted + r.off
			if i == 1 {
				a.delta[i] -= r.unused
			}
			continue
		}
		a.delta[i] = r.off - r.offSent
		if i == 1 && !r.returned && r.unused > 0 {
			a.ret[i] = r.unused
			a.delta[i] -= r.unused
		}
	}
	return a
}

func (a adj) none() bool { return a.delta[0] == 0 && a.delta[1] == 0 && a.ret[0] == 0 && a.ret[1] == 0 }

// acked records that Redis applied a.
func (l *Limiter) acked(e *entry, a adj) {
	for i := range e.rec {
		r := &e.rec[i]
		if r.win != a.win[i] || r.win < 0 {
			continue
		}
		if a.lost {
			e.declared = a.gen
		}
		if a.ret[i] > 0 || a.lost {
			r.returned = true
			if a.ret[i] > 0 {
				l.returns.Inc()
			}
		}
		if r.offSent != a.off[i] {
			r.offSent = a.off[i]
			l.charges.Inc()
		} else if a.lost && a.delta[i] > 0 {
			l.charges.Inc() // a window's count re-declared to a server that lost it
		}
	}
}

// failed records that Redis may or may not have applied a. A return is never sent twice: applied
// twice it would uncount units in use, which could over-admit; given up, its units only stay
// counted (under-admission) until the window no longer weighs. A charge is sent again: counted
// twice it only under-admits.
func (l *Limiter) failed(e *entry, a adj) {
	l.failures.Inc()
	for i := range e.rec {
		if r := &e.rec[i]; r.win == a.win[i] && a.ret[i] > 0 {
			r.returned = true
		}
	}
}

// leaseArgs is the lease script's ARGV; epoch is checkedEpoch's, read once for the call.
func (l *Limiter) leaseArgs(now, want, need int64, a adj, epoch string) []any {
	return []any{now, l.limit, l.w, want, need, a.win[0], a.delta[0], a.win[1], a.delta[1], l.ttl, epoch}
}

// leaseKeys is the lease script's KEYS for e: its state, and the epoch key when there is an
// epoch to check (see leaseLua).
func (l *Limiter) leaseKeys(e *entry, epoch string) []string {
	if epoch != "" {
		return []string{e.rkey, l.epochK}
	}
	return []string{e.rkey}
}

// checkedEpoch is the epoch token a lease sends for the script to check, or "" for none: before
// the first heartbeat, and where a script cannot read the epoch key together with a key's state,
// which lie in different slots. That is so on a Redis Cluster, and on a Ring's shards; so the
// check is made only through a *redis.Client (one server, or a sentinel's master), and dropped
// for good at the first CROSSSLOT reply (a cluster node behind such a client).
func (l *Limiter) checkedEpoch() string {
	if !l.epochCheck.Load() {
		return ""
	}
	if p := l.leaseEpoch.Load(); p != nil {
		return *p
	}
	return ""
}

// singleServer reports whether c talks to one server, where every key lies in one place: a
// *redis.Client, which also serves a sentinel's master. A cluster client, a ring or a wrapper
// whose routing is unknown is not one.
func singleServer(c redis.UniversalClient) bool {
	_, ok := c.(*redis.Client)
	return ok
}

// crossSlot reports whether err is a cluster node's refusal of keys in different slots, which it
// sends before running anything.
func crossSlot(err error) bool { return err != nil && redis.HasErrorPrefix(err, "CROSSSLOT") }

// applyGrant adds r's grant to e's lease for window idx, but for keep units that the caller uses
// at once (only for a grant of at least keep units in window idx), and notes the exchange. taking
// is what the caller's request takes in all (keep and what it set aside): those units count
// toward the rate measured at the next exchange, as units taken after this one do. It returns the
// lease's window and the units the lease holds then.
func (l *Limiter) applyGrant(e *entry, idx, now int64, r reply, keep, taking int64) (int64, int64) {
	if r.win > idx*l.w {
		// Redis already counts in a later window (a process whose clock runs a little ahead
		// rolled it): the grant is counted there, so it is that window's lease, and what is left
		// of this one must be given back to this one. The entry runs ahead of this process's
		// clock until the clock catches up.
		idx = r.win / l.w
		l.roll(e, idx)
	}
	if d := e.deny.Load(); d != nil && d.win == r.win && r.grant > 0 {
		// A remembered refusal solves a larger need's wait on the counts it saw, which this grant
		// has passed: the next such request asks Redis, whose counts give its exact wait. Cleared
		// before the grant enters the cell, so that no reader sees both.
		e.deny.Store(nil)
	}
	left := int64(uint32(e.cell.Load()))
	if r.grant > 0 {
		left = addLocal(e, idx, r.grant-keep)
		e.rec[0].granted += r.grant
		l.holding.Store(e, struct{}{})
	}
	st := rules.SlidingCounterState{Window: r.win, Current: r.cur, Previous: r.prev}
	res, _ := l.rule.Peek(st, r.now)
	e.head.Store(res.Remaining)
	e.markWin, e.mark, e.lastAt = e.rec[0].win, used(e, idx)-taking, max(now, 1)
	// Renewed in the background once below half of what it held as granted (the caller's kept
	// units included); not half of wantFor, which measures the rate since the mark just set,
	// nothing yet.
	e.low.Store(uint32(min((left+keep)/2, cellMask)))
	return idx, left
}

// goOffline takes the limiter offline after cause, a failed exchange with Redis. Without a
// WithOnError hook, going offline is logged once with log/slog's default logger: ErrOffline, all
// a caller sees, says that the limiter decides alone but not why (a wrong password, say).
func (l *Limiter) goOffline(cause error) {
	was := l.offline.Swap(true)
	if l.cfg.onError != nil {
		return
	}
	if hint := check.EveryKey(cause, l.cluster); hint != "" {
		// Said once per cause, as redisstore's Limiter does, offline already or not: a process
		// that went offline while its server was down, and finds a cluster node there once it is
		// back, would otherwise have logged only the dial that failed.
		if p := l.saidHint.Swap(&hint); p == nil || *p != hint {
			slog.Warn("batched: Redis refuses every key (misconfigured); offline, Take returns ErrOffline, until a heartbeat succeeds",
				"limiter", l.name, "err", misconfigured(hint, cause))
		}
		return
	}
	if !was {
		// Not "deciding locally": a caller may act on ErrOffline otherwise (the command's
		// -on-redis-error open and closed do).
		what := "Redis does not answer"
		if check.HasPrefix(cause, "EPOCHLOST") {
			what = "Redis answered without the fleet's counts (it lost its data)"
			l.lossSaid.Store(true)
		}
		slog.Warn("batched: "+what+"; offline, Take returns ErrOffline, until a heartbeat succeeds",
			"limiter", l.name, "err", cause.Error())
	}
}

func (l *Limiter) reportErr(err error) {
	if l.cfg.onError != nil {
		l.cfg.onError(err)
	}
}

// Name returns the limiter's name. Safe for concurrent use.
func (l *Limiter) Name() string { return l.name }

// ProcessID returns the id this process is registered under in the fleet's membership. Safe for
// concurrent use.
func (l *Limiter) ProcessID() string { return l.id }

// Policy returns the policy the limiter was built with. Safe for concurrent use.
func (l *Limiter) Policy() policy.Policy { return l.pol }

// Key returns the Redis key that holds key's fleet counts ("window current previous"), for
// inspection and administration: <prefix>{<hash tag>}<name>:w<window ms>:<key, or '#' and its
// hash when longer than redisstore.MaxInlineSubject bytes or starting with '#'>. A pure function
// of the prefix, name and window, safe for concurrent use.
func (l *Limiter) Key(key string) string { return stateKey(l.cfg.prefix, l.space, key) }

// Stats counts what the limiter has done since New: a plain value, a snapshot. Decisions made
// from a lease are not counted (counting them would cost the hot path); the counters are read one
// by one while calls go on, so they agree with each other only when the limiter is idle. A Stats
// belongs to the caller: fill one from one goroutine at a time; once filled it may be read from any
// goroutine.
type Stats struct {
	Leases           int64 // lease script calls on a request's path (slow path), answered or not
	Exchanges        int64 // script calls the background exchange sent (renewals, returns, charges, heartbeats), New's first heartbeat included
	Returns          int64 // unused leases given back
	Charges          int64 // windows charged with units admitted while Redis was away (or re-declared)
	OfflineDecisions int64 // requests of a cost decided without Redis (ErrOffline): on the share, or as WithOfflineMode's FailClosed or FailOpen says, while Redis was unreachable, or after a key's error reply; offline queries (n = 0) are not counted
	RefusedLocally   int64 // refusals decided from a remembered refusal, without a round trip
	Failures         int64 // calls to Redis that failed, a lease cut short by its caller's deadline included
	Fleet            int64 // the fleet size shares are divided by: the live count at the last answered heartbeat, or as WithInitialFleetSize keeps it
	Offline          bool  // whether the limiter is deciding alone now
	Keys             int   // keys with a local entry: every key leased in this window or the last, and older ones until a pass forgets them (one runs every window, or every second if longer)
}

// Stats fills s with the limiter's counters, allocating nothing; a nil s is left alone. Safe at
// any time, including after Close, and concurrently with every other method: each counter is read
// atomically, one by one (see Stats); two calls must not fill the same s at once.
func (l *Limiter) Stats(s *Stats) {
	if s == nil {
		return
	}
	*s = Stats{
		Leases: l.leases.Value(), Exchanges: l.exchanges.Value(), Returns: l.returns.Value(), Charges: l.charges.Value(),
		OfflineDecisions: l.offlineDecisions.Value(), RefusedLocally: l.refusedLocally.Value(), Failures: l.failures.Value(),
		Fleet: l.fleet.Load(), Offline: l.offline.Load() || l.clk.Now() < l.quietUntil.Load(), Keys: l.entries.Size(),
	}
}

// Close stops the exchange goroutine, gives back every unused lease and charges what was admitted
// offline (one pipeline per 1,024 keys), leaves the fleet's membership, and makes every later Take
// return ErrClosed. A limiter deciding alone first tries Redis once more, as its next heartbeat
// would; only if Redis does not answer are the give-back, the charge and the leave skipped (the
// units admitted alone are then never charged, as for a process that dies). A client whose
// go-redis pool has stopped dialing (docs/fleet.md, "Outages") does not reach a server that is
// back until its pool's next try, up to a second later: a Close within that second skips them
// too. A lease of a window that Redis's
// clock has reached but this process's has not (clocks skewed, near a window's boundary) is not
// given back: its units stay counted, less admission only, until that window ages out. Each call
// to Redis is bounded by the timeout, and an exchange already running finishes first, so while
// Redis hangs Close can take a few timeouts. It does not close the client.
// Idempotent and safe for concurrent use. A Take running concurrently with Close may still be
// decided on its lease, or on a lease it is taking as Close begins, which Close waits for and
// gives back the rest of; one that would ask Redis once Close has begun returns ErrClosed.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.stop)
		<-l.done
		l.syncMu.Lock()
		if l.offline.Load() {
			// Redis may answer again before a heartbeat has found out: one more exchange, bounded
			// by the timeout, so that what was admitted alone is charged and the fleet left, not
			// skipped because this process had not yet looked.
			l.exchange(l.clk.Now())
		}
		if !l.offline.Load() {
			l.flush(l.clk.Now(), true)
			ctx, cancel := context.WithTimeout(context.Background(), l.cfg.timeout)
			_, _ = bound.Call(ctx, l.bounded, func(ctx context.Context) (*redis.Cmd, error) {
				return leaveScript.run(ctx, l.client, []string{l.members}, l.id)
			})
			cancel()
		}
		l.syncMu.Unlock()
		l.release()
	})
	l.bounded.Wait() // calls given up on at their deadline, with a client that does not follow it
	return nil
}
