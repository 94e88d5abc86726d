package check

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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
	if errors.Is(err, redis.Nil) && strings.Contains(err.Error(), "sentinels") {
		// go-redis's master lookup, when the sentinels it reached answered that they monitor no
		// master of that name: no script reply is ever Nil.
		return "no sentinel knows the master name the client asks for (the sentinel URL's /master, or master=): check the name the sentinels monitor"
	}
	switch {
	case HasPrefix(err, "WRONGPASS"), HasPrefix(err, "NOAUTH"), strings.HasPrefix(rerr.Error(), "ERR AUTH"):
		return "authentication failed: check the username and password the client connects with"
	case HasPrefix(err, "NOPERM"), deniedInScript(rerr.Error()):
		return "the Redis user lacks a permission the limiter needs (EVALSHA and EVAL; inside the scripts TIME, GET, SET and PTTL, and for the sliding log ZADD, ZCOUNT, ZRANGE, ZRANGEBYSCORE, ZREMRANGEBYSCORE and PEXPIRE, on the limiter's keys; DEL for Reset)"
	case !cluster && (HasPrefix(err, "MOVED") || HasPrefix(err, "ASK")):
		return "the server is a Redis Cluster node but the client is not a cluster client: use redisstore.NewClient, which discovers the cluster, or redis.NewClusterClient"
	case strings.HasPrefix(strings.ToLower(rerr.Error()), "err unknown command 'sentinel'"):
		// go-redis's master lookup asked a server that is not a sentinel.
		return "the sentinel address is a Redis server, not a sentinel: give the sentinel URL (redis-sentinel://host:port/master, or redis://host:port?master=name) a sentinel's address (port 26379 by default), or drop the master name to use the server itself"
	case strings.HasPrefix(rerr.Error(), "ERR unknown command"), HasPrefix(err, "NOSCRIPT"):
		return "the server runs no Lua scripts (EVAL and EVALSHA are unknown or disabled there)"
	case strings.HasPrefix(rerr.Error(), "ERR Client names cannot contain"):
		// The CLIENT SETNAME of a new connection, as for the database below.
		return "the server refuses the client's name (the URL's client_name): use printable ASCII characters but space"
	case strings.HasPrefix(rerr.Error(), "ERR DB index is out of range"):
		// The SELECT of a new connection: every connection fails it, and each call would dial.
		return "the server has no database of the number the client selects (the URL's /N or db=N): it has 16 unless its config says otherwise"
	}
	return ""
}

// HasPrefix reports whether err is an error reply whose code is code, as redis.HasErrorPrefix
// does, but looking through the wrapping of Reply: on Redis 5 and 6 an OOM or READONLY that a
// command met inside a script reaches the client as an ERR about the script.
func HasPrefix(err error, code string) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	return strings.HasPrefix(strings.TrimPrefix(Reply(rerr.Error()), "ERR "), code)
}

// Reply returns the error reply that msg carries: msg itself, or, where a server before Redis 7.0
// wrapped the error a command raised inside a script ("ERR Error running script (call to f_…):
// @user_script:9: @user_script: 9: -READONLY You can't write…"), the command's own reply
// ("READONLY You can't write…"). Redis 7.0 and later pass the command's reply through.
func Reply(msg string) string {
	if !strings.HasPrefix(msg, "ERR Error running script") {
		return msg
	}
	// The command's reply follows the line number of the script's call: "…: 9: -READONLY".
	if i := strings.LastIndex(msg, ": -"); i > 0 && msg[i-1] >= '0' && msg[i-1] <= '9' {
		return msg[i+len(": -"):]
	}
	return msg
}

// deniedInScript reports whether msg is how a server refuses, with an ERR reply rather than
// NOPERM, a command or key that the user may not use when a script calls it: Redis 7.0 and 7.1
// ("The user executing the script can't …") and Valkey ("ACL failure in script: …").
func deniedInScript(msg string) bool {
	return strings.HasPrefix(msg, "ERR ") &&
		(strings.Contains(msg, "The user executing the script can't") || strings.Contains(msg, "ACL failure in script"))
}

// HideKey returns msg with the mention of key replaced by named, which is key with its subject
// (a caller's key: an address, an API key) written as "…". The scripts quote a key last in their
// error messages, and Redis rewrites a reply's text (each CR and LF as a space, trailing ones
// dropped, the rest cut at a NUL), so from the key's part before its subject to the end is taken
// as the key, however the subject came out. Without that part, msg is returned unchanged.
func HideKey(msg, key, named string) string {
	stem := strings.TrimSuffix(named, "…")
	if stem == named || !strings.HasPrefix(key, stem) {
		return strings.ReplaceAll(msg, key, named)
	}
	if i := strings.Index(msg, stem); i >= 0 {
		return msg[:i] + named
	}
	return msg
}

// OwnTimeout returns err, the failure of a call made under own, the context that carries the
// limiter's deadline (WithTimeout's d; it may have been cancelled since), as a timeout error of the
// limiter's if it is a timeout (the context's deadline, or a socket's) and that deadline has
// passed; any other error, a server's reply above all, is returned unchanged, however late it is
// read. Use it only where the caller's own context is still alive.
//
// Why: the client reports a deadline as context.DeadlineExceeded or as a socket's "i/o timeout",
// whichever fired first, so the same failure would read one way or the other from call to call,
// and the first would pass errors.Is(err, context.DeadlineExceeded): the caller's own deadline,
// which it is not. The timeout keeps the client's text but wraps neither.
func OwnTimeout(err error, own context.Context, d time.Duration) error {
	if err == nil {
		return err
	}
	if dl, _ := own.Deadline(); time.Now().Before(dl) {
		return err
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return err // the server answered: about this call, not a timeout
	}
	var te interface{ Timeout() bool }
	if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &te) && te.Timeout()) {
		return err
	}
	return &timeout{d: d, said: err.Error()}
}

// timeout is OwnTimeout's error; Timeout reports true, as a net.Error's does.
type timeout struct {
	d    time.Duration
	said string
}

func (e *timeout) Error() string {
	return fmt.Sprintf("no reply within %v, the limiter's timeout (WithTimeout) (%s)", e.d, e.said)
}

func (e *timeout) Timeout() bool { return true }
