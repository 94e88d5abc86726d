package batched

import (
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/redisstore/internal/check"
)

// Option configures a Limiter at construction. Options are applied in order, once, by New; a
// later one overrides an earlier one of the same kind. An Option holds no state of its own: one
// value may be reused for several limiters and passed between goroutines, and the With functions,
// which only build such values, may be called from any goroutine.
type Option func(*config) error

// Defaults, constants safe to read from anywhere.
const (
	// DefaultSyncInterval is how often a process exchanges counts with Redis: heartbeats, lease
	// renewals, returns of unused leases.
	DefaultSyncInterval = 50 * time.Millisecond
	// DefaultTimeout bounds every call to Redis.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultPrefix starts every key name. It differs from redisstore.DefaultPrefix because the two
	// modes keep different state under the same key layout.
	DefaultPrefix = "slb:"
	// DefaultSkew is the clock skew between hosts that key lifetimes allow for.
	DefaultSkew = 2 * time.Second
)

type config struct {
	clock    *clock.Clock
	sync     time.Duration
	timeout  time.Duration
	maxChunk int64
	prefix   string
	id       string
	onError  func(error)
	fleet0   int64 // the fleet size assumed until a heartbeat answers
	offline  slidelimit.FailureMode
	manual   bool // no background goroutine; the tests step the exchange themselves
}

func defaultConfig() config {
	return config{sync: DefaultSyncInterval, timeout: DefaultTimeout, prefix: DefaultPrefix, fleet0: 1, offline: slidelimit.FailLocal}
}

// WithClock makes the limiter read time from c instead of the process-wide coarse clock
// (clock.Acquire). Every process of a fleet must read close clocks (a few milliseconds apart at
// most): windows are aligned to the Unix epoch, and a lease is used in the window its process's
// clock says. The exchanges with Redis keep to real time (a ticker every sync interval), but every
// span the limiter reckons itself, such as how long a refusal is remembered (one sync interval at
// most), is on c: under a manual clock that stands still, a remembered refusal lasts until c
// moves. The limiter does not stop c. c may be shared: any number of limiters read it, and a
// test may move a manual one from another goroutine while they decide (see clock.Clock).
func WithClock(c *clock.Clock) Option {
	return func(cfg *config) error {
		if c == nil {
			return fmt.Errorf("batched: WithClock(nil): the clock is nil")
		}
		cfg.clock = c
		return nil
	}
}

// WithSyncInterval sets how often the process exchanges counts with Redis (default
// DefaultSyncInterval, 50ms, in [1ms, 1m]): one heartbeat and one pipeline of renewals and returns
// per interval. A shorter interval means smaller leases and less under-admission (see the package
// doc's bounds), a longer one fewer Redis commands. The Option it returns holds only d and may be
// passed to any number of New calls, concurrently too.
func WithSyncInterval(d time.Duration) Option {
	return func(cfg *config) error {
		if d < time.Millisecond || d > time.Minute {
			return fmt.Errorf("batched: WithSyncInterval(%v): must be in [1ms, 1m]", d)
		}
		cfg.sync = d
		return nil
	}
}

// WithTimeout sets the deadline of each call to Redis (default DefaultTimeout, 50ms, in [1ms, 1m]);
// the client's own socket timeouts (go-redis's ReadTimeout and WriteTimeout, 5s unless set) end a
// call first when they are shorter.
// The caller's context still applies when it is shorter, through a go-redis client without
// ContextTimeoutEnabled too (see New). A call that times out is never retried. The Option it
// returns holds only d and may be passed to any number of New calls, concurrently too.
func WithTimeout(d time.Duration) Option {
	return func(cfg *config) error {
		if d < time.Millisecond || d > time.Minute {
			return fmt.Errorf("batched: WithTimeout(%v): must be in [1ms, 1m]", d)
		}
		cfg.timeout = d
		return nil
	}
}

// WithMaxChunk caps the units one lease may grant, n in [1, 2^32-1] (default: the limit divided by
// four times the live fleet size, at least 1, recomputed at every heartbeat). Leases below the cap
// follow each key's observed rate, about two sync intervals' worth. The cap bounds the quota a
// process can hold unused, and so the fleet's under-admission: at most (N-1) × maxChunk. The Option
// it returns holds only n and may be passed to any number of New calls, concurrently too.
func WithMaxChunk(n int64) Option {
	return func(cfg *config) error {
		if n < 1 || n > 1<<32-1 {
			return fmt.Errorf("batched: WithMaxChunk(%d): must be in [1, 2^32-1]", n)
		}
		cfg.maxChunk = n
		return nil
	}
}

