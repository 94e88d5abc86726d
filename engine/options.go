package engine

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/evict"
	"github.com/slidelimit/slidelimit/policy"
)

// Option configures a Limiter at construction. New applies each once, in order (a later valid
// one of a kind overrides an earlier one; any invalid one, even if a later one overrides it, makes
// New fail), before the limiter is shared; an Option holds no state of its
// own, so one value may be reused for several limiters and passed between goroutines. The With
// functions only build such values, and may be called from any goroutine.
type Option func(*config) error

// AtCap says what a limiter at its key cap does with a request for a new key. Under either, a
// new key's request whose cost is above the limit (the per-key one for TakeWithLimit) is refused
// with ReasonCostAboveLimit at the cap, as it would be below it, and nothing is reclaimed or
// evicted for it; below the cap such a key is tracked (see docs/policies.md). An AtCap is a plain
// value, safe to share between goroutines.
type AtCap uint8

const (
	// RefuseNewKeys refuses requests for keys not yet tracked (Decision.Reason = ReasonKeyCap),
	// after first trying to reclaim dead keys as WithMaxKeys describes: up to 64 slots of the new
	// key's own shard, so dead keys elsewhere do not make room until the background sweeper (or a
	// later new key in their shard) removes them. Existing keys are decided as usual. The default.
	RefuseNewKeys AtCap = iota
	// EvictStalest, when the reclaim WithMaxKeys describes makes no room, makes it by evicting
	// the least recently renewed key (for the window policies, the key whose window began
	// earliest, so that keys used within one window tie; for the token, leaky and dual buckets, the
	// key updated longest ago; for GCRA, which keeps no time of its last update, the key that
	// holds the fewest units, its theoretical arrival time earliest) of a sample taken across the limiter (up to 64 live keys from up to 4 shards holding
	// keys, at most 16 from any one, so with fewer shards the sample is smaller and may miss the
	// limiter's stalest key; the search for shards holding keys reads at most 1024 shards, so with
	// more shards than that and few keys the sample may find none, and the new key is refused as
	// with RefuseNewKeys although keys could be evicted), among those holding less than half of their limit: for the window
	// policies, an estimate (count) below half the limit; for the buckets, less than
	// half the burst taken (half the capacity filled). Keys given per-key limits by TakeWithLimit
	// are judged against the lowest limit the limiter has been given, never one above their own.
	// One sample serves up to 8 new keys: its 8 stalest qualifying keys are evicted in turn, the
	// first for the request that sampled and the others for the next new keys at the cap, each
	// only if its state is still the one the sample judged (a key renewed since is skipped).
	// A key at half its limit or more is never evicted, so flooding new keys cannot reset a key
	// that is using its limit; an evicted key comes back as a new one, so the units it held
	// (fewer than half its limit) are forgotten, and a Refund of a Decision made before the
	// eviction gives back units the new one counted (see Refund). When no sampled key
	// qualifies, the new key is refused as with RefuseNewKeys. The sliding log's keys are never
	// evicted this way.
	EvictStalest
)

type config struct {
	clock         *clock.Clock
	shards        int
	seed          uint64
	seeded        bool
	eviction      bool
	sweepInterval time.Duration
	maxKeys       int
	expectedKeys  int
	atCap         AtCap
	maxLimit      int64
}

// DefaultShards is the number of shards when WithShards is not given.
const DefaultShards = 256

// DefaultMaxKeys is the key cap when WithMaxKeys is not given (2^26, about 67M keys).
const DefaultMaxKeys = 1 << 26

func defaultConfig() config {
	return config{shards: DefaultShards, eviction: true, sweepInterval: 100 * time.Millisecond, maxKeys: DefaultMaxKeys}
}

// WithClock makes the limiter read time from c instead of the shared coarse clock. The limiter
// does not stop c on Close; its owner does. Use clock.NewManual for tests and simulations. c may
// be shared: any number of limiters read it, and a test may move a manual one from another
// goroutine while they decide (see clock.Clock).
func WithClock(c *clock.Clock) Option {
	return func(cfg *config) error {
		if c == nil {
			return fmt.Errorf("engine: WithClock(nil)")
		}
		cfg.clock = c
		return nil
	}
}

