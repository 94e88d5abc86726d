// Package batched is redisstore's batched fleet mode: every process decides in process, at
// in-process speed, from quota it leases from Redis, and exchanges counts with Redis in batches
// per key and window instead of once per request.
//
// Redis holds, per key, the fleet's counted units for the current aligned window and the one
// before ("win cur prev"), and forms the fleet-wide sliding estimate from them as the policy does:
//
//	estimate(t) = floor(prev × (W − elapsed) / W) + cur
//
// A process leases units with one script call that adds them to cur only if the estimate plus the
// grant stays within the limit, so a unit is counted before anything is admitted with it: as
// long as Redis answers and keeps its data, the fleet never admits more than the limit allows
// (over-admission 0). A lease belongs to one window; the first request of the next window gives
// its unused part back in the same call that leases anew (or the exchange does, one sync interval
// later at most).
//
// Decisions with local quota are one map lookup and one compare-and-swap, and allocate nothing.
// A lease is sized to about two sync intervals of the key's observed rate (a key seen for the
// first time leases only what its request needs, so a cold key costs what per-decision mode
// costs), capped at WithMaxChunk's (by default the limit divided by four times the fleet size).
// When a lease runs low, the exchange goroutine renews it, batching every key that needs it into
// one pipeline per sync interval, so hot keys keep deciding without waiting on Redis. The unused
// quota other processes hold bounds the under-admission: at most (N−1) × chunk units of
// headroom, for N live processes.
//
// Every sync interval each process also heartbeats into a sorted set of process ids scored by
// time, which gives the live fleet size N. While Redis is unreachable, a process keeps using the
// leases it holds (they are counted) and decides everything else alone, with the limit divided by
// N from its last answered heartbeat; a process that has had none (it started during the outage)
// uses WithInitialFleetSize's N, 1 by default, so give it the most processes that may run at
// once. When Redis returns each process charges what it admitted so. A server that comes back
// empty is noticed (the fleet's epoch token is gone): every process re-declares the units it
// counted in the current and previous windows, and none leases again until all live ones have had
// the time to; a process that joins after the loss holds to that quiet too, once one that knew
// the old token has recorded it (within one sync interval of the restart, or a second where
// go-redis's pool had stopped dialing: docs/fleet.md, "Outages"; before that, a joiner
// cannot tell the server from a new one). A lease checks the token too and grants nothing without it, so until the next
// heartbeat the process decides alone, as in an outage. That check needs the token and a key's
// state on one server, so it is made only through a *redis.Client on a server that is not a
// cluster node; through a cluster client, a Ring or a wrapper only the heartbeat notices, at most
// one sync interval later, and leases granted before it may admit up to one limit more per key
// in that window. On a cluster of several masters the token lives on one of them: a loss on any
// other is never noticed, and its keys may admit up to one limit more in that window. Nor is a
// failover on any topology (a sentinel's, planned or not, or a cluster's unplanned one) that
// promotes a replica lacking the last writes (about a second with a sentinel): the token was
// replicated, and the fleet may admit up to one limit more per key in that window. While the
// slot of the fleet's membership and token (hash tag {<name>:w<window ms>}) is left with some of
// those keys moved to another cluster node, every heartbeat fails and the whole fleet decides as
// in an outage (docs/fleet.md, "Outages").
//
// docs/fleet.md gives the bounds as formulas, the Redis load, and measurements.
//
// Only the sliding window counter is available in this mode. Every process of a fleet must use
// the same name, policy and prefix, and read clocks that agree to within a few milliseconds. The
// window is part of every key name (<prefix>{<hash tag>}<name>:w<window ms>:<key>), so processes
// that differ in window (midway through a rolling deploy that changes it) form separate fleets,
// each holding the key to its limit, rather than misreading each other's counts; processes that
// differ only in limit share one count, each admitting up to its own limit.
package batched
