package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore/internal/bound"
	"github.com/slidelimit/slidelimit/redisstore/internal/check"
)

var (
	// The errors are sentinel values, compared with errors.Is; safe to share.
	//
	// ErrUnavailable wraps every error from a call that Redis did not decide: a timeout, a
	// connection error, an error reply, or an open circuit breaker. The Decision returned with it
	// is the one the failure choice (WithOnFailure) made.
	ErrUnavailable = errors.New("redisstore: redis unavailable")
	// ErrCircuitOpen is returned (wrapping ErrUnavailable) while the breaker is open: the call was
	// decided without trying Redis.
	ErrCircuitOpen = fmt.Errorf("%w: circuit breaker open", ErrUnavailable)
	// ErrMisconfigured is returned (wrapping ErrUnavailable) for an error reply that every key
	// would get: a wrong password (WRONGPASS, NOAUTH), a missing permission (NOPERM), a cluster
	// node behind a client that does not follow MOVED or ASK, a server without Lua scripting.
	// It opens the breaker at once, and is reported once per cause (see WithOnError).
	ErrMisconfigured = fmt.Errorf("%w: misconfigured", ErrUnavailable)
	// ErrClosed is returned by Take after Close. It is the root package's slidelimit.ErrClosed,
	// the error ReasonClosed.Err() returns, so errors.Is matches it whichever backend was closed.
	ErrClosed = slidelimit.ErrClosed
)

// Limiter decides rate limits on Redis (or Valkey) for a fleet of processes: every process that
// builds a Limiter with the same name, policy and prefix on the same Redis shares one limit per
// key. Each decision is one script run in one round trip (EVALSHA, falling back to EVAL only when
// the server does not know the script yet), over one Redis key per (limiter, key).
//
// All methods are safe for concurrent use by any number of goroutines. The Limiter starts no
// goroutine of its own, but for a client that does not set the context's deadline on its socket
// (see New), where each call to Redis runs on one that ends with the call; Close releases the
// coarse clock it may hold.
type Limiter struct {
	client redis.UniversalClient
	name   string
	algo   algo
	cfg    config
	clk    *clock.Clock
	ownClk bool
	br     *breaker
	deny   *denyCache
	// offset is the server's clock minus ours (ms), learned from each reply under WithServerTime,
	// so that the deny cache can judge "until" in the server's time base.
	offset atomic.Int64

	cluster bool // the client follows MOVED and ASK itself
	// bounded bounds each call by the caller's deadline and the timeout where the client does
	// not set them on its socket (see bound.Call), and lets Close wait for a call given up on.
	bounded *bound.Calls
	// lastFatal is the last error every key got, reported once; nil once a call succeeds with the
	// breaker closed (the probe's success closes it).
	lastFatal atomic.Pointer[fatalReport]
	// lastCause is the last failure that counted against the breaker, so that a call refused by
	// the open breaker can say why it opened; nil once the breaker closes.
	lastCause atomic.Pointer[fatalReport]

	closeOnce sync.Once
	closed    atomic.Bool

	calls, roundTrips, denyHits, failures, shortCircuits *xsync.Counter
}

