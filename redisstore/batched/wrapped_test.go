package batched

import "testing"

type scriptReply string

func (r scriptReply) Error() string { return string(r) }
func (scriptReply) RedisError()     {}

// Redis 5 and 6 wrap a READONLY or OOM met inside a script in an ERR about the script: the fleet
// still cannot be counted there, so it is an outage, not an answer.
func TestWrappedScriptErrorsAreOutages(t *testing.T) {
	const wrap = "ERR Error running script (call to f_1): @user_script:3: @user_script: 3: -"
	for _, c := range []struct {
		msg    string
		outage bool
	}{
		{wrap + "READONLY You can't write against a read only replica.", true},
		{wrap + "OOM command not allowed when used memory > 'maxmemory'.", true},
		{"READONLY You can't write against a read only replica.", true},
		{wrap + "WRONGTYPE Operation against a key holding the wrong kind of value", false},
	} {
		if got := (&Limiter{cluster: true}).transportFailure(scriptReply(c.msg)); got != c.outage {
			t.Errorf("transportFailure(%q) = %v, want %v", c.msg, got, c.outage)
		}
	}
}
