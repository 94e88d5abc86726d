package rls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore"
)

// Backend makes the limiter behind one rate limit of the config. The server asks for one limiter
// per distinct (domain, descriptor path, rate limit), and keys it by the request's full descriptor
// entries. name identifies that triple: stable across restarts and reloads, the same in every
// replica given the same config, and a valid redisstore name. Implementations must be safe for
// concurrent use; NewLimiter is called while a config is loaded, never on the request path.
//
// A limiter that can give units back, as the engine's can, makes a request refused on one
// descriptor consume nothing on the others. The server closes a limiter it no longer uses when it
// implements Close() error, or adapts an *engine.Limiter (see engine.AsLimiter).
type Backend interface {
	// NewLimiter returns the limiter for the rate limit name with policy p, or an error that the
	// config's loading reports. It may be called from several goroutines at once.
	NewLimiter(name string, p policy.Policy) (slidelimit.Limiter, error)
}

// BackendFunc adapts a function to Backend; the function must be safe for concurrent use, as
// Backend's NewLimiter must.
type BackendFunc func(name string, p policy.Policy) (slidelimit.Limiter, error)

// NewLimiter calls f, from the caller's goroutine.
func (f BackendFunc) NewLimiter(name string, p policy.Policy) (slidelimit.Limiter, error) {
	return f(name, p)
}

// DefaultShards is the number of shards of each engine.Limiter the default backend builds
// (engine.WithShards), for a backend that sets other engine options and keeps that layout.
const DefaultShards = 16

// EngineBackend decides in process: one engine.Limiter per rate limit, built with opts. It is the
// default, and the exact one: refusals are all-or-nothing across descriptors. Safe for
// concurrent use.
func EngineBackend(opts ...engine.Option) Backend {
	return BackendFunc(func(_ string, p policy.Policy) (slidelimit.Limiter, error) {
		l, err := engine.New(p, opts...)
		if err != nil {
			return nil, err
		}
		return l.AsLimiter(), nil
	})
}

// RedisBackend decides on Redis (or Valkey) through client, so that every replica with the same
// config shares each limit: one redisstore.Limiter per rate limit, built with opts. Redis runs
// every policy the service accepts. A request refused on one descriptor is charged nothing on the
// others: what they took is given back at once (redisstore's Refund, exact as the engine's); a
// refund Redis does not answer leaves those units charged. The server never closes client. Safe
// for concurrent use.
func RedisBackend(client redis.UniversalClient, opts ...redisstore.Option) Backend {
	return BackendFunc(func(name string, p policy.Policy) (slidelimit.Limiter, error) {
		l, err := redisstore.New(client, name, p, opts...)
		if err != nil {
			return nil, err
		}
		return l, nil
	})
}

// limiterName names the limiter of one rate limit: "rls." and a hash of the domain, the
// descriptor path and the policy, short enough for any store and free of the characters
// redisstore reserves.
func limiterName(domain, path string, p policy.Policy) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%s\x00%#v", domain, path, p.ID(), p)))
	return "rls." + hex.EncodeToString(h[:12])
}

// refundFunc gives back up to n units that the admitted decision d counted for key, and says how
// many it gave back, and the store's error when it failed to answer.
type refundFunc func(ctx context.Context, key string, n int64, d slidelimit.Decision) (int64, error)

// refunderOf returns how l gives units back, or nil where it cannot: the engine's adapter gives
// back through its *engine.Limiter, and a store with a Refund method (redisstore) through that.
// A store that fails to answer a refund gives back nothing, so the units stay charged: never more
// than a refused request would otherwise have cost.
func refunderOf(l slidelimit.Limiter) refundFunc {
	if e := engineOf(l); e != nil {
		return func(_ context.Context, key string, n int64, d slidelimit.Decision) (int64, error) {
			return e.Refund(key, n, d), nil
		}
	}
	if r, ok := l.(interface {
		Refund(ctx context.Context, key string, n int64, d slidelimit.Decision) (int64, error)
	}); ok {
		return r.Refund
	}
	return nil
}

// engineAdapter is what the engine's adapter offers besides Take: its *engine.Limiter.
type engineAdapter interface {
	Engine() *engine.Limiter
}

func engineOf(l slidelimit.Limiter) *engine.Limiter {
	if r, ok := l.(engineAdapter); ok {
		return r.Engine()
	}
	return nil
}

func closeLimiter(l slidelimit.Limiter) {
	if e := engineOf(l); e != nil {
		_ = e.Close()
		return
	}
	if c, ok := l.(interface{ Close() error }); ok {
		_ = c.Close()
	}
}