// New returns a limiter named name (printable ASCII without spaces, braces or ':', at most 64
// bytes) applying policy p on client: any of the seven policies (policy.SlidingCounter,
// SlidingLog, FixedWindow, TokenBucket, GCRA, LeakyBucket, DualBucket), over the full ranges their
// Validate accepts, deciding as the engine does. Any
// redis.UniversalClient works: a single node, a cluster (each key carries a hash tag) or a
// sentinel-backed client. The limiter's scripts are never retried (a retry could count twice),
// so a cluster client learns of a failover only from its periodic reload of the cluster's map:
// NewClient sets it to 2s; a *redis.ClusterClient built by hand should set
// ClusterStateReloadInterval so too, or a failed master's slots fail for go-redis's default 60s.
// A go-redis client needs ContextTimeoutEnabled: true, or read and write
// timeouts no longer than WithTimeout's, and no negative read or write timeout other than -1 (-2
// turns socket deadlines off); New returns an error naming the option otherwise. With
// ContextTimeoutEnabled false go-redis sets only its own timeouts on the socket, so each call to
// Redis then runs on a goroutine of its own, and Take, TakeWithLimit, Refund, Reset and All's
// Take return at ctx's deadline or the limiter's timeout all the same, while the call goes on,
// holding its connection, until those socket timeouts end it (or Redis answers); hence the bound
// on them. A client of another type (a wrapper) is not looked inside: its calls run so too, as
// its socket may not follow the deadline. The Limiter does not close client.
func New(client redis.UniversalClient, name string, p policy.Policy, opts ...Option) (*Limiter, error) {
	if check.IsNil(client) {
		return nil, errors.New("redisstore: client is nil")
	}
	if err := check.Name("redisstore", "name", name, false, 64); err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("redisstore: nil option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.onFailure == FailFallback && cfg.fallback == nil {
		return nil, errors.New("redisstore: WithOnFailure(FailLocal) needs WithFallback, the in-process limiter that decides while Redis cannot")
	}
	cfg.serverTime = cfg.forceSrv || !cfg.clientTime
	a, err := newAlgo(p, cfg.skew.Milliseconds())
	if err != nil {
		return nil, err
	}
	if err := check.Client("redisstore", client, cfg.timeout); err != nil {
		return nil, err
	}
	l := &Limiter{
		client: client, name: name, algo: a, cfg: cfg,
		br:    newBreaker(cfg),
		calls: xsync.NewCounter(), roundTrips: xsync.NewCounter(), denyHits: xsync.NewCounter(),
		failures: xsync.NewCounter(), shortCircuits: xsync.NewCounter(),
	}
	_, l.cluster = client.(*redis.ClusterClient)
	l.bounded = bound.New(client)
	if cfg.denyKeys > 0 {
		l.deny = newDenyCache(cfg.denyKeys)
	}
	if l.clk = cfg.clock; l.clk == nil {
		l.clk, l.ownClk = clock.Acquire(), true
	}
	return l, nil
}

// Take decides n units for key and returns the Decision, with the same fields and Reason values
// as the in-process engine's Take: an admitted request is counted, a refused one writes nothing,
// n = 0 is a query that is admitted (except by the dual bucket, which spends a request on every
// call and refuses once none is left, as the engine does), a negative n is refused with
// ReasonNegativeCost (without a round trip), and a cost above the limit is refused with
// ReasonCostAboveLimit (also when Redis does not decide, in every failure mode). A nil ctx is
// taken as context.Background().
//
// The call to Redis is bounded by ctx's deadline and by the limiter's timeout, whichever comes
// first (with any client New accepts), and is never retried. A ctx cancelled without a deadline
// does not cut a call already sent short (go-redis sets only deadlines on the socket): that call
// ends at the timeout. When Redis does not decide (timeout, connection error, error reply, or the
// breaker is open), Take returns the failure choice's Decision together with an error wrapping
// ErrUnavailable; the Decision is always usable, so a caller that only logs the error can go on
// with it. The limiter's own timeout reads the same whichever of the client's deadlines fired:
// "no reply within <WithTimeout's d>, the limiter's timeout", with a Timeout method that reports
// true, and not context.DeadlineExceeded, which is kept for the caller's own deadline (a reply
// the server sent is that reply, however late it is read). A key refused recently is decided
// from the local deny cache with no round trip.
//
// When the caller's own ctx ends first (cancelled, or its deadline passed), Take returns the
// failure choice's Decision with an error wrapping ctx.Err() (context.Canceled or
// context.DeadlineExceeded), not ErrUnavailable: the caller gave up, Redis did not fail, so the
// circuit breaker does not count it. Under FailLocal that Decision is a refusal (ReasonLimited,
// with the call's limit, and the fallback's Remaining, at most that limit, and ResetAt from its
// Peek), and nothing is counted in the fallback for a request nobody waits for. Otherwise, under
// FailLocal, the fallback decides, and an admission it makes reports Counted 0: its units are
// counted in the fallback, not on Redis, so Refund, which gives back on Redis, gives none back for
// it (the fallback's own Refund can). A ctx already
// done on entry costs no round trip and is returned so even while the breaker is open or the
// deny cache knows the key. A request that no Redis state could change is decided as always,
// whatever ctx says: a negative cost (ReasonNegativeCost), a GCRA cost above its burst
// (ReasonCostAboveLimit), a closed limiter (ErrClosed).
//
// Safe for concurrent use by any number of goroutines; concurrent calls for one key are made
// atomic by Redis, which runs one script at a time.
func (l *Limiter) Take(ctx context.Context, key string, n int64) (engine.Decision, error) {
	return l.take(ctx, key, n, 0)
}

