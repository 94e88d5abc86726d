module github.com/slidelimit/slidelimit/redisstore

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/puzpuzpuz/xsync/v3 v3.5.1
	github.com/redis/go-redis/v9 v9.23.0
	github.com/slidelimit/slidelimit v0.1.0
	go.uber.org/goleak v1.3.0
)

require (
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
