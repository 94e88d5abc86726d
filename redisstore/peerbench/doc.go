// Package peerbench measures redisstore's decisions per second on a loopback redis-server against
// the Redis-backed limiters of go-redis/redis_rate and go-chi/httprate-redis, in one run, with 1
// and 64 concurrent callers. It is its own module so that the peers never reach redisstore's
// dependencies; it is outside the workspace, so run it with GOWORK=off:
//
//	cd redisstore/peerbench && GOWORK=off go test -run '^$' -bench . -benchtime 2s
//
// The harness starts redis-server itself (see redisstore/internal/redisserver).
package peerbench
