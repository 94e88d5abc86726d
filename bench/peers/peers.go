// Package peers puts slidelimit and the rate limiters it is compared with behind one small
// interface, so that the comparison benchmarks and the memory program drive every limiter the
// same way: one call per request, a string key, a yes or no.
//
// Each adapter uses its library the way that library's documentation shows, with the cheapest
// in-memory store it offers; where an adapter has to choose (which store, which lock, how time
// is read), the choice is written next to it. The floor is not a limiter: it is the least any
// keyed limiter can cost, one hash of the key and one atomic add in a padded array.
//
// Every Limiter returned here is safe for concurrent use by any number of goroutines, as the
// libraries themselves are.
package peers

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config is the limit every limiter is built with: Limit requests per Window for each key.
// Keys is the number of distinct keys the caller expects; only the floor (to size its array) and
// SlidelimitExpected use it, the other limiters grow as they go.
type Config struct {
	Limit  int64
	Window time.Duration
	Keys   int
	// MaxKeys, when above 0, is slidelimit's key cap (engine.WithMaxKeys), reached by evicting the
	// stalest key (engine.WithAtCap(engine.EvictStalest)); the other limiters have no key cap and
	// ignore it.
	MaxKeys int
}

func (c Config) validate() error {
	if c.Limit < 1 {
		return fmt.Errorf("peers: Config.Limit = %d, must be at least 1", c.Limit)
	}
	if c.Window < time.Millisecond {
		return fmt.Errorf("peers: Config.Window = %v, must be at least 1ms", c.Window)
	}
	if c.Keys < 0 {
		return fmt.Errorf("peers: Config.Keys = %d, must not be negative", c.Keys)
	}
	if c.MaxKeys < 0 {
		return fmt.Errorf("peers: Config.MaxKeys = %d, must not be negative", c.MaxKeys)
	}
	return nil
}

// Limiter is one rate limiter over string keys. Allow reports whether one request for key is
// admitted now, counting it if so. Close releases background goroutines; the limiter must not be
// used after. Implementations are safe for concurrent use.
type Limiter interface {
	Allow(key string) bool
	Close() error
}

// Batcher is implemented by the limiters that can decide a batch of keys in one call, as
// slidelimit's AllowBatch does: out[i] receives the decision for n units of keys[i], each key
// decided as one call per key in order would decide it. Safe for concurrent use.
type Batcher interface {
	AllowBatch(keys []string, n int64, out []bool)
}

type constructor func(Config) (Limiter, error)

// registry maps each name to its constructor; the names are the ones benchmark results and
// charts use.
var registry = map[string]constructor{
	Floor:      newFloor,
	Slidelimit: newSlidelimit,
	Httprate:   newHttprate,
	XTimeRate:  newXTimeRate,
	GoLimiter:  newGoLimiter,
	Ulule:      newUlule,
	Throttled:  newThrottled,

	SlidelimitExpected: newSlidelimitExpected,
}

// Names of the limiters, as they appear in benchmark names (limiter=NAME) and charts.
const (
	Floor      = "floor"
	Slidelimit = "slidelimit"
	Httprate   = "httprate"
	XTimeRate  = "x-time-rate"
	GoLimiter  = "go-limiter"
	Ulule      = "ulule"
	Throttled  = "throttled"

	// SlidelimitExpected is slidelimit with its tables sized for Config.Keys up front
	// (engine.WithExpectedKeys): a variant, not in Names, that benchmarks and cmd/memory run only
	// when asked for by name (BenchmarkInsert and BenchmarkFill run it by default).
	SlidelimitExpected = "slidelimit-expected"
)

// Variants returns the names New knows besides Names: other configurations of slidelimit.
func Variants() []string { return []string{SlidelimitExpected} }

// Names returns every limiter's name: the floor and slidelimit first, then the peers in
// alphabetical order.
func Names() []string {
	var peers []string
	for n := range registry {
		if n != Floor && n != Slidelimit && !slices.Contains(Variants(), n) {
			peers = append(peers, n)
		}
	}
	sort.Strings(peers)
	return append([]string{Floor, Slidelimit}, peers...)
}

// New builds the limiter called name with cfg. An unknown name or an invalid cfg is an error
// that names it.
func New(name string, cfg Config) (Limiter, error) {
	c, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("peers: unknown limiter %q (known: %s)", name, strings.Join(append(Names(), Variants()...), ", "))
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return c(cfg)
}

// AppendKey appends key number i, a dotted IPv4-like address in 10.0.0.0/8 ("10.0.1.2"), to dst.
// Distinct i below 2^24 give distinct keys. Client addresses are what a proxy limits by, so the
// keys are shaped like them: 8 to 14 bytes.
func AppendKey(dst []byte, i uint32) []byte {
	dst = append(dst, "10."...)
	dst = strconv.AppendUint(dst, uint64(i>>16&0xff), 10)
	dst = append(dst, '.')
	dst = strconv.AppendUint(dst, uint64(i>>8&0xff), 10)
	dst = append(dst, '.')
	return strconv.AppendUint(dst, uint64(i&0xff), 10)
}

// MaxKeys is the number of distinct keys AppendKey can make.
const MaxKeys = 1 << 24
