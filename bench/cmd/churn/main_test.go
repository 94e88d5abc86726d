package main

import (
	"math"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestValidateNamesTheFlag(t *testing.T) {
	ok := func(keys, steady int, w, cw, q time.Duration, part string) error {
		return validate(keys, steady, w, cw, q, part)
	}
	require.NoError(t, ok(10_000_000, 300, 2*time.Second, time.Second, 10*time.Second, "both"))
	for _, c := range []struct {
		err  error
		flag string
	}{
		{ok(0, 300, time.Second, time.Second, time.Second, "1"), "-keys = 0"},
		{ok(1<<24, 300, time.Second, time.Second, time.Second, "1"), "-keys = 16777216"},
		{ok(10, 0, time.Second, time.Second, time.Second, "1"), "-steady = 0"},
		{ok(math.MaxInt-10, 300, time.Second, time.Second, time.Second, "1"), "-keys = 9223372036854775797"}, // keys+steady wraps
		{ok(10, math.MaxInt, time.Second, time.Second, time.Second, "1"), "-steady = 9223372036854775807"},
		{ok(10, 1, 50*time.Millisecond, time.Second, time.Second, "1"), "-window = 50ms"},
		{ok(10, 1, 1500*time.Microsecond*100, time.Second, time.Second, "1"), ""},
		{ok(10, 1, time.Second+time.Microsecond, time.Second, time.Second, "1"), "-window = 1.000001s"},
		{ok(10, 1, time.Second, 0, time.Second, "1"), "-cpuwindow = 0s"},
		{ok(10, 1, time.Second, time.Second, time.Millisecond, "1"), "-quiet = 1ms"},
		{ok(10, 1, time.Second, time.Second, time.Second, "3"), `-part = "3"`},
	} {
		if c.flag == "" {
			require.NoError(t, c.err)
			continue
		}
		require.ErrorContains(t, c.err, c.flag)
	}
}

// TestStrayArgument: the flag package stops at the first argument that is not a flag, so the flags
// after it would be dropped unseen; the program refuses it instead, naming it.
func TestStrayArgument(t *testing.T) {
	if os.Getenv("CHURN_MAIN") == "1" {
		os.Args = []string{"churn", "-keys", "1000", "extra", "-part", "9"}
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestStrayArgument$")
	cmd.Env = append(os.Environ(), "CHURN_MAIN=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	require.Equal(t, 2, exit.ExitCode(), "%s", out)
	require.Contains(t, string(out), `churn: unexpected argument "extra"`)
}
