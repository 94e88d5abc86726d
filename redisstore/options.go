package redisstore

import (
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/redisstore/internal/check"
)

// Option configures a Limiter at construction. Options are applied in order, once, by New; a
// later one overrides an earlier one of the same kind, but for the time options, whose order does
// not matter: WithServerTime, given at all, decides on the server's time, and WithClock's clock,
// given at all, is the client time (WithClientTime adds nothing to it). An Option holds no state of
// its own: one value may be reused for several limiters and passed between goroutines, and the
// With functions, which only build such values, may be called from any goroutine.
type Option func(*config) error

// OnFailure says what Take decides when Redis cannot: on a timeout, a connection error, an error
// reply, or while the circuit breaker is open. It is the root package's FailureMode:
//   - FailOpen (the default) admits every request whose cost is within the limit (Reason
//     ReasonOK, Remaining 0);
//   - FailClosed refuses every request (Reason ReasonLimited), with RetryAfter a back-off: while
//     the breaker is open, the time left until it next tries Redis (a whole cooldown while
//     another call is that try); otherwise (the breaker is closed, and the next call goes to
//     Redis) the breaker's cooldown. A call the breaker does not judge (its caller gave up, or
//     the clock is out of range) gets the same back-off, read from the breaker as it stands,
//     doubled cooldowns included: 1ms once a probe is due, since the next call tries Redis;
//   - in every mode a cost above the limit (the call's, for TakeWithLimit) is refused with
//     ReasonCostAboveLimit, as Redis would refuse it, and FailLocal's fallback is not asked;
//   - FailLocal (FailFallback) decides with the in-process engine.Limiter given to WithFallback:
//     each process then enforces its own limit (size it as the fleet's limit divided by the number
//     of processes), and the counts it makes are not carried back to Redis (its admissions report
//     Counted 0, so Refund gives nothing back for them on Redis).
//
// A call that timed out on a server that stalls rather than goes away may still run once the
// server resumes (see the package doc for which do): its units are then counted on Redis too,
// whatever the mode decided, which only ever admits less.
//
// A plain value, safe to copy and to share between goroutines.
type OnFailure = slidelimit.FailureMode

// The failure modes, as in the root package.
const (
	FailOpen   = slidelimit.FailOpen
	FailClosed = slidelimit.FailClosed
	FailLocal  = slidelimit.FailLocal
	// FailFallback is FailLocal's earlier name.
	FailFallback = slidelimit.FailLocal
)

// Defaults, constants safe to read from anywhere.
const (
	// DefaultTimeout is each call's deadline without WithTimeout.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultSkew is the clock skew between hosts allowed without WithClockSkew.
	DefaultSkew = 2 * time.Second
	// DefaultBreakerThreshold is the consecutive-failure threshold tests and simulations usually
	// give WithBreaker; the default breaker judges a failure ratio instead (WithBreakerRatio).
	DefaultBreakerThreshold = 1
	// DefaultBreakerCooldown is how long an open breaker waits before a call probes Redis.
	DefaultBreakerCooldown = 500 * time.Millisecond
	// The default breaker opens when, over the last DefaultBreakerWindow, at least
	// DefaultBreakerMinCalls calls reached Redis and at least DefaultBreakerRatio of them failed.
	// TestBreakerDefaults measures what they cost: see the package documentation.
	DefaultBreakerRatio    = 0.5
	DefaultBreakerMinCalls = 10
	DefaultBreakerWindow   = time.Second
	// DefaultDenyCacheKeys is how many refused keys the local deny cache remembers by default.
	DefaultDenyCacheKeys = 1 << 16
	// DefaultPrefix starts every key the limiter writes without WithPrefix.
	DefaultPrefix = "sl:"
)

type config struct {
	clock      *clock.Clock
	serverTime bool // resolved by New: forced, or the default without clientTime
	forceSrv   bool
	clientTime bool
	timeout    time.Duration
	skew       time.Duration
	onFailure  OnFailure
	fallback   *engine.Limiter
	threshold  int // consecutive failures that open the breaker; 0 = the ratio rule
	ratio      float64
	minCalls   int
	window     time.Duration
	cooldown   time.Duration
	denyKeys   int
	denyMaxAge time.Duration // 0: until the retry time
	prefix     string
	onError    func(error)
}

func defaultConfig() config {
	return config{
		timeout:   DefaultTimeout,
		skew:      DefaultSkew,
		onFailure: FailOpen,
		ratio:     DefaultBreakerRatio,
		minCalls:  DefaultBreakerMinCalls,
		window:    DefaultBreakerWindow,
		cooldown:  DefaultBreakerCooldown,
		denyKeys:  DefaultDenyCacheKeys,
		prefix:    DefaultPrefix,
	}
}

