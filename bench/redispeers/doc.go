// Package redispeers measures redisstore's decisions per second on a loopback redis-server against
// the Redis-backed limiters of go-redis/redis_rate and go-chi/httprate-redis, in one run, with 1
// and 64 concurrent callers, and the server time each decision costs (INFO commandstats). It lives
// in the bench module so that the peers never reach redisstore's dependencies:
//
//	cd bench && go test -run '^$' -bench . -benchtime 2s ./redispeers
//	cd bench && go test -run TestServerCost -v ./redispeers
//
// The harness starts redis-server itself on a free loopback port (redisstore/redistest);
// without redis-server the package skips, and with CI=true it fails instead.
package redispeers