// TakeWithLimit is Take for a key whose limit is limit rather than the policy's, given on each
// call as redis_rate takes it: premium tenants, internal services. It is available for the window
// policies, whose counts are units whatever the limit: the sliding counter and the fixed window
// (limit 1 … policy.MaxLimit) and the sliding log (1 … policy.MaxLogLimit). For another policy,
// or a limit out of range, the request is refused with ReasonInvalidLimit and consumes nothing.
//
// The limit is not stored with the key: pass the same one on every call for that key. A changed
// limit applies at once, mid-window, as in the engine's TakeWithLimit: raised, the key may take the
// difference straight away; lowered below what it has taken, it is refused until its counts decay
// under the new limit; for the fixed window and the sliding log n = 0 is refused too (with
// Remaining 0, as in the engine's fixed window), while the sliding counter admits n = 0 always.
// Every Decision for a valid limit reports limit as its Limit, refusals made before the policy runs
// (a negative cost, Close) included; an invalid limit's (ReasonInvalidLimit) reports the policy's.
// The exception is FailLocal while Redis fails: a cost above the call's limit is still refused
// with ReasonCostAboveLimit and that limit, but any other request is decided by the fallback with
// its own limit (the per-key limit is not applied), which it reports. The deny cache does not answer these calls (its
// replay knows only the policy's limit), so each costs a round trip. Safe for concurrent use, as
// Take: concurrent calls for one key are made atomic by Redis, whatever limit each gives.
func (l *Limiter) TakeWithLimit(ctx context.Context, key string, n, limit int64) (engine.Decision, error) {
	maxLimit := int64(policy.MaxLimit)
	switch l.algo.kind {
	case kindSlidingCounter, kindFixedWindow:
	case kindSlidingLog:
		maxLimit = policy.MaxLogLimit
	default:
		maxLimit = 0
	}
	if limit < 1 || limit > maxLimit {
		l.calls.Inc()
		if l.closed.Load() {
			return engine.Decision{Limit: l.algo.limit, Reason: engine.ReasonClosed}, ErrClosed
		}
		return engine.Decision{Limit: l.algo.limit, Reason: engine.ReasonInvalidLimit}, nil
	}
	return l.take(ctx, key, n, limit)
}

