package rls_test

import (
	"testing"

	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/require"
)

// envoyproxy/ratelimit reads its files with gopkg.in/yaml.v2, a YAML 1.1 reader: yes, on and
// their kin are booleans there (quoted, they are strings). Files written for it load here alike.
// A whole float in requests_per_unit, which it refuses ("error checking config"), is read here as
// the number it is. The expected values are what yaml.v2 v2.4.0 decodes these scalars to.
func TestYAML11ValuesLoadAsEnvoyReadsThem(t *testing.T) {
	file := func(shadow, rpu string) string {
		return "domain: d\ndescriptors:\n- key: k\n  shadow_mode: " + shadow + "\n  rate_limit:\n    unit: second\n    requests_per_unit: " + rpu + "\n"
	}
	for shadow, on := range map[string]bool{
		"yes": true, "Yes": true, "YES": true, "y": true, "Y": true, "on": true, "On": true, "ON": true, "True": true,
		"no": false, "No": false, "NO": false, "n": false, "N": false, "off": false, "Off": false, "OFF": false, "false": false,
	} {
		s := serve(t, parse(t, file(shadow, "1")))
		require.Equal(t, []string{ok, ok}, outcome(s.call(t, "d", 0, desc("k", "v"))), shadow)
		want := []string{over, over}
		if on {
			want = []string{ok, ok}
		}
		require.Equal(t, want, outcome(s.call(t, "d", 0, desc("k", "v"))), "shadow_mode: %s", shadow)
	}
	for rpu, want := range map[string]uint32{"10.0": 10, "1e3": 1000, "1.5e1": 15, "1.0e+1": 10, "-0.0": 0, "4294967295.0": 4294967295,
		// Whole numbers as YAML reads them: underscores anywhere, and other bases.
		"1_000": 1000, "1__000": 1000, "1000_": 1000, "0x10": 16, "0o17": 15, "+7": 7,
		// A leading zero that is not octal: YAML reads a float, which yaml.v2 loads as 8 and 9.
		"08": 8, "09": 9, "010": 8} {
		cfg := parse(t, file("false", rpu))
		s := serve(t, cfg)
		r := s.call(t, "d", 0, desc("k", "v"))
		require.Equal(t, want, r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(), "requests_per_unit: %s", rpu)
	}
	for _, c := range []struct{ shadow, rpu, reason string }{
		{"'yes'", "1", `shadow_mode is the str "yes", want true or false`},
		{`"on"`, "1", `shadow_mode is the str "on", want true or false`},
		{"yess", "1", `shadow_mode is the str "yess", want true or false`},
		// yaml.v2 truncates a fraction; a limit of 10.5 is refused rather than made 10.
		{"no", "10.5", "requests_per_unit 10.5 in rate_limit of k is not a whole number"},
		{"no", "9.999999999999999e2", "requests_per_unit 9.999999999999999e2 in rate_limit of k is not a whole number"},
		{"no", ".inf", "requests_per_unit .inf in rate_limit of k is not a whole number"},
		{"no", ".nan", "requests_per_unit .nan in rate_limit of k is not a whole number"},
		{"no", "1e10", "requests_per_unit 1e10 in rate_limit of k is out of range [0, 4294967295]"},
		{"no", "-1.0", "requests_per_unit -1.0 in rate_limit of k is out of range [0, 4294967295]"},
		{"no", "4294967296", "requests_per_unit 4294967296 in rate_limit of k is out of range [0, 4294967295]"},
		{"no", "99999999999999999999", "requests_per_unit 99999999999999999999 in rate_limit of k is out of range [0, 4294967295]"},
		{"no", "1_00000000000000000000", "requests_per_unit 1_00000000000000000000 in rate_limit of k is out of range [0, 4294967295]"},
		{"no", "-08", "requests_per_unit -08 in rate_limit of k is out of range [0, 4294967295]"},
	} {
		cfg, err := rls.ParseConfig("test.yaml", []byte(file(c.shadow, c.rpu)))
		require.Nil(t, cfg)
		require.ErrorContains(t, err, c.reason)
	}
}

// envoyproxy/ratelimit ignores a requests_per_unit beside unlimited: true, so files written for it
// may hold one. It loads here, and the limit stays unlimited.
func TestUnlimitedIgnoresRequestsPerUnit(t *testing.T) {
	s := serve(t, parse(t, "domain: d\ndescriptors:\n- key: k\n  rate_limit:\n    unlimited: true\n    requests_per_unit: 1\n"))
	for i := range 5 {
		require.Equal(t, []string{ok, ok}, outcome(s.call(t, "d", 0, desc("k", "v"))), "call %d", i)
	}
}