// WithClock makes the limiter decide at the times read from c, sent with every call, instead of
// the server's time: client time, as WithClientTime, on c rather than the process-wide coarse
// clock. Use clock.NewManual to pass explicit times in tests and simulations. Keys still expire
// on Redis's own clock (see Keys in the package doc): a manual clock that runs slower than real
// time, or stands still, finds a key gone, and its state a new key's, once real time has passed
// its expiry; a simulation that holds time longer than a window (a bucket's fill) plus the
// allowed skew sets a larger WithClockSkew. The limiter does
// not stop c. With WithServerTime as well, decisions use the server's time and c serves only the
// deny cache's reckoning between replies. c may be shared: any number of limiters read it, and a
// test may move a manual one from another goroutine while they decide (see clock.Clock).
func WithClock(c *clock.Clock) Option {
	return func(cfg *config) error {
		if c == nil {
			return fmt.Errorf("redisstore: WithClock(nil): the clock is nil")
		}
		cfg.clock, cfg.clientTime = c, true
		return nil
	}
}

// WithServerTime makes every decision read the time from the Redis server (TIME, inside the
// script, so still one round trip), so that hosts with skewed clocks agree. It is the default;
// the option exists to keep it when WithClock is given too. In a cluster, each key's time comes
// from the node that holds it. The Option it returns holds nothing and may be passed to any number
// of New calls, concurrently too.
func WithServerTime() Option {
	return func(cfg *config) error {
		cfg.forceSrv = true
		return nil
	}
}

// WithClientTime makes the limiter send this process's coarse clock (or WithClock's clock) with
// every call instead of using the server's time, saving the TIME call inside each script; with
// WithServerTime as well, in either order, the server's time is used. Hosts whose clocks differ
// then see each other's windows shifted by the difference; the deny cache stays bounded by the
// key's TTL on Redis, and may refuse what Redis would admit for at most the hosts' clock
// difference after a host whose clock is ahead takes from the key (see the package documentation).
// The Option it returns holds nothing and may be passed to any number of New calls, concurrently
// too.
func WithClientTime() Option {
	return func(cfg *config) error {
		cfg.clientTime = true
		return nil
	}
}

// WithTimeout sets the deadline of each call to Redis (default DefaultTimeout, 50ms), in [1ms, 1m].
// The caller's context still applies when it is shorter, through a go-redis client without
// ContextTimeoutEnabled too (see New), and so do the client's own socket timeouts (ReadTimeout
// and WriteTimeout, go-redis's default 5s, a URL's read_timeout and write_timeout). A call that times out is never retried: the script may have
// run. The Option it returns holds only d and may be passed to any number of New calls,
// concurrently too.
func WithTimeout(d time.Duration) Option {
	return func(cfg *config) error {
		if d < time.Millisecond || d > time.Minute {
			return fmt.Errorf("redisstore: WithTimeout(%v): must be in [1ms, 1m]", d)
		}
		cfg.timeout = d
		return nil
	}
}

// WithClockSkew sets the clock skew allowed between hosts (default DefaultSkew, 2s), whole
// milliseconds in [0, 1h], which lengthens each key's TTL so that a host whose clock runs behind
// still finds the state. The Option it returns holds only d and may be passed to any number of New
// calls, concurrently too.
func WithClockSkew(d time.Duration) Option {
	return func(cfg *config) error {
		if d < 0 || d > time.Hour || d%time.Millisecond != 0 {
			return fmt.Errorf("redisstore: WithClockSkew(%v): must be whole milliseconds in [0, 1h]", d)
		}
		cfg.skew = d
		return nil
	}
}

// WithOnFailure chooses what Take decides when Redis cannot (default FailOpen). FailLocal
// needs WithFallback as well. The Option it returns holds only f and may be passed to any number of
// New calls, concurrently too.
func WithOnFailure(f OnFailure) Option {
	return func(cfg *config) error {
		if f > FailFallback {
			return fmt.Errorf("redisstore: WithOnFailure(%d): unknown choice", uint8(f))
		}
		cfg.onFailure = f
		return nil
	}
}

// WithFallback sets the in-process limiter that decides while Redis is unavailable, and selects
// FailLocal. The Limiter does not close l. The Option it returns holds only l, whose methods are
// safe for concurrent use: several limiters, built concurrently too, may share it as their
// fallback.
func WithFallback(l *engine.Limiter) Option {
	return func(cfg *config) error {
		if l == nil {
			return fmt.Errorf("redisstore: WithFallback(nil)")
		}
		cfg.fallback, cfg.onFailure = l, FailFallback
		return nil
	}
}