// take is Take, and TakeWithLimit when perCall > 0.
func (l *Limiter) take(ctx context.Context, key string, n, perCall int64) (engine.Decision, error) {
	l.calls.Inc()
	if ctx == nil {
		ctx = context.Background() // as documented: a nil ctx is a programming error, not a panic
	}
	// The limit this call is held to, first: even a refusal made before the policy runs reports
	// the per-key limit the call gave, as the root package's Decision.Limit promises.
	lim := l.algo.limit
	if perCall > 0 {
		lim = perCall
	}
	if l.closed.Load() {
		return engine.Decision{Limit: lim, Reason: engine.ReasonClosed}, ErrClosed
	}
	if n < 0 {
		return engine.Decision{Limit: lim, Reason: engine.ReasonNegativeCost}, nil
	}
	if l.algo.kind == kindGCRA && n > l.algo.limit {
		// GCRA refuses a cost above its burst before any lookup (docs/policies.md). It takes no
		// per-key limits, so lim is its burst here.
		return engine.Decision{Limit: l.algo.limit, Reason: engine.ReasonCostAboveLimit}, nil
	}
	// Every cost above the limit decides alike; clamping keeps the script's numbers exact.
	cost := min(n, lim+1)
	// Refresh, not Now: the coarse clock's goroutine can lag by tens of milliseconds on a busy
	// machine, and the deny cache promises its entries end within the clock's resolution of
	// Redis's retry time. A call goes to Redis or to the cache, both far dearer than a clock read.
	local := l.clk.Refresh()
	now := local
	if l.cfg.serverTime {
		now += l.offset.Load()
	}
	if err := ctx.Err(); err != nil {
		// Before the deny cache, the breaker and the clock's range: a caller that has given up
		// gets its own error, whatever any of them would have said. FailClosed's RetryAfter is
		// still the breaker's wait, which reading it does not move.
		return l.fail(key, n, lim, l.br.wait(), fmt.Errorf("redisstore: %w", err))
	}
	if now < 0 || now > l.algo.maxTime {
		return l.fail(key, n, lim, l.br.wait(), fmt.Errorf("%w: redisstore: time %d ms outside [0, %d]", ErrUnavailable, now, l.algo.maxTime))
	}
	sub := shortSubject(key)
	if l.deny != nil && perCall == 0 && (cost > 0 || l.algo.kind == kindDualBucket) {
		if e, ok := l.deny.get(sub, local); ok {
			if r := l.algo.replay(e, local+e.off, cost); !r.Allowed {
				l.denyHits.Inc()
				return l.decision(r, cost, lim), nil
			}
		}
	}
	argNow := now
	if l.cfg.serverTime {
		argNow = -1
	}
	args := l.algo.args(argNow, cost)
	if perCall > 0 {
		args[1] = perCall
	}
	var version uint64
	if l.deny != nil {
		version = l.deny.version(sub)
	}
	res, wait, err := l.eval(ctx, l.algo.script, []string{l.redisKey(sub)}, args)
	refused, cacheable := l.algo.refusalShape(res)
	if err == nil && !(len(res) == 5 && res[0] == 1 || refused) {
		err = fmt.Errorf("%w: redisstore: script returned %v, not the policy's admission (5 values) or refusal", ErrUnavailable, res)
	}
	if err != nil {
		return l.fail(key, n, lim, wait, err)
	}
	r := policy.Result{Allowed: res[0] == 1, Limit: lim, Remaining: res[1], RetryAfterMs: res[2], ResetAtMs: res[3]}
	if l.cfg.serverTime {
		l.offset.Store(res[4] - local)
	}
	if l.deny != nil {
		switch {
		case !r.Allowed && r.RetryAfterMs > 0 && perCall == 0 && cacheable:
			l.deny.put(sub, l.denyEntryFor(res, local, r.RetryAfterMs), local, version)
		case r.Allowed && (cost > 0 || l.algo.kind == kindDualBucket):
			// The dual bucket spends a request even at cost 0.
			l.deny.forget(sub)
		}
	}
	return l.decision(r, cost, lim), nil
}

// denyEntryFor is what the deny cache remembers of a refusal: the state, and until when the
// refusal may hold, on this process's clock. The script decided at res[4] on the server's clock
// (or ours, under client time); off = res[4] - local maps our later readings onto that clock.
// local was read before the call was sent, so off is at least the true offset between the two
// clocks, and local + off never runs behind the server: the entry expires no later than the
// refusal does on Redis. It is cut short, too, at the key's TTL on Redis (res[8], in ms), since
// once the key is gone Redis decides as for a new key, whatever a skewed clock wrote in it, and at
// WithDenyCacheMaxAge.
func (l *Limiter) denyEntryFor(res []int64, local, retry int64) denyEntry {
	off := res[4] - local
	life := retry
	if ttl := res[len(res)-1]; ttl >= 0 {
		life = min(life, ttl)
	}
	if m := l.cfg.denyMaxAge; m > 0 {
		life = min(life, m.Milliseconds())
	}
	return l.algo.newDenyEntry(res, local+life, off)
}

