package check

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// reply is an error reply as go-redis hands it back: the line after the '-'.
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

// wrapped is how Redis 5 and 6 report an error that redis.call met inside a script.
func wrapped(inner string) reply {
	return reply("ERR Error running script (call to f_9207999741a0bc6cb9e021eb8497188f70d65ec0): @user_script:46: @user_script: 46: -" + inner)
}

func TestHasPrefixLooksThroughScriptWrapping(t *testing.T) {
	for _, c := range []struct {
		err  error
		code string
		want bool
	}{
		{reply("READONLY You can't write against a read only replica."), "READONLY", true},
		{wrapped("READONLY You can't write against a read only replica."), "READONLY", true},
		{wrapped("OOM command not allowed when used memory > 'maxmemory'."), "OOM", true},
		{fmt.Errorf("redisstore: %w", wrapped("MISCONF Redis is configured to save RDB snapshots")), "MISCONF", true},
		{reply("ERR AUTH failed"), "AUTH", true}, // a leading ERR is not the code, as in go-redis
		{wrapped("WRONGTYPE Operation against a key holding the wrong kind of value"), "READONLY", false},
		// A Lua error of the script itself names no command's reply.
		{reply("ERR Error running script (call to f_1): @user_script:12: user_script:12: attempt to compare nil with number"), "READONLY", false},
		{errors.New("READONLY not a reply"), "READONLY", false},
		// A dash after something other than the call's line number is not a command's reply.
		{reply("ERR Error running script (call to f_1): @user_script:3: user_script:3: bad argument: -READONLY"), "READONLY", false},
	} {
		if got := HasPrefix(c.err, c.code); got != c.want {
			t.Errorf("HasPrefix(%q, %q) = %v, want %v", c.err, c.code, got, c.want)
		}
	}
}

func TestEveryKeyLooksThroughScriptWrapping(t *testing.T) {
	err := wrapped("NOPERM this user has no permissions to run the 'time' command or its subcommand")
	if hint := EveryKey(err, false); hint == "" {
		t.Errorf("EveryKey(%q) = \"\", want the missing permission named", err)
	}
	if hint := EveryKey(wrapped("WRONGTYPE Operation against a key holding the wrong kind of value"), false); hint != "" {
		t.Errorf("EveryKey(WRONGTYPE) = %q, want \"\": it is about one key", hint)
	}
}

func TestHideKey(t *testing.T) {
	for _, c := range []struct{ msg, key, want string }{
		{"malformed state at sl:{x}n:SECRET", "sl:{x}n:SECRET", "malformed state at sl:{x}n:…"},
		{"malformed state at sl:{x}n:SECRET  x", "sl:{x}n:SECRET\r\nx", "malformed state at sl:{x}n:…"}, // Redis writes CR and LF as spaces
		{"malformed state at sl:{x}n:SECRET x", "sl:{x}n:SECRET\nx", "malformed state at sl:{x}n:…"},
		{"WRONGTYPE Operation against a key", "sl:{x}n:SECRET", "WRONGTYPE Operation against a key"},
		{"malformed state at sl:{x}n:  SECRET", "sl:{x}n:\r\nSECRET\r\n", "malformed state at sl:{x}n:…"}, // trailing CR LF dropped
		{"malformed state at sl:{x}n:SECRET", "sl:{x}n:SECRET\x00tail", "malformed state at sl:{x}n:…"},   // cut at the NUL
	} {
		if got := HideKey(c.msg, c.key, "sl:{x}n:…"); got != c.want {
			t.Errorf("HideKey(%q, %q) = %q, want %q", c.msg, c.key, got, c.want)
		}
	}
}

// netTimeout is a socket's timeout, as a net.Error reports it.
type netTimeout struct{}

func (netTimeout) Error() string { return "read tcp: i/o timeout" }
func (netTimeout) Timeout() bool { return true }

// OwnTimeout rewrites only timeouts, and only past the deadline: a server's reply, or another
// failure, stays what it is however late it is read.
func TestOwnTimeout(t *testing.T) {
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	future, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel()
	refused := errors.New("dial tcp: connection refused")
	for _, c := range []struct {
		err      error
		own      context.Context
		rewrites bool
	}{
		{context.DeadlineExceeded, past, true},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), past, true},
		{netTimeout{}, past, true},
		{context.DeadlineExceeded, future, false},
		{reply("WRONGTYPE Operation against a key holding the wrong kind of value"), past, false},
		{refused, past, false},
		{nil, past, false},
	} {
		got := OwnTimeout(c.err, c.own, 50*time.Millisecond)
		var te *timeout
		if errors.As(got, &te) != c.rewrites {
			t.Errorf("OwnTimeout(%v, past %v) = %v; rewritten: %v, want %v", c.err, c.own == past, got, !c.rewrites, c.rewrites)
		}
		if c.rewrites && (errors.Is(got, context.DeadlineExceeded) || !strings.Contains(got.Error(), "no reply within 50ms")) {
			t.Errorf("OwnTimeout(%v) = %v: wraps the deadline, or does not say the limiter's timeout", c.err, got)
		}
		if !c.rewrites && got != c.err {
			t.Errorf("OwnTimeout(%v) = %v, want it unchanged", c.err, got)
		}
	}
}
