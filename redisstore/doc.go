// Package redisstore runs slidelimit's policies on Redis or Valkey, so that a fleet of processes
// shares one limit per key and gets the same decisions as the in-process engine.
//
// A Limiter decides with one Lua script per request, run atomically on the server in one round
// trip (EVALSHA, falling back to EVAL only on NOSCRIPT), over one key per (limiter, key) whose
// name carries a hash tag, so it works unchanged on a single node, a cluster or behind sentinels.
// The scripts follow the engine's integer rules exactly — the sliding counter's floors, its solved
// RetryAfter with the extra millisecond at the window edge, ties that admit, a refused request
// that writes nothing — with exact integer arithmetic on Redis's double-precision Lua numbers for
// every configuration the policies accept (the proof is in scripts.go). Keys expire two windows
// (or one bucket fill) plus the allowed clock skew after their last admitted request.
//
// Time is the caller's coarse clock by default (sent with each call), or the server's (TIME,
// inside the script) with WithServerTime.
//
// Failures are bounded: each call has a deadline (50ms by default) and is never retried (a timed
// out script may have run); a circuit breaker makes a dead or paused Redis cost one timeout per
// cooldown instead of one per request; the failure choice is fail-open, fail-closed, or an
// in-process engine.Limiter as fallback; and the next successful probe closes the breaker again.
// The Limiter starts no goroutine.
//
// A local deny cache remembers keys that Redis refused, with the state Redis returned, until
// their retry time: a blocked client then costs no round trip, and still gets the Decision Redis
// would give.
package redisstore