// WithBreaker replaces the default failure-ratio breaker with a consecutive-failure one: after
// threshold consecutive failed calls (threshold in [1, 2^20]) it opens, and while open every Take
// decides by the failure choice without touching Redis; after cooldown (in [1ms, 1h]) one call (and
// only one) tries Redis again, closing the breaker on success and reopening it on failure. With
// threshold 1 a single slow reply takes Redis out of the decisions for a whole cooldown, which
// suits tests more than production; the default (WithBreakerRatio) rides out a short stall. The
// Option it returns holds only threshold and cooldown and may be passed to any number of New calls,
// concurrently too; each limiter gets a breaker of its own.
func WithBreaker(threshold int, cooldown time.Duration) Option {
	return func(cfg *config) error {
		if threshold < 1 || threshold > 1<<20 {
			return fmt.Errorf("redisstore: WithBreaker threshold = %d: must be in [1, 2^20]", threshold)
		}
		if cooldown < time.Millisecond || cooldown > time.Hour {
			return fmt.Errorf("redisstore: WithBreaker cooldown = %v: must be in [1ms, 1h]", cooldown)
		}
		cfg.threshold, cfg.cooldown = threshold, cooldown
		return nil
	}
}

// BreakerRatio configures the failure-ratio circuit breaker; a zero field takes its default. A
// plain value, safe to copy and to share between goroutines.
type BreakerRatio struct {
	// Ratio is the share of failed calls, in (0, 1], that opens the breaker (default
	// DefaultBreakerRatio).
	Ratio float64
	// MinCalls is how many calls, in [1, 2^20], must have reached Redis within Window before Ratio
	// is judged (default DefaultBreakerMinCalls), so that a quiet limiter is not opened by one
	// failure.
	MinCalls int
	// Window is the interval the calls are counted over, in [10ms, 1h], sliding by a tenth of
	// itself (default DefaultBreakerWindow).
	Window time.Duration
	// Cooldown is how long the breaker stays open before one call probes Redis, in [1ms, 1h]
	// (default DefaultBreakerCooldown).
	Cooldown time.Duration
}

// WithBreakerRatio sets the circuit breaker that New uses by default: it opens when, over the
// last Window, at least MinCalls calls reached Redis and at least Ratio of them failed; while
// open every Take decides by the failure choice without touching Redis; after Cooldown one call
// (and only one) tries Redis again, closing the breaker on success and reopening it on failure.
// Errors that affect every key (ErrMisconfigured) open it at once whatever the ratio. The
// breaker is shared by every goroutine calling the limiter, so one probe goes for all of them.
// Like every With function, it may be called from any goroutine.
func WithBreakerRatio(b BreakerRatio) Option {
	return func(cfg *config) error {
		if b.Ratio == 0 {
			b.Ratio = DefaultBreakerRatio
		}
		if b.MinCalls == 0 {
			b.MinCalls = DefaultBreakerMinCalls
		}
		if b.Window == 0 {
			b.Window = DefaultBreakerWindow
		}
		if b.Cooldown == 0 {
			b.Cooldown = DefaultBreakerCooldown
		}
		if !(b.Ratio > 0 && b.Ratio <= 1) {
			return fmt.Errorf("redisstore: WithBreakerRatio Ratio = %v: must be in (0, 1]", b.Ratio)
		}
		if b.MinCalls < 1 || b.MinCalls > 1<<20 {
			return fmt.Errorf("redisstore: WithBreakerRatio MinCalls = %d: must be in [1, 2^20]", b.MinCalls)
		}
		if b.Window < 10*time.Millisecond || b.Window > time.Hour {
			return fmt.Errorf("redisstore: WithBreakerRatio Window = %v: must be in [10ms, 1h]", b.Window)
		}
		if b.Cooldown < time.Millisecond || b.Cooldown > time.Hour {
			return fmt.Errorf("redisstore: WithBreakerRatio Cooldown = %v: must be in [1ms, 1h]", b.Cooldown)
		}
		cfg.threshold, cfg.ratio, cfg.minCalls, cfg.window, cfg.cooldown = 0, b.Ratio, b.MinCalls, b.Window, b.Cooldown
		return nil
	}
}