// WithPrefix sets the prefix of every key name (default DefaultPrefix, "slb:"): printable ASCII
// without spaces or braces, at most 64 bytes. The Option it returns holds only p and may be passed
// to any number of New calls, concurrently too.
func WithPrefix(p string) Option {
	return func(cfg *config) error {
		if err := check.Name("batched", "prefix", p, true, 64); err != nil {
			return err
		}
		cfg.prefix = p
		return nil
	}
}

// WithProcessID sets the id this process registers under in the fleet's membership (default: 16
// random hex digits). Ids must be unique in the fleet; a restarted process may reuse its old one.
// Same character rules as a name, at most 64 bytes. The Option it returns holds only id, and may be
// passed to New from any goroutine.
func WithProcessID(id string) Option {
	return func(cfg *config) error {
		if err := check.Name("batched", "process id", id, false, 64); err != nil {
			return err
		}
		cfg.id = id
		return nil
	}
}

// WithOnError sets a function called with every failed exchange with Redis, and with each loss
// of Redis's data that a heartbeat finds (an error wrapping redisstore.ErrUnavailable: the
// limiter then decides alone for a quiet while the fleet re-declares its counts), for logs and
// metrics. It is called from the deciding goroutine or from the limiter's own goroutine, possibly
// from several at once, and must be fast and safe for concurrent use. It must not call Close,
// which waits for the limiter's goroutine and for each key's call in progress, the hook's caller
// among them: a hook that closes the limiter on an error must do it from a goroutine of its own.
// A failure that every key would meet (a wrong password, a missing permission, a cluster node
// behind a client that is not a *redis.ClusterClient) wraps redisstore.ErrMisconfigured, naming
// it, as redisstore's Limiter reports it. Without a hook, each time the limiter goes offline, and
// each such loss, is logged once with log/slog's default logger, at Warn, naming the failure (a
// refused connection, the lost data); each misconfiguration is logged so once, even where the
// limiter was offline already.
func WithOnError(f func(error)) Option {
	return func(cfg *config) error {
		cfg.onError = f
		return nil
	}
}

// WithOfflineMode sets what Take does with a request that it would otherwise decide alone on the
// process's share of the limit (while Redis is unreachable, in the quiet period after Redis came
// back without its data, or after an error reply about the key), returning ErrOffline with it:
// slidelimit.FailLocal (the default) decides it on the share and charges Redis what it admitted
// once Redis answers; slidelimit.FailClosed refuses it (ReasonLimited, RetryAfter the sync
// interval) and FailOpen admits it, both counting nothing, locally or in Redis. A request the
// process's lease still covers is admitted from it in every mode, with no error: those units were
// granted by Redis. Queries (cost 0) and costs above the limit are answered as without the option.
// The Option it returns holds only m and may be passed to any number of New calls, concurrently
// too.
func WithOfflineMode(m slidelimit.FailureMode) Option {
	return func(cfg *config) error {
		switch m {
		case slidelimit.FailLocal, slidelimit.FailClosed, slidelimit.FailOpen:
			cfg.offline = m
			return nil
		}
		return fmt.Errorf("batched: WithOfflineMode(%v): want FailLocal, FailClosed or FailOpen", m)
	}
}

// WithInitialFleetSize sets the fleet size N a process assumes until one of its heartbeats is
// answered (default 1): while Redis is unreachable it decides alone with the limit divided by N,
// and a process that starts (or restarts) during an outage has never heard N from Redis. Give
// the largest number of processes that may run at once: with the default, each process started
// during an outage may admit the whole limit on its own. When Redis answers at New, the live
// count replaces N at once. A process that is offline when a heartbeat first answers again (it
// started during the outage, or lost Redis later) keeps the larger of the live count and the size
// it held (N, or the last count) for that heartbeat, since the membership still lacks the
// processes that have not had one since the outage; the live count replaces it from the next
// heartbeat, one sync interval later, once the process has charged Redis what it admitted alone
// (until that succeeds, it stays offline and keeps the larger). A process that had heard from
// Redis before and finds it came back without its data keeps the larger for every heartbeat of
// the quiet period that follows (the membership's liveness: five sync intervals, at least a
// second, plus twice the timeout). n must be in [1, 2^20]. Like every With function, it may be
// called from any goroutine.
func WithInitialFleetSize(n int) Option {
	return func(cfg *config) error {
		if n < 1 || n > 1<<20 {
			return fmt.Errorf("batched: WithInitialFleetSize(%d): must be in [1, 2^20]", n)
		}
		cfg.fleet0 = int64(n)
		return nil
	}
}
