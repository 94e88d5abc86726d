package peers

import (
	"context"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	satomic "sync/atomic"
	"time"
	"unsafe"

	"github.com/go-chi/httprate"
	golimiter "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/sys/cpu"
	"golang.org/x/time/rate"
)

// ---- floor ----

// floorSlot is one counter alone on its cache line, so that counters of different keys never
// share a line (the limiters' cells may; the floor grants itself the best case).
type floorSlot struct {
	n satomic.Uint64
	_ [unsafe.Sizeof(cpu.CacheLinePad{}) - 8]byte
}

// floor is the least any keyed limiter can cost: it hashes the key with hash/maphash under a
// per-process seed, exactly as slidelimit does by default, masks the hash to a power-of-two
// array of padded counters, and adds one atomically. It pays what every limiter pays for a
// string key (reading the key's bytes, hashing them) and one contended or cache-missing write;
// it leaves out everything that makes a limiter one: reading the clock, finding the key's own
// state (no probe, no key comparison: two keys that share a slot share a counter), deciding, and
// growing. Its memory figure is only its array and is not reported as bytes per key.
type floor struct {
	seed  maphash.Seed
	mask  uint64
	slots []floorSlot
}

func newFloor(cfg Config) (Limiter, error) {
	n := uint64(1) << bits.Len64(uint64(max(cfg.Keys, 1)-1)) // the next power of two
	return &floor{seed: maphash.MakeSeed(), mask: n - 1, slots: make([]floorSlot, n)}, nil
}

func (f *floor) Allow(key string) bool {
	f.slots[maphash.String(f.seed, key)&f.mask].n.Add(1)
	return true
}

func (f *floor) Close() error { return nil }

// ---- slidelimit ----

// slidelimitAdapter is the engine with its defaults (eviction on, the shared coarse clock,
// maphash keys) and the sliding counter, plus the key cap Config.MaxKeys asks for; Allow is the
// engine's own Allow.
type slidelimitAdapter struct{ *engine.Limiter }

func newSlidelimit(cfg Config) (Limiter, error) { return buildSlidelimit(cfg) }

// newSlidelimitExpected is newSlidelimit with engine.WithExpectedKeys(cfg.Keys).
func newSlidelimitExpected(cfg Config) (Limiter, error) {
	return buildSlidelimit(cfg, engine.WithExpectedKeys(cfg.Keys))
}

func buildSlidelimit(cfg Config, opts ...engine.Option) (Limiter, error) {
	if cfg.MaxKeys > 0 {
		opts = append(opts, engine.WithMaxKeys(cfg.MaxKeys), engine.WithAtCap(engine.EvictStalest))
	}
	l, err := engine.New(policy.SlidingCounter{Limit: cfg.Limit, Window: cfg.Window}, opts...)
	if err != nil {
		return nil, err
	}
	return slidelimitAdapter{l}, nil
}

// ---- go-chi/httprate ----

// httprateAdapter decides as httprate's RateLimiter.OnLimit does, with the library's local
// counter (NewLocalLimitCounter: two maps of xxh3 key hashes under a RWMutex) and, like OnLimit,
// one mutex held across reading the counts and incrementing them. OnLimit itself writes HTTP
// headers and needs a request, so the adapter repeats its arithmetic without them: the window
// start, the weighted previous count, the rounded rate compared with the limit. It reads
// time.Now once per decision where OnLimit reads it twice.
type httprateAdapter struct {
	mu      sync.Mutex
	counter httprate.LimitCounter
	limit   int
	window  time.Duration
}

func newHttprate(cfg Config) (Limiter, error) {
	return &httprateAdapter{
		counter: httprate.NewLocalLimitCounter(cfg.Window),
		limit:   int(cfg.Limit),
		window:  cfg.Window,
	}, nil
}

func (h *httprateAdapter) Allow(key string) bool {
	now := time.Now().UTC()
	cur := now.Truncate(h.window)
	prev := cur.Add(-h.window)
	h.mu.Lock()
	defer h.mu.Unlock()
	curCount, prevCount, err := h.counter.Get(key, cur, prev)
	if err != nil {
		return false
	}
	w := float64(h.window)
	r := int(math.Round(float64(prevCount)*(w-float64(now.Sub(cur)))/w + float64(curCount)))
	if r+1 > h.limit {
		return false
	}
	return h.counter.IncrementBy(key, cur, 1) == nil
}

func (h *httprateAdapter) Close() error { return nil }