// WithDenyCache sets how many refused keys are remembered locally (default DefaultDenyCacheKeys),
// in [0, 2^26]; 0 turns the cache off. The bound is exact, however many goroutines store refusals
// at once. Each entry takes at most DenyCacheEntryBytes, whatever the subject's length. A
// remembered key is decided in process, with the state Redis returned when it refused it, until its
// retry time: the policy is replayed on that state, so the answer is the one Redis would give when
// no other host touches the key, and while other hosts only take from the key it can only refuse
// what Redis would refuse too (their requests only add to the count). Another host's Refund or
// Reset lowers the count on Redis without reaching this cache, which may then refuse, until the
// entry's retry time, a request Redis would admit (this host's own Refund and Reset forget the
// entry); so does Redis losing the key (FLUSHALL, a restart without persistence, a failover to an
// empty replica, a DEL from outside). WithDenyCacheMaxAge bounds that time. The cache is safe for
// concurrent use and takes no lock on a lookup.
func WithDenyCache(maxKeys int) Option {
	return func(cfg *config) error {
		if maxKeys < 0 || maxKeys > 1<<26 {
			return fmt.Errorf("redisstore: WithDenyCache(%d): must be in [0, 2^26]", maxKeys)
		}
		cfg.denyKeys = maxKeys
		return nil
	}
}

// WithDenyCacheMaxAge bounds how long the deny cache answers for a key after Redis refused it:
// until the entry's retry time or for d, whichever ends first. 0, the default, leaves the retry
// time alone. It bounds how long this process goes on refusing a key that Redis would now admit
// because another host's Refund or Reset lowered its count, or because Redis lost it (see
// WithDenyCache): for d at most, wherever the change was made. The price is one round trip per d
// for each key still blocked, instead of one per retry time; an hourly limit with d = 1s still
// answers all but one of a blocked client's requests a second in process. d must be 0 or at least
// 1ms. Like every option, it is read once, by New. The Option it returns holds only d and may be
// passed to any number of New calls, concurrently too.
func WithDenyCacheMaxAge(d time.Duration) Option {
	return func(cfg *config) error {
		if d < 0 || d > 0 && d < time.Millisecond {
			return fmt.Errorf("redisstore: WithDenyCacheMaxAge(%v): must be 0 (until the retry time) or at least 1ms", d)
		}
		cfg.denyMaxAge = d
		return nil
	}
}

// DenyCacheEntryBytes bounds the memory one deny-cache entry takes, key included: the cache keeps
// a key by its short name (at most MaxInlineSubject bytes; a longer subject is kept as its hash),
// so the cache's memory is at most its key count times this, whatever subjects clients send.
const DenyCacheEntryBytes = 512

// WithDenyCacheBytes bounds the deny cache's memory instead of its key count: it remembers at most
// maxBytes / DenyCacheEntryBytes keys (0 turns it off), maxBytes in [0, 2^26 *
// DenyCacheEntryBytes]. The default, DefaultDenyCacheKeys keys, is at most 32 MiB. The Option it
// returns holds only maxBytes and may be passed to any number of New calls, concurrently too.
func WithDenyCacheBytes(maxBytes int64) Option {
	return func(cfg *config) error {
		if maxBytes < 0 || maxBytes/DenyCacheEntryBytes > 1<<26 {
			return fmt.Errorf("redisstore: WithDenyCacheBytes(%d): must be in [0, 2^26 * %d]", maxBytes, DenyCacheEntryBytes)
		}
		cfg.denyKeys = int(maxBytes / DenyCacheEntryBytes)
		return nil
	}
}

// WithPrefix sets the prefix of every key name (default DefaultPrefix, "sl:"): printable ASCII
// without spaces or braces, at most 64 bytes. The Option it returns holds only p and may be passed
// to any number of New calls, concurrently too.
func WithPrefix(p string) Option {
	return func(cfg *config) error {
		if err := check.Name("redisstore", "prefix", p, true, 64); err != nil {
			return err
		}
		cfg.prefix = p
		return nil
	}
}

// WithOnError sets a function called with every Redis failure (not with the breaker's short
// circuits), for logs and metrics. An error that every key gets (ErrMisconfigured: a wrong
// password, a missing permission, a cluster node behind a single-node client, no scripting) is
// passed once per cause, until a probe of Redis succeeds; without a hook it is logged once with
// log/slog's default logger, and so is each opening of the breaker by other failures (at Warn,
// naming the failure). It is called synchronously from Take, Refund and Reset, possibly from
// many goroutines at once, and must be fast and safe for concurrent use.
func WithOnError(f func(error)) Option {
	return func(cfg *config) error {
		cfg.onError = f
		return nil
	}
}