// eval runs one script under the circuit breaker and the limiter's deadline. On failure it
// returns the error for Take to hand back (already counted, classified and reported) and how long
// until the breaker next tries Redis.
func (l *Limiter) eval(ctx context.Context, s *script, keys []string, args []any) ([]int64, time.Duration, error) {
	ok, probe, wait := l.br.allow()
	if !ok {
		l.shortCircuits.Inc()
		return nil, wait, l.openError()
	}
	if err := ctx.Err(); err != nil {
		// The caller has already given up: no round trip, and nothing learned about Redis.
		l.br.abandon(probe)
		return nil, l.br.wait(), fmt.Errorf("redisstore: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	var res []int64
	var err error
	if l.bounded.Follows() {
		res, err = s.run(cctx, l.client, keys, args)
	} else {
		// The call may outlive eval (see bound.Call): it gets copies of what it reads, so that
		// keys and args, and the direct call's, stay off the heap.
		keys, args := slices.Clone(keys), slices.Clone(args)
		res, err = bound.Call(cctx, l.bounded, func(ctx context.Context) ([]int64, error) {
			return s.run(ctx, l.client, keys, args)
		})
	}
	cancel()
	l.roundTrips.Inc()
	if err == nil {
		l.br.success(probe)
		// A success with the breaker closed clears the causes it saw. One racing an opening can
		// see the breaker closed after all; the failure that opens it then stores its cause anew,
		// as another pointer, so the compare-and-swap here leaves that one alone.
		if f, c := l.lastFatal.Load(), l.lastCause.Load(); (f != nil || c != nil) && !l.br.open() {
			l.lastFatal.CompareAndSwap(f, nil)
			l.lastCause.CompareAndSwap(c, nil)
		}
		return res, 0, nil
	}
	if cerr := callerDone(ctx); cerr != nil {
		// The caller's own context ended (cancelled, or its deadline passed, as behind
		// http.TimeoutHandler): that says nothing about Redis. The limiter's own timeout is
		// cctx's, and leaves ctx alive, so it still counts against the store.
		l.br.abandon(probe)
		return nil, l.br.wait(), fmt.Errorf("redisstore: %w", cerr)
	}
	err = check.OwnTimeout(err, cctx, l.cfg.timeout)
	l.failures.Inc()
	if hint := check.EveryKey(err, l.cluster); hint != "" {
		l.br.fatal(probe)
		err = fmt.Errorf("%w: %s: %w", ErrMisconfigured, hint, err)
		l.reportFatal(err)
		return nil, time.Duration(l.br.curCool.Load()), err // reopened by this call, for all of it
	}
	opened := false
	if serverAnswered(err) {
		// The server is up and refused this one script (a key of another type, say): no
		// reason to take every other key off Redis. Name the keys, which the reply may not,
		// without their subjects: those are the callers' keys (an address, an API key), and
		// errors go to logs.
		l.br.success(probe)
		named := make([]string, len(keys))
		for i, k := range keys {
			named[i] = withoutSubject(k)
		}
		// The scripts' own errors quote the key: longest first, so that a key that begins
		// another is not replaced inside it.
		msg := err.Error()
		order := make([]int, len(keys))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return len(keys[b]) - len(keys[a]) })
		for _, i := range order {
			msg = check.HideKey(msg, keys[i], named[i])
		}
		err = &answered{err: err, msg: "key " + strings.Join(named, ", ") + ": " + msg}
	} else {
		cause := &fatalReport{err: err, msg: err.Error()}
		l.lastCause.Store(cause)
		// A failure that every key would not get replaces an earlier such error as the cause:
		// a fixed password followed by a read-only replica must name the replica.
		l.lastFatal.Store(nil)
		opened = l.br.failure(probe)
		if opened {
			// Anew, as another pointer: a success racing the opening may have cleared it.
			l.lastCause.Store(&fatalReport{err: cause.err, msg: cause.msg})
		}
		if opened && l.cfg.onError == nil {
			// Once per opening: without a hook, nothing else would say that decisions now follow
			// the failure choice, nor why.
			slog.Warn("redisstore: circuit breaker opened; decisions follow the failure choice until a probe succeeds",
				"limiter", l.name, "err", err.Error())
		}
	}
	err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	if l.cfg.onError != nil {
		l.cfg.onError(err)
	}
	// The time left until the breaker next tries Redis: all of its cooldown (doubled after fatal
	// probes) where this call opened it, or reopened it as a failed probe; what is left of it
	// where another call opened it while this one waited.
	if opened || probe {
		return nil, time.Duration(l.br.curCool.Load()), err
	}
	return nil, l.br.wait(), err
}

