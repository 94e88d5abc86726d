package check

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// EveryKey returns, for an error reply that every key would get, what is wrong in words; ""
// for anything else: redisstore opens its breaker at once on such an error, and batched goes
// offline, since asking again per request would never succeed. MOVED and ASK reach the limiter only from a client that does not follow
// them, that is anything but a ClusterClient (which follows them itself, and passes one on only
// after its redirect limit, for one slot in migration).
func EveryKey(err error, cluster bool) string {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return ""
	}
	switch {
	case redis.HasErrorPrefix(err, "WRONGPASS"), redis.HasErrorPrefix(err, "NOAUTH"), strings.HasPrefix(rerr.Error(), "ERR AUTH"):
		return "authentication failed: check the username and password the client connects with"
	case redis.HasErrorPrefix(err, "NOPERM"), deniedInScript(rerr.Error()):
		return "the Redis user lacks a permission the limiter needs (EVALSHA and EVAL; inside the scripts TIME, GET, SET and PTTL, and for the sliding log ZADD, ZCOUNT, ZRANGE, ZRANGEBYSCORE, ZREMRANGEBYSCORE and PEXPIRE, on the limiter's keys; DEL for Reset)"
	case !cluster && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")):
		return "the server is a Redis Cluster node but the client is not a cluster client: use redisstore.NewClient, which discovers the cluster, or redis.NewClusterClient"
	case strings.HasPrefix(rerr.Error(), "ERR unknown command"), redis.HasErrorPrefix(err, "NOSCRIPT"):
		return "the server runs no Lua scripts (EVAL and EVALSHA are unknown or disabled there)"
	case strings.HasPrefix(rerr.Error(), "ERR DB index is out of range"):
		// The SELECT of a new connection: every connection fails it, and each call would dial.
		return "the server has no database of the number the client selects (the URL's /N or db=N): it has 16 unless its config says otherwise"
	}
	return ""
}

// deniedInScript reports whether msg is how a server refuses, with an ERR reply rather than
// NOPERM, a command or key that the user may not use when a script calls it: Redis 7.0 and 7.1
// ("The user executing the script can't …") and Valkey ("ACL failure in script: …").
func deniedInScript(msg string) bool {
	return strings.HasPrefix(msg, "ERR ") &&
		(strings.Contains(msg, "The user executing the script can't") || strings.Contains(msg, "ACL failure in script"))
}