// WithShards sets the number of shards, a power of two from 1 to 65536. More shards mean less
// contention on inserts and smaller tables to resize; lookups of existing keys never lock. Past
// 1024 shards, a limiter at its key cap under EvictStalest with few keys may refuse a new key
// that an eviction could have made room for (see EvictStalest). Like every With function, it may
// be called from any goroutine.
func WithShards(n int) Option {
	return func(cfg *config) error {
		if n < 1 || n > 1<<16 || n&(n-1) != 0 {
			return fmt.Errorf("engine: WithShards(%d): shards must be a power of two in [1, 65536]", n)
		}
		cfg.shards = n
		return nil
	}
}

// WithSeed makes key hashing deterministic: xxhash of the key mixed with seed, the same in every
// process. The default hashes with the runtime's memory hash (hash/maphash's) under a random
// per-limiter seed, which an attacker cannot aim at one shard or one counter; use WithSeed only
// where reproducibility matters more than that (tests, simulations). Either way string keys hash
// to 64 bits on every platform (two 32-bit hashes where a word has 32 bits), so two distinct keys
// share a counter with probability about 2^-64. The Option it returns holds only seed and may be
// passed to any number of New calls, concurrently too.
func WithSeed(seed uint64) Option {
	return func(cfg *config) error {
		cfg.seed, cfg.seeded = seed, true
		return nil
	}
}

// WithEviction switches the background sweeper that removes dead keys (keys whose state is
// identical to a new key's) on or off; it is on by default. With eviction off, dead keys are
// never forgotten (nor reclaimed at the key cap, see WithMaxKeys) and Len counts every key ever
// seen, as the registry's stateSize does. The one exception is WithAtCap(EvictStalest), which
// still evicts a key at the cap to make room for a new one. The Option it returns holds only on and
// may be passed to any number of New calls, concurrently too.
func WithEviction(on bool) Option {
	return func(cfg *config) error {
		cfg.eviction = on
		return nil
	}
}

// WithSweepInterval sets how often the sweeper wakes to take one bounded step over the shards
// (default 100ms). It visits every key about once per sweep period P or once per interval d,
// whichever is longer. P is clamped to [2s, 1min]: the window for the window policies (a
// fixed-window or sliding-log key is dead one window after its last request, a sliding-counter
// key two, so it is gone within about three periods), the time to fill (drain) the bucket for the
// buckets, a minute for the dual bucket. So with d at most P each key is visited about once per P
// (each step visits a d/P share of the slots); with d above P (say 90s for a 1s window) the
// sweeper still wakes only every d, and visits every key once per d: the option sets how often
// the sweeper runs, and it never runs more often than asked. A limiter with no key (and its tables
// at their smallest) is not swept: its sweeper sleeps until the first key arrives, or for
// max(P, d) at most, and then resumes its steps. Either way it paces itself to at most
// evict.MaxSlotsPerSecond slots a second (for d under about 2.7ms, where that pace gives a step
// fewer than 4,096 slots, 4,096 a step), so tables of more slots than that pace covers in the
// period take longer. d must be at least 1ms. The Option it returns holds only d and may be passed
// to any number of New calls, concurrently too.
func WithSweepInterval(d time.Duration) Option {
	return func(cfg *config) error {
		if d < evict.MinInterval {
			return fmt.Errorf("engine: WithSweepInterval(%v): must be at least %v", d, evict.MinInterval)
		}
		cfg.sweepInterval = d
		return nil
	}
}

// WithMaxKeys caps the number of live keys (default DefaultMaxKeys); n must be at least 1. A new
// key at the cap first sweeps 64 slots of its own shard, from that shard's cursor, for dead keys
// (with eviction on; see WithEviction), and takes the room that makes (sweeping again, up to 8
// times in all, when racing inserts take it first). Dead keys in other shards are not looked for: they go when the background sweeper
// passes, so with many shards and few keys a new key can be refused while every tracked key is
// dead. When the sweep makes no room, the WithAtCap choice applies (RefuseNewKeys by default).
// The cap is exact: a new key's place is reserved under its shard's lock before it is inserted,
// so Len never exceeds n, however many goroutines insert at once.
func WithMaxKeys(n int) Option {
	return func(cfg *config) error {
		if n < 1 {
			return fmt.Errorf("engine: WithMaxKeys(%d): must be at least 1", n)
		}
		cfg.maxKeys = n
		return nil
	}
}