// answered is an error reply about one call's keys, with its text rewritten to hide their
// subjects; errors.As still finds the reply, whose own text does not hide them.
type answered struct {
	err error
	msg string
}

func (a *answered) Error() string { return a.msg }
func (a *answered) Unwrap() error { return a.err }

// withoutSubject is the Redis key k (from keyFor) with its subject written as "…".
func withoutSubject(k string) string {
	tag := strings.IndexByte(k, '}')
	if tag < 0 {
		return "…"
	}
	parts := strings.SplitN(k[tag+1:], ":", 3)
	if len(parts) < 3 {
		return k[:tag+1] + "…"
	}
	return k[:len(k)-len(parts[2])] + "…"
}

// openError is the error of a call the open breaker kept from Redis: ErrCircuitOpen, with the
// error every key got (wrapped, as ErrMisconfigured) or the last failure's text, since the caller
// may not see logs. The failure is not wrapped: a timeout of the limiter's own must not read as
// the caller's context.DeadlineExceeded.
func (l *Limiter) openError() error {
	if f := l.lastFatal.Load(); f != nil {
		return fmt.Errorf("%w, after: %w", ErrCircuitOpen, f.err)
	}
	if c := l.lastCause.Load(); c != nil {
		return fmt.Errorf("%w, after: %s", ErrCircuitOpen, c.msg)
	}
	return ErrCircuitOpen
}

// callerDone returns ctx's error once it is done, or context.DeadlineExceeded once its deadline
// has passed: a socket deadline set from ctx can fire a moment before ctx's own timer marks it
// done, and that failure is the caller's too.
func callerDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// reportFatal hands an error every key gets to the WithOnError hook, or to log/slog's default
// logger, once per cause: until Redis answers again, the same error is not reported twice.
func (l *Limiter) reportFatal(err error) {
	msg := err.Error()
	if p := l.lastFatal.Swap(&fatalReport{err: err, msg: msg}); p != nil && p.msg == msg {
		return
	}
	if l.cfg.onError != nil {
		l.cfg.onError(err)
		return
	}
	slog.Error("redisstore: Redis refuses every key; decisions follow the failure choice until a probe succeeds",
		"limiter", l.name, "err", msg)
}

type fatalReport struct {
	err error
	msg string
}

// serverAnswered reports whether err is an error reply about this call alone, as opposed to a
// transport failure or a reply saying the server cannot serve anything now.
func serverAnswered(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	// MISCONF: a server that cannot persist refuses every write, so it decides nothing.
	for _, p := range []string{"BUSY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "OOM", "NOREPLICAS", "NOSCRIPT", "MISCONF"} {
		if check.HasPrefix(err, p) {
			return false
		}
	}
	return true
}

// Allow reports whether one unit for key is admitted, counting it if so; see Take. Safe for
// concurrent use.
func (l *Limiter) Allow(ctx context.Context, key string) (bool, error) {
	d, err := l.Take(ctx, key, 1)
	return d.Allowed, err
}

func (l *Limiter) decision(r policy.Result, cost, limit int64) engine.Decision {
	d := engine.Decision{
		Allowed:    r.Allowed,
		Limit:      r.Limit,
		Remaining:  r.Remaining,
		RetryAfter: time.Duration(r.RetryAfterMs) * time.Millisecond,
		ResetAt:    time.UnixMilli(r.ResetAtMs),
	}
	switch {
	case r.Allowed:
		d.Reason, d.Counted = engine.ReasonOK, cost
	case cost > limit:
		d.Reason = engine.ReasonCostAboveLimit
	default:
		d.Reason = engine.ReasonLimited
	}
	return d
}

