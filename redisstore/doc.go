// Package redisstore runs slidelimit's seven policies on Redis or Valkey, so that a fleet of
// processes shares one limit per key and gets the same decisions as the in-process engine.
//
// # Decisions
//
// A Limiter decides with one Lua script per request, run atomically on the server in one round
// trip (EVALSHA, falling back to EVAL only on NOSCRIPT), over one key per (limiter, key). Every
// policy runs there: the sliding counter, the sliding log (a sorted set, exact), the fixed window,
// the token bucket, GCRA, the leaky bucket and the dual bucket. The scripts follow the engine's
// integer rules exactly — the sliding counter's floors, its solved RetryAfter with the extra
// millisecond at the window edge, ties that admit, a refused request that writes nothing — with
// exact integer arithmetic on Redis's double-precision Lua numbers for every configuration the
// policies accept (the proof is in scripts.go). The tests compare every Decision field with the
// engine's on random sequences for all seven.
//
// TakeWithLimit takes the limit on each call, as redis_rate does, for the window policies.
// Refund gives back units exactly where the engine's Refund does. All decides several limits (10
// per second and 1,000 per hour, say) in one script and one round trip, all or nothing: a refused
// request is counted by none of them.
//
// # Keys
//
// A key's name is <prefix>{<hash tag>}<name>:<policy fingerprint>:<subject>. The hash tag is a
// hash of the subject, so every limiter's key for one subject is on one cluster slot (which lets
// All run on a cluster), and subjects spread over all slots. The fingerprint is 8 hex digits of a
// hash of the policy's kind and parameters: a limiter rebuilt with another policy under the same
// name starts from new keys instead of reading the old policy's state as its own, and the old keys
// expire. A subject longer than MaxInlineSubject is kept as its SHA-256. Keys expire once their
// state is a new key's again (two windows for the sliding counter, one fill for the buckets) plus
// the allowed clock skew.
//
// # Time
//
// Decisions use the server's clock by default: each script reads TIME, so hosts whose clocks
// disagree still share one window. In a cluster each key's time is its node's. WithClientTime (or
// WithClock) sends this process's time instead; hosts then see each other's windows shifted by
// their clocks' difference.
//
// The local deny cache remembers keys that Redis refused, with the state Redis returned, so that
// a blocked client costs no round trip and still gets the Decision Redis would give. Under server
// time (the default), whatever the skew, it never refuses what Redis would admit as long as other
// hosts only take from the key
// (another host's Refund or Reset lowers the count without reaching this cache, which may go on
// refusing until the entry's retry time; this host's own forget the key, and a refusal whose call
// was out while one of them ran is not remembered, unless the refund's reply was lost and Redis
// applied it later), for two reasons. First, under server time an
// entry reckons the server's time as this process's clock plus the offset measured on the reply
// that created it; the local clock was read before the request was sent, so the offset is at
// least the true one and the entry expires no later than the refusal does on the server. The
// bound is the local clock's resolution (1 ms for the coarse clock) plus any step of either clock
// during the entry's life (at most the retry time), and clock drift over that span. Second, under
// any time source, an entry never outlives the key on Redis: the script returns the key's PTTL
// with every refusal, and the entry ends then, so a host an hour ahead that writes a window in the
// future makes the others' caches refuse only while Redis itself still holds that state. A key
// that Redis loses after the refusal (FLUSHALL, a restart without persistence, a failover to an
// empty replica, a DEL from outside) is not seen: its entry refuses, until the entry's retry
// time, requests that Redis would now admit as a new key's; nothing is admitted past the limit.
// WithDenyCacheMaxAge bounds how long such an entry (and one another host's Reset made stale)
// goes on refusing, for one round trip per blocked key each time it ends. Under client time, a
// take by another host whose clock is ahead may move the key's state on (into a later window, or
// a bucket refilled to that host's time); this host's entry, made at its own time, may then
// refuse what Redis would admit at this host's time, for at most the hosts' clock difference and
// never past the entry's retry time.
// The cache keeps at most WithDenyCache keys, each in at most DenyCacheEntryBytes (long subjects are
// kept as their hash), so it is bounded in bytes (WithDenyCacheBytes) whatever clients send. It
// remembers the sliding log's refusals only up to MaxCachedLogLimit, whose whole log it keeps.
//
// # Failures
//
// Each call has a deadline (50ms by default) and is never retried: a timed out script may have
// run, or may still run. A server that stalls (stopped, or busy in a long command or DEBUG
// SLEEP) rather than goes away may still run a call it had been sent once it resumes, writing its
// units, although the failure choice has decided the request meanwhile: FailOpen's admission is
// then counted after all, FailClosed's refusal takes quota the request never used, and
// FailLocal's decision is counted twice. Each errs towards admitting less, never more. Which
// timed-out calls run is not up to the store: a call already written on an open connection runs;
// one that needed a new connection during the stall was never sent, and one held by CLIENT PAUSE
// is dropped with its connection, which the client closes on the timeout. The caller's own
// cancellation or deadline is the caller's: Take returns its context's error and the breaker does
// not count it. The failure choice is fail-open, fail-closed, or an in-process engine.Limiter as
// fallback (WithOnFailure, WithFallback).
//
// A script's time on the server grows with what it writes, and the server runs nothing else
// meanwhile. Every policy but the sliding log writes one state per key; the sliding log writes
// one entry per unit admitted. On a 2-core machine (BenchmarkLogCost) an admitted cost of 1 took
// about 30µs of the server's time, 100 about 0.2ms, 10,000 (the log's largest limit) about 14ms,
// and All over 16 such logs about 0.22s: past the 50ms default timeout, so that call fails and
// counts towards the breaker although its units are written. Where callers can ask for large
// costs, cap them, or use a policy that keeps one count per key.
//
// The circuit breaker opens when, over the last second, at least 10 calls were made to Redis and
// at least half of them failed (WithBreakerRatio), and then decides by the failure choice without
// touching Redis; after its cooldown (500ms) one call probes Redis, and a success closes it.
// TestBreakerDefaults measures the defaults against the former consecutive-failure breaker
// (threshold 1, 500ms) on a real server with 8 callers and fail-open: a single 80ms stall failed 8
// calls, which the server ran once it resumed, and did not open the default breaker, where the
// consecutive one opened after 52ms and decided 3,458 of 4,600 calls without Redis, uncounted; a real
// outage (a 1.5s SIGSTOP) opened the default breaker after 0.92s, with 145 calls having waited out
// the 50ms timeout before it did. With open-loop traffic at a steady rate, the ratio is reached
// about (window + timeout)/2 into an outage, so a stall shorter than that is ridden out. A probe
// goes through the client's pool, and go-redis's pool, once PoolSize of its dials have failed
// (counted over the client's life), dials only once a second: after an outage that refused
// connections, a probe may fail up to a second after the server is back.
// WithBreaker keeps the consecutive rule for those who want it. A failure is a call that timed
// out, could not reach Redis, or got a reply saying the server cannot serve now (BUSY, LOADING,
// MASTERDOWN, CLUSTERDOWN, TRYAGAIN, READONLY, OOM, NOREPLICAS or MISCONF, also where Redis 5
// and 6 wrap such a reply in an ERR about the script that met it); any other error reply is about
// that key alone (a key holding another type) and counts as an answer. Only the probe closes an
// open breaker: a call that went out before it opened and succeeds later leaves it open until the
// cooldown ends. While it is open, each call's error wraps ErrCircuitOpen and names the last
// failure (a store pointed at a read-only replica says READONLY on every call), and without a
// WithOnError hook each opening is logged once with log/slog's default logger.
//
// Errors that every key would get — a wrong password (WRONGPASS, NOAUTH), a missing permission
// (NOPERM, or, on Redis 7.0 and 7.1 and on Valkey, the ERR a script gets for a command or key the
// user may not use), MOVED or ASK through a client that is not a cluster client, a server without Lua
// scripting, a database number the server does not have, a client name it refuses, a master name no
// sentinel monitors, a sentinel address that is a plain server — open the breaker at once (ErrMisconfigured), and are reported once per cause to the
// WithOnError hook, or to log/slog's default logger without one. Each failed probe doubles the
// cooldown, up to 64 times, so a misconfigured fleet does not reconnect per request. The Limiter
// starts no goroutine of its own (but through a go-redis client without ContextTimeoutEnabled, or
// a wrapper, where each call runs on one that ends with it: see New); the process-wide coarse clock it
// shares runs one until the last user of it is closed.
//
// Redis replicates asynchronously: a failover, planned (SENTINEL FAILOVER, CLUSTER FAILOVER) or
// not, promotes a replica that may lack the last writes, and the units those writes counted are
// admitted again. The limiter cannot see it; WAIT-style acknowledgement per decision would cost a
// replica round trip on every call, and is not made.
//
// # Connecting
//
// NewClient builds the client from a URL: redis://, rediss://, unix://, and sentinels as
// redis-sentinel://host:port[,host:port...]/master or redis://host:port?master=name. A redis://
// URL that names one node of a Redis Cluster is discovered and gets a cluster client, so every key
// works. No error NewClient returns contains the URL's password; RedactURL prints a URL without
// it, even a malformed one.
package redisstore
