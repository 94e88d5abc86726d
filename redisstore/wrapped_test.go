package redisstore

import "testing"

// scriptReply is an error reply as go-redis hands it back: the line after the '-'.
type scriptReply string

func (r scriptReply) Error() string { return string(r) }
func (scriptReply) RedisError()     {}

// On Redis 5 and 6 a READONLY or OOM met by redis.call inside a script comes back wrapped in an
// ERR about the script; it still says the server cannot serve now, and must count against the
// breaker rather than as an answer about one key.
func TestWrappedScriptErrorsAreFailures(t *testing.T) {
	const wrap = "ERR Error running script (call to f_9207999741a0bc6cb9e021eb8497188f70d65ec0): @user_script:46: @user_script: 46: -"
	for _, c := range []struct {
		msg      string
		answered bool
	}{
		{wrap + "READONLY You can't write against a read only replica.", false},
		{wrap + "OOM command not allowed when used memory > 'maxmemory'.", false},
		{wrap + "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.", false},
		{"READONLY You can't write against a read only replica.", false},
		{wrap + "WRONGTYPE Operation against a key holding the wrong kind of value", true},
		{"WRONGTYPE Operation against a key holding the wrong kind of value", true},
	} {
		if got := serverAnswered(scriptReply(c.msg)); got != c.answered {
			t.Errorf("serverAnswered(%q) = %v, want %v", c.msg, got, c.answered)
		}
	}
}