// ---- golang.org/x/time/rate ----

// xTimeRate is the usual way to key x/time/rate: a map from key to *rate.Limiter under one
// mutex, held only to find or create the key's limiter; the limiter (which has its own mutex)
// then decides. The bucket refills Limit tokens per Window and holds at most Limit.
type xTimeRate struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	every rate.Limit
	burst int
}

func newXTimeRate(cfg Config) (Limiter, error) {
	return &xTimeRate{
		m:     make(map[string]*rate.Limiter),
		every: rate.Limit(float64(cfg.Limit) / cfg.Window.Seconds()),
		burst: int(cfg.Limit),
	}, nil
}

func (x *xTimeRate) Allow(key string) bool {
	x.mu.Lock()
	l, ok := x.m[key]
	if !ok {
		l = rate.NewLimiter(x.every, x.burst)
		x.m[key] = l
	}
	x.mu.Unlock()
	return l.Allow()
}

func (x *xTimeRate) Close() error { return nil }

// ---- sethvargo/go-limiter ----

// goLimiter is go-limiter's memorystore (a map of token buckets under a RWMutex, each bucket
// updated by its own lock) with Limit tokens per Window and the store's default sweep.
//
// go-limiter (v0.7.1) refills a bucket by setting it to ticks*Interval/Tokens tokens rather than
// to Tokens (its issue #29), so above sqrt(Interval in ns) tokens, as in the benchmarks, it
// admits only a trickle once the first interval has passed. The adapter then expresses the same
// sustained rate as m*Limit tokens per m*Window, with m a power of two up to 2^30: the first
// interval then lasts longer than any run (a day or more), every request is admitted as with the
// other limiters, and a take costs what it always costs (the bucket's lock, the tick arithmetic,
// a decrement).
type goLimiter struct{ store golimiter.Store }

func newGoLimiter(cfg Config) (Limiter, error) {
	tokens, interval := uint64(cfg.Limit), cfg.Window
	if float64(tokens)*float64(tokens) > float64(interval.Nanoseconds()) {
		m := uint64(1) << 30
		for m > 1 && (uint64(interval) > math.MaxInt64/m || tokens > math.MaxUint64/m) {
			m >>= 1
		}
		tokens, interval = tokens*m, interval*time.Duration(m)
	}
	s, err := memorystore.New(&memorystore.Config{Tokens: tokens, Interval: interval})
	if err != nil {
		return nil, err
	}
	return goLimiter{s}, nil
}

func (g goLimiter) Allow(key string) bool {
	_, _, _, ok, err := g.store.Take(context.Background(), key)
	return ok && err == nil
}

func (g goLimiter) Close() error { return g.store.Close(context.Background()) }

// ---- ulule/limiter ----

// ululeAdapter is ulule/limiter with its in-memory store (a map of counters under a RWMutex,
// cleaned of expired counters every 30s by default): a fixed window of Limit per Window.
type ululeAdapter struct{ l *ulule.Limiter }

func newUlule(cfg Config) (Limiter, error) {
	return ululeAdapter{ulule.New(ululememory.NewStore(), ulule.Rate{Period: cfg.Window, Limit: cfg.Limit})}, nil
}

func (u ululeAdapter) Allow(key string) bool {
	c, err := u.l.Get(context.Background(), key)
	return err == nil && !c.Reached
}

// Close does nothing: the memory store stops its cleaner when the store is garbage collected.
func (u ululeAdapter) Close() error { return nil }

// ---- throttled/throttled ----

// throttledAdapter is throttled's GCRA limiter over its memstore without a key bound (a map of
// *int64 under a RWMutex, each updated by compare-and-swap): a sustained rate of Limit per Window
// with a burst of Limit.
type throttledAdapter struct{ l *throttled.GCRARateLimiterCtx }

func newThrottled(cfg Config) (Limiter, error) {
	st, err := memstore.NewCtx(0)
	if err != nil {
		return nil, err
	}
	l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
		MaxRate:  throttled.PerDuration(int(cfg.Limit), cfg.Window),
		MaxBurst: int(cfg.Limit) - 1, // throttled admits MaxBurst+1 at once
	})
	if err != nil {
		return nil, err
	}
	return throttledAdapter{l}, nil
}

func (t throttledAdapter) Allow(key string) bool {
	limited, _, err := t.l.RateLimitCtx(context.Background(), key, 1)
	return err == nil && !limited
}

func (t throttledAdapter) Close() error { return nil }