// MaxExpectedKeys is the largest n WithExpectedKeys accepts: 2^32, or the largest int (2^31-1)
// where an int has 32 bits, so that it can be passed to WithExpectedKeys on every platform. (The
// strconv.IntSize/64 is 1 where an int has 64 bits, 0 where it has 32.)
const MaxExpectedKeys = strconv.IntSize/64*(1<<32) + (1-strconv.IntSize/64)*math.MaxInt32

// WithExpectedKeys sizes the limiter's tables for n keys when New runs (default 0: the tables
// start empty and grow as keys come). A table grows by copying its shard's keys into a larger one
// while holding the shard's lock, about 11 copies per key over a growth from empty; a limiter that
// starts at its working size makes none of those copies on the way to n, so a new key costs less
// (bench/README.md has the figures) and no shard pauses to grow. Keys fall into shards at random,
// so each shard is sized for its share of n plus four standard deviations of that share (the
// share's square root) and 8 keys more, at the 0.8 load: 1.25 slots of 16 bytes per key, or 32
// for a two-word cell (a cell that keeps full times; see docs/design.md), about 20.4 bytes per
// expected key at 10M keys in 256 shards and more for small shares. The memory is taken at New,
// whether or not the keys come (see Stats.TableBytes). Tables still grow past that room when more
// keys come, and a shard emptied by eviction keeps its room; the background sweeper visits
// every slot, so its sweeps cost what they would with n keys (see WithSweepInterval), however few
// there are. n must be in [0, MaxExpectedKeys] and at most the key cap (see WithMaxKeys); New
// reports an error otherwise, and also when the tables would need more than the Go memory limit
// (GOMEMLIMIT, or debug.SetMemoryLimit) or, on Linux, more than the process's address space has
// left (ulimit -v, less what the process has mapped already, a Go program's gigabyte or so of
// reservations included, and 64 MiB for the runtime's next heap arena; on a 32-bit platform, on
// any system, 3 GiB at most), its control group allows
// (a container's memory limit, cgroup v1 or v2) or the machine's memory, naming the sizes: such
// an allocation would end the process instead.
// Those limits are checked against n's tables together with the tables of every open limiter made
// with this option (Close gives them back), so that several limiters which each fit alone are not
// let past them together; the rest of the program's memory is the caller's to judge. Like every option, it is read once, by New.
// The Option it returns holds only n and may be passed to any number of New calls, concurrently
// too: each New counts its tables before it checks them, so that News that race see each other's
// (a New may then be refused for tables that a racing New, itself refused, counted for a moment).
func WithExpectedKeys(n int) Option {
	return func(cfg *config) error {
		if n < 0 || uint64(n) > MaxExpectedKeys {
			return fmt.Errorf("engine: WithExpectedKeys(%d): must be in [0, %d]", n, uint64(MaxExpectedKeys))
		}
		cfg.expectedKeys = n
		return nil
	}
}

// WithAtCap chooses what a limiter at its key cap does with a new key (default RefuseNewKeys). The
// Option it returns holds only a and may be passed to any number of New calls, concurrently too.
func WithAtCap(a AtCap) Option {
	return func(cfg *config) error {
		if a > EvictStalest {
			return fmt.Errorf("engine: WithAtCap(%d): unknown choice", a)
		}
		cfg.atCap = a
		return nil
	}
}

// WithMaxLimit sizes the limiter's cells for per-key limits up to n (see TakeWithLimit); without
// it a key's limit can only be lowered below the policy's, not raised above it. n must be in
// [1, policy.MaxLimit]. The sliding counter accepts any such n; the fixed window, whose cells take
// per-key limits up to its own Limit only, accepts n up to that Limit (and changes nothing); New
// refuses it for the other policies, which take no per-key limits, and for the fixed window above
// its Limit, with an error naming the policy. The Option it returns holds only n and may be passed
// to any number of New calls, concurrently too.
func WithMaxLimit(n int64) Option {
	return func(cfg *config) error {
		if n < 1 || n > policy.MaxLimit {
			return fmt.Errorf("engine: WithMaxLimit(%d): must be in [1, %d]", n, int64(policy.MaxLimit))
		}
		cfg.maxLimit = n
		return nil
	}
}
