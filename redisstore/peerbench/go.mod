module github.com/slidelimit/slidelimit/redisstore/peerbench

go 1.26.0

require (
	github.com/go-chi/httprate v0.12.0
	github.com/go-chi/httprate-redis v0.5.0
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/redis/go-redis/v9 v9.23.0
	github.com/slidelimit/slidelimit v0.1.0
	github.com/slidelimit/slidelimit/redisstore v0.1.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/puzpuzpuz/xsync/v3 v3.5.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
