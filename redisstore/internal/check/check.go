// Package check holds the validation that redisstore and its batched mode share: the names that
// go into Redis keys, and whether a go-redis client honours a per-call deadline. Pure functions,
// safe for concurrent use.
package check

import (
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// Name validates a limiter name or key prefix for the key layout: printable ASCII without spaces
// or braces (a prefix may hold colons, a name may not), at most maxLen bytes, empty only for a
// prefix. pkg starts the error ("redisstore", "batched"), field names what was wrong.
func Name(pkg, field, v string, isPrefix bool, maxLen int) error {
	if v == "" && !isPrefix {
		return fmt.Errorf("%s: %s is empty", pkg, field)
	}
	if len(v) > maxLen {
		return fmt.Errorf("%s: %s = %q is longer than %d bytes", pkg, field, v, maxLen)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c > '~' || c == '{' || c == '}' || (c == ':' && !isPrefix) {
			// Name the character, not the byte: a byte of a multi-byte character would read as
			// another character.
			what := fmt.Sprintf("%q", rune(c))
			if c >= utf8.RuneSelf {
				if r, size := utf8.DecodeRuneInString(v[i:]); r != utf8.RuneError || size > 1 {
					what = fmt.Sprintf("%q", r)
				} else {
					what = fmt.Sprintf("byte %#02x", c)
				}
			}
			return fmt.Errorf("%s: %s = %q contains %s (allowed: printable ASCII except space and braces; no ':' in a name)", pkg, field, v, what)
		}
	}
	return nil
}

// IsNil reports whether c is nil, or a nil pointer (or other nil value) in a non-nil interface:
// a (*redis.Client)(nil) passed as a UniversalClient is not == nil, and its first method call
// would panic.
func IsNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	switch v := reflect.ValueOf(c); v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// Client refuses a go-redis client that would not honour the per-call deadline: go-redis applies
// a context's deadline to socket reads and writes only with ContextTimeoutEnabled, and otherwise
// waits ReadTimeout (3s by default). The limiters then stop waiting at the deadline all the same
// (package bound), but the call goes on until the socket's timeouts end it, holding a goroutine
// and a connection, which is how they pile up behind a paused server: so without
// ContextTimeoutEnabled both timeouts must be no longer than the limiter's. A negative timeout
// once the client has set its options up (ReadTimeout: -2 given, or any negative duration but -1)
// makes go-redis set no socket deadline at all, the context's included, so it is refused whatever
// ContextTimeoutEnabled says. A client of another type (a wrapper) is not checked.
func Client(pkg string, c redis.UniversalClient, timeout time.Duration) error {
	var ctxOK bool
	var rt, wt time.Duration
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		ctxOK, rt, wt = o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout
	case *redis.ClusterClient:
		o := c.Options()
		ctxOK, rt, wt = o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout
	case *redis.Ring:
		o := c.Options()
		ctxOK, rt, wt = o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout
	default:
		return nil
	}
	if rt < 0 || wt < 0 {
		return fmt.Errorf("%s: client Options.ReadTimeout = %v, WriteTimeout = %v (as go-redis holds them once set up: -1 given reads 0, -2 reads -1): a negative timeout (-2, or any negative duration but -1) "+
			"makes go-redis set no socket deadline, so the per-call deadline (%v) would not bound a call; use -1 (no timeout of its own) with ContextTimeoutEnabled: true", pkg, rt, wt, timeout)
	}
	if ctxOK || (rt > 0 && rt <= timeout && wt > 0 && wt <= timeout) {
		return nil
	}
	return fmt.Errorf("%s: client Options.ContextTimeoutEnabled = false with ReadTimeout = %v and WriteTimeout = %v (as go-redis holds them once set up: -1 given reads 0): "+
		"a call past its deadline (at most the limiter's timeout, %v) would hold its connection until those end it; "+
		"set ContextTimeoutEnabled: true, or both timeouts to at most %v", pkg, rt, wt, timeout, timeout)
}
