package main

import (
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/policy"
)

// FuzzParseRate checks that a rate -rate accepts is in the policies' ranges, reads back from its
// own String as itself, and builds a policy under every -policy, or is refused with an error;
// and that no input panics.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"10/1s", "1000/1h", "5/90s", "10r/s", "10r/m", "1/1d", "1/60", "0/1s",
		"4294967295/1193h2m47.296s", "1/0.5ms", "1/-1s", "1/99999999999d", " 7 /1m", "x/y"} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, fleet int) {
		r, err := parseRate(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), `"`) {
				t.Fatalf("%q: error %q does not quote the rate", s, err)
			}
			return
		}
		if r.limit < 1 || r.limit > policy.MaxLimit || checkWindow(r.window) != nil {
			t.Fatalf("%q accepted as %d per %v", s, r.limit, r.window)
		}
		again, err := parseRate(r.String())
		if err != nil || again != r {
			t.Fatalf("%q gave %v, which reads back as %v, %v", s, r, again, err)
		}
		fleet = 1 + min(max(fleet, 0), 1000)
		for _, id := range policyIDs {
			p, local, _, err := buildRate(id, r, fleet)
			if err == nil && (p == nil || local == nil) {
				t.Fatalf("%s %v: no policy and no error", id, r)
			}
		}
	})
}

// FuzzParseDuration checks that parseDuration agrees with time.ParseDuration wherever that one
// succeeds, reads a leading Nd as N×24 hours (N in part too, and smaller units after it), and
// never panics.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"0", "-0", "60", "1.5", "500ms", "1h30m", "1d", "1.5d", "0.1d", "1d12h", "-2d30m", ".5d", "2562047h", "2562048h", "106751d", "106752d", "-1d", "d", ""} {
		f.Add(s)
	}
	days := regexp.MustCompile(`^([-+]?)([0-9]*)(?:\.([0-9]*))?d(.*)$`)
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDuration(s)
		if want, werr := time.ParseDuration(s); werr == nil && (err != nil || d != want) {
			t.Fatalf("%q: %v, %v; time.ParseDuration says %v", s, d, err, want)
		}
		m := days.FindStringSubmatch(s)
		if err != nil || m == nil {
			return
		}
		// The days written as hours, worked out exactly (24 times a decimal has no more
		// places than the decimal), then read by time.ParseDuration with the rest.
		n, ok := new(big.Rat).SetString(m[2] + "." + m[3] + "0")
		if !ok {
			t.Fatalf("%q: accepted as %v, with days %q that are no number", s, d, m[2]+"."+m[3])
		}
		hours := n.Mul(n, big.NewRat(24, 1)).FloatString(len(m[3]))
		want, werr := time.ParseDuration(m[1] + hours + "h" + m[4])
		if werr != nil || d != want {
			t.Fatalf("%q: %v; as hours, %sh%s, it is %v, %v", s, d, m[1]+hours, m[4], want, werr)
		}
	})
}

// FuzzParseConfig offers the proxy's -config parser any file. A refusal is one line without Go
// type names; every rule of an accepted file matches what it says, and each of its rates builds
// its policy or is refused with an error.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"rules:\n  - name: a\n    methods: [post]\n    paths: [/x]\n    rates: [1/1s]\n",
		"exempt:\n  paths: [/health]\n  cidrs: [10.0.0.0/8]\nrules:\n  - name: api\n    rates: [10/1s, 1000/1h]\n    policy: gcra\n    key: header:X-Key\n",
		"rules:\n  - &r {name: a, rates: [1/1s]}\n  - *r\n",
		"rules: [{name: a, rates: [1/60]}]\n", "---\n---\nrules: []\n", "rules:\n  - name: a\n    rates: [3/7s]\n    policy: leaky-bucket\n",
	} {
		f.Add([]byte(s))
	}
	def := ruleSpec{name: "default", rates: []rate{{100, time.Minute}}, policyID: "sliding-counter", key: "ip"}
	f.Fuzz(func(t *testing.T, b []byte) {
		spec, err := parseConfig(b, def)
		if err != nil {
			if msg := err.Error(); msg == "" || strings.Contains(msg, "\n") || strings.Contains(msg, "main.") {
				t.Fatalf("%q: error %q", b, msg)
			}
			return
		}
		if n := len(spec.rules); n == 0 || spec.rules[n-1].name != def.name {
			t.Fatalf("%q: the default rule is not last: %+v", b, spec.rules)
		}
		for _, rs := range spec.rules {
			if len(rs.rates) == 0 || checkKey(rs.key) != nil {
				t.Fatalf("%q: rule %+v accepted", b, rs)
			}
			for _, p := range rs.prefixes {
				if !rs.matches("GET", p, true) && rs.methods == nil {
					t.Fatalf("%q: rule %s does not match its own path %q", b, rs.name, p)
				}
			}
			for _, r := range rs.rates {
				if p, _, _, err := buildRate(rs.policyID, r, 2); err == nil && p == nil {
					t.Fatalf("%q: %s %v: no policy and no error", b, rs.policyID, r)
				}
			}
		}
	})
}