// fail returns the failure choice's decision for a request of n units under limit lim, and err.
func (l *Limiter) fail(key string, n, lim int64, wait time.Duration, err error) (engine.Decision, error) {
	if n > lim {
		// No answer from Redis can admit it: say so rather than admit what could never pass, or
		// (FailLocal) call it a wait.
		return engine.Decision{Limit: lim, Reason: engine.ReasonCostAboveLimit}, err
	}
	if l.cfg.onFailure == FailFallback {
		if callerErr(err) {
			// The caller has given up: nothing is counted in the fallback for a request nobody
			// waits for, and since an admitted request must have been counted, the answer is a
			// refusal. The fallback's Peek says how much the key has left and when it renews.
			pk := l.cfg.fallback.Peek(key)
			return engine.Decision{Limit: lim, Remaining: min(pk.Remaining, lim), ResetAt: pk.ResetAt, Reason: engine.ReasonLimited}, err
		}
		// Counted in the fallback, not on Redis: Counted 0 keeps Refund, which gives back on
		// Redis, from giving back units other requests counted there.
		d := l.cfg.fallback.Take(key, n)
		d.Counted = 0
		return d, err
	}
	if l.cfg.onFailure == FailClosed {
		return engine.Decision{Limit: lim, Reason: engine.ReasonLimited, RetryAfter: max(wait, time.Millisecond)}, err
	}
	return engine.Decision{Allowed: true, Limit: lim, Reason: engine.ReasonOK}, err
}

