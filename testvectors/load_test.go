package testvectors_test

import (
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/testvectors"
)

// wrap puts steps into a one-case sliding-counter file.
func wrap(steps string) string {
	return `{"policy": "rate-limiter/sliding-counter", "version": 1, "cases": [
  {"name": "c0", "params": {"limit": 5, "windowMs": 1000}, "seed": 1, "steps": [
    {"call": "allow", "args": [1, 1, 0], "expect": true},` + steps + `]}]}`
}

func TestParseRejectsMalformedFiles(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string // every one must appear in the error
	}{
		{"bad JSON", `{"policy": "rate-limiter/gcra",`, []string{"f.json", "bad JSON at line 1"}},
		{"not an object", `[1, 2]`, []string{"bad JSON", "value is a JSON array, want an object"}},
		{"args an object", `{"policy": "rate-limiter/gcra", "version": 1, "cases": [{"name": "g", "params": {"ratePerSec": 1, "burst": 1},
			"steps": [{"call": "allow", "args": {"x": 1}, "expect": true}]}]}`,
			[]string{`case 0 "g": step 0: bad JSON at line 1 column 28 of the step: args is a JSON object, want an array`}}, // just past the brace at column 27
		{"missing policy", `{"version": 1, "cases": []}`, []string{`missing "policy"`}},
		{"policy without prefix", `{"policy": "gcra", "version": 1, "cases": []}`, []string{`policy "gcra" does not start with "rate-limiter/"`}},
		{"unknown policy id", `{"policy": "rate-limiter/sliding-window", "version": 1, "cases": []}`, []string{`unknown policy id "sliding-window"`}},
		{"wrong version", `{"policy": "rate-limiter/gcra", "version": 2, "cases": []}`, []string{"version 2, want 1"}},
		{"missing cases", `{"policy": "rate-limiter/gcra", "version": 1}`, []string{`missing "cases"`}},
		{"case without name", `{"policy": "rate-limiter/gcra", "version": 1, "cases": [{"params": {"ratePerSec": 1, "burst": 1}, "steps": []}]}`,
			[]string{"case 0", `missing "name"`}},
		{"missing param", `{"policy": "rate-limiter/gcra", "version": 1, "cases": [{"name": "g", "params": {"ratePerSec": 1}, "steps": []}]}`,
			[]string{`case 0 "g"`, `missing param "burst"`}},
		{"unknown param", `{"policy": "rate-limiter/gcra", "version": 1, "cases": [{"name": "g", "params": {"ratePerSec": 1, "burst": 1, "limit": 3}, "steps": []}]}`,
			[]string{`case 0 "g"`, `unknown param "limit"`}},
		{"param out of range", `{"policy": "rate-limiter/gcra", "version": 1, "cases": [{"name": "g", "params": {"ratePerSec": 0, "burst": 1}, "steps": []}]}`,
			[]string{`case 0 "g"`, "ratePerSec = 0 out of range"}},
		{"param not an integer", `{"policy": "rate-limiter/gcra", "version": 1, "cases": [{"name": "g", "params": {"ratePerSec": 1.5, "burst": 1}, "steps": []}]}`,
			[]string{`case 0 "g"`, "param ratePerSec: 1.5 is not an integer"}},
		{"duplicate case name", `{"policy": "rate-limiter/gcra", "version": 1, "cases": [
			{"name": "g", "params": {"ratePerSec": 1, "burst": 1}, "steps": []},
			{"name": "g", "params": {"ratePerSec": 1, "burst": 1}, "steps": []}]}`,
			[]string{`case 1 "g"`, "same name as case 0"}},
		{"unknown call", wrap(`{"call": "take", "args": [1, 1, 0], "expect": true}`), []string{`case 0 "c0"`, "step 1", `unknown call "take"`}},
		{"missing call", wrap(`{"args": [1, 0], "expect": 0}`), []string{`case 0 "c0"`, "step 1", `missing "call"`}},
		{"call of another policy", wrap(`{"call": "levelOf", "args": [1, 0], "expect": 0}`),
			[]string{`case 0 "c0"`, "step 1", `call "levelOf" is not defined for policy sliding-counter`}},
		{"too few args", wrap(`{"call": "allow", "args": [1, 0], "expect": true}`), []string{`case 0 "c0"`, "step 1", "allow: 2 args, want 3"}},
		{"too many args", wrap(`{"call": "stateSize", "args": [1], "expect": 1}`), []string{"step 1", "stateSize: 1 args, want 0"}},
		{"float arg", wrap(`{"call": "retryAfter", "args": [1, 1e3], "expect": 0}`), []string{"step 1", "retryAfter: arg 1: 1e3 is not an integer"}},
		{"string arg", wrap(`{"call": "retryAfter", "args": [1, "0"], "expect": 0}`), []string{"step 1", `"0" is not an integer`}},
		{"arg past int64", wrap(`{"call": "retryAfter", "args": [1, 99999999999999999999], "expect": 0}`), []string{"step 1", "retryAfter: arg 1: 99999999999999999999 is out of the 64-bit integers' range [-9223372036854775808, 9223372036854775807]"}},
		{"negative now", wrap(`{"call": "estimateOf", "args": [1, -1], "expect": 0}`), []string{"step 1", "now = -1 out of range"}},
		{"now 2^62", wrap(`{"call": "allow", "args": [1, 1, 4611686018427387904], "expect": true}`),
			[]string{"step 1", "now = 4611686018427387904 out of range [0, 4611686018427387903]"}},
		{"time going backwards", wrap(`{"call": "allow", "args": [1, 1, 10], "expect": true}, {"call": "stateSize", "args": [], "expect": 1},
			{"call": "estimateOf", "args": [2, 9], "expect": 0}`),
			[]string{`case 0 "c0"`, "step 3", "estimateOf: now = 9 is before step 1's now = 10"}},
		{"unknown step field", wrap(`{"call": "allow", "args": [1, 1, 0], "expect": true, "expected": false}`),
			[]string{`case 0 "c0"`, "step 1", `unknown field "expected" (want call, args, expect)`}},
		{"unknown case field", `{"policy": "rate-limiter/gcra", "version": 1, "cases": [{"name": "g", "params": {"ratePerSec": 1, "burst": 1}, "steps": [], "note": "x"}]}`,
			[]string{`case 0 "g"`, `unknown field "note"`}},
		{"unknown fields", wrap(`{"call": "allow", "args": [1, 1, 0], "expect": true, "note": "y", "comment": "x"}`),
			[]string{"step 1", `unknown fields "comment", "note" (want call, args, expect)`}},
		{"newer version with its own field", `{"policy": "rate-limiter/gcra", "version": 2, "cases": [], "schema": "v2"}`, []string{"version 2, want 1"}},
		{"unknown file field", `{"policy": "rate-limiter/gcra", "version": 1, "cases": [], "comment": "x"}`,
			[]string{"f.json", `unknown field "comment"`}},
		// encoding/json keeps a repeated key's last value: the file would mean other than it reads.
		{"step field given twice", wrap(`{"call": "allow", "args": [1, 1, 0], "expect": true, "expect": false}`),
			[]string{`case 0 "c0"`, "step 1", `field "expect" given twice`}},
		{"param given twice", `{"policy": "rate-limiter/gcra", "version": 1, "cases": [{"name": "g", "params": {"ratePerSec": 1, "burst": 1, "burst": 5}, "steps": []}]}`,
			[]string{`case 0 "g"`, `param "burst" given twice`}},
		{"case field given twice", `{"policy": "rate-limiter/gcra", "version": 1, "cases": [{"name": "g", "params": {"ratePerSec": 1, "burst": 1}, "steps": [], "steps": []}]}`,
			[]string{`case 0 "g"`, `field "steps" given twice`}},
		{"file field given twice", `{"policy": "rate-limiter/gcra", "version": 1, "version": 1, "cases": []}`,
			[]string{"f.json", `field "version" given twice`}},
		{"missing expect", wrap(`{"call": "allow", "args": [1, 1, 0]}`), []string{"step 1", `allow: missing "expect"`}},
		{"bool expected for allow", wrap(`{"call": "allow", "args": [1, 1, 0], "expect": 1}`), []string{"step 1", "allow: expect 1, want a bool"}},
		{"string expected for allow", wrap(`{"call": "allow", "args": [1, 1, 0], "expect": "true"}`), []string{"step 1", `allow: expect: "true" is not true or false`}},
		{"null expected for allow", wrap(`{"call": "allow", "args": [1, 1, 0], "expect": null}`), []string{"step 1", "allow: expect: null is not true or false"}},
		{"integer expected for retryAfter", wrap(`{"call": "retryAfter", "args": [1, 0], "expect": false}`), []string{"step 1", "retryAfter: expect false, want an integer"}},
		{"step not an object", wrap(`7`), []string{`case 0 "c0"`, "step 1", "bad JSON"}},
		{"args not an array", wrap(`{"call": "allow", "args": 3, "expect": true}`), []string{"step 1", "args is a JSON number, want an array"}},
		{"name not a string", `{"policy": "rate-limiter/gcra", "version": 1, "cases": [{"name": 3}]}`, []string{"case 0", "name is a JSON number, want a string"}},
		{"version not an integer", `{"policy": "rate-limiter/gcra", "version": 1e0, "cases": []}`, []string{"version is a JSON number 1e0, want an integer in int's range, written without a fraction or exponent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := testvectors.Parse("f.json", []byte(tc.body))
			if err == nil {
				t.Fatal("Parse accepted the file")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "reference:") {
				// The file's fault, and Run never touches the reference model.
				t.Errorf("error %q blames the reference model", err)
			}
		})
	}
}

func TestParseAcceptsAWellFormedFile(t *testing.T) {
	f, err := testvectors.Parse("f.json", []byte(wrap(`{"call": "stateSize", "args": [], "expect": 1}`)))
	if err != nil {
		t.Fatal(err)
	}
	c := f.Cases[0]
	if f.ID() != "sliding-counter" || c.Name != "c0" || c.Params["limit"] != 5 || len(c.Steps) != 2 ||
		c.Steps[0].Expect != testvectors.Bool(true) || c.Steps[1].Expect != testvectors.Int(1) {
		t.Fatalf("parsed %+v", f)
	}
}

func TestLoadNamesAMissingFile(t *testing.T) {
	if _, err := testvectors.Load("no/such/file.json"); err == nil || !strings.Contains(err.Error(), "no/such/file.json") {
		t.Fatalf("err = %v", err)
	}
}