// callerErr reports whether err is the caller's own cancellation or deadline, as opposed to a
// failure of Redis (the limiter's own timeout wraps ErrUnavailable).
func callerErr(err error) bool {
	return !errors.Is(err, ErrUnavailable) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// Reset deletes key's state on Redis and forgets it locally, so that its next request is decided
// as a new key's. Other processes' deny caches may still refuse it until their retry times, or
// their WithDenyCacheMaxAge if sooner.
// Safe for concurrent use; a Take racing with Reset may count before or after it. A nil ctx is
// taken as context.Background(), as Take takes it.
//
// Reset's errors are classified as Take's are: after Close it returns ErrClosed; the caller's own
// cancellation or deadline is returned wrapped (errors.Is(err, ctx.Err()) holds); a failure of Redis (the limiter's timeout, a
// lost connection, an error reply) wraps ErrUnavailable, and an error every key would get (a
// wrong password, a missing permission: Reset needs DEL) wraps ErrMisconfigured. While the circuit
// breaker is open, until a Take's probe closes it, Reset sends nothing and returns ErrCircuitOpen.
// A failed Reset may still have deleted the key (a DEL sent before the timeout can run after it).
// A reply such as a replica's READONLY is returned at once, not retried until the timeout (a
// ClusterClient still follows its own redirects); a lost connection is tried again within it.
// Reset reads the breaker but never moves it, nor is it ever the breaker's probe: its one command
// says nothing of whether Take's scripts can run (a user without DEL, say). Its round trips and
// failures count in Stats, and its failures go to WithOnError's hook, but for ErrMisconfigured
// ones, which it only returns.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if l.closed.Load() {
		return ErrClosed
	}
	sub := shortSubject(key)
	if l.deny != nil {
		l.deny.forget(sub)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if l.br.open() {
		l.shortCircuits.Inc()
		return l.openError()
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	// Not replayed by go-redis, which retries READONLY, LOADING and the like until the deadline,
	// so that the caller would get the timeout instead of the server's reason. A DEL may run
	// twice, though, so a lost connection is tried again here, within the same deadline.
	rkey := l.redisKey(sub)
	_, err := bound.Call(cctx, l.bounded, func(ctx context.Context) (struct{}, error) {
		var err error
		for range 3 {
			err = l.client.Process(ctx, noRetryCmd{redis.NewCmd(ctx, "del", rkey)})
			var rerr redis.Error
			if err == nil || errors.As(err, &rerr) || ctx.Err() != nil {
				break
			}
		}
		return struct{}{}, err
	})
	cancel()
	if l.deny != nil {
		l.deny.gaveBackTo(sub) // as after a refund: a refusal decided before the DEL is stale
	}
	l.roundTrips.Inc()
	if err == nil {
		return nil
	}
	if cerr := callerDone(ctx); cerr != nil {
		return fmt.Errorf("redisstore: %w", cerr)
	}
	err = check.OwnTimeout(err, cctx, l.cfg.timeout)
	l.failures.Inc()
	if hint := check.EveryKey(err, l.cluster); hint != "" {
		// Returned, not reported: the hook hears of such a cause once, from the scripts' calls,
		// which are what it stops; one that only DEL gets stops nothing but Reset.
		return fmt.Errorf("%w: %s: %w", ErrMisconfigured, hint, err)
	}
	err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	if l.cfg.onError != nil {
		l.cfg.onError(err)
	}
	return err
}

// Key returns the Redis key that holds key's state, for inspection and administration:
// <prefix>{<hash tag>}<name>:<policy fingerprint>:<key, or '#' and its hash when longer than
// MaxInlineSubject bytes or starting with '#'>. A pure function of the limiter's prefix, name and
// policy, safe for concurrent use.
func (l *Limiter) Key(key string) string { return l.redisKey(shortSubject(key)) }

func (l *Limiter) redisKey(sub string) string { return keyFor(l.cfg.prefix, l.name, l.algo.tag, sub) }

// Policy returns the policy the limiter was built with. Safe for concurrent use.
func (l *Limiter) Policy() policy.Policy { return l.algo.pol }

// Name returns the limiter's name. Safe for concurrent use.
func (l *Limiter) Name() string { return l.name }

// Stats counts what the limiter has done since New: a plain value, a snapshot. Counters are read
// one by one while calls go on, so they are mutually consistent only when the limiter is idle. A
// Stats belongs to the caller: fill one from one goroutine at a time; once filled it may be read
// from any goroutine.
type Stats struct {
	Calls         int64 // Take calls
	RoundTrips    int64 // calls attempted to Redis (scripts, and Reset's DEL), answered or not, reached or not (a refused dial counts)
	DenyCacheHits int64 // refusals decided by the local deny cache, with no round trip
	Failures      int64 // round trips that Redis did not answer in time or answered with an error; not those whose caller gave up first
	ShortCircuits int64 // calls not sent because the breaker was open (Takes decided by the failure choice; Refunds and Resets failed)
	BreakerOpens  int64 // times the breaker opened
	BreakerOpen   bool  // whether the breaker is open now
	DenyCacheKeys int   // keys remembered by the deny cache now
}

// Stats fills s with the limiter's counters, allocating nothing, as engine.Limiter.Stats does; a
// nil s is left alone. Safe to call at any time, including after Close, and concurrently with
// every other method: each counter is read atomically, one by one (see Stats); two calls must not
// fill the same s at once.
func (l *Limiter) Stats(s *Stats) {
	if s == nil {
		return
	}
	*s = Stats{
		Calls: l.calls.Value(), RoundTrips: l.roundTrips.Value(), DenyCacheHits: l.denyHits.Value(),
		Failures: l.failures.Value(), ShortCircuits: l.shortCircuits.Value(),
		BreakerOpens: int64(l.br.opens.Load()), BreakerOpen: l.br.open(),
	}
	if l.deny != nil {
		s.DenyCacheKeys = l.deny.len()
	}
}

// Close makes every later Take, Refund and Reset return ErrClosed, and releases the process-wide
// clock if the limiter acquired it. With a client whose ContextTimeoutEnabled is false (or a
// wrapper, see New), it also
// waits for the calls to Redis that callers gave up on at their deadline (see New) to end, at
// most the client's socket timeouts, so that no goroutine of the limiter outlives Close (a call
// that began before Close and reaches Redis only after it runs on its caller's goroutine instead,
// bounded by those timeouts rather than by its deadline). It does not close the Redis client or
// the fallback limiter. Idempotent and safe for concurrent use; a Take running concurrently with
// Close may still complete on Redis.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		if l.ownClk {
			clock.Release(l.clk)
		}
	})
	l.bounded.Wait()
	return nil
}
