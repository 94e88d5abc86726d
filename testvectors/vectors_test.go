package testvectors_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/testvectors"
	"github.com/slidelimit/slidelimit/testvectors/internal/cases"
)

func dataFiles(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("data", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 7 {
		t.Fatalf("found %d vector files in data/, want one per policy (7)", len(paths))
	}
	return paths
}

// TestReferenceAgreesWithVectors replays every file on the reference model, which produced the
// expectations: a failure means a file was edited by hand or the model changed.
func TestReferenceAgreesWithVectors(t *testing.T) {
	for _, path := range dataFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := testvectors.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			passed, failed, err := testvectors.RunReference(f, &out)
			if err != nil || failed != 0 || passed == 0 {
				t.Fatalf("passed %d, failed %d, err %v\n%s", passed, failed, err, out.String())
			}
			if want := cases.MinCases[f.ID()]; len(f.Cases) < want {
				t.Errorf("%d cases, want at least %d", len(f.Cases), want)
			}
		})
	}
}

// TestVectorsAreUpToDate regenerates every file in memory and requires the committed one to be
// identical, so that a change to the case definitions cannot be forgotten in the data.
func TestVectorsAreUpToDate(t *testing.T) {
	files, err := cases.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		var want bytes.Buffer
		if err := testvectors.Encode(&want, f); err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(filepath.Join("data", f.ID()+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(have, want.Bytes()) {
			t.Errorf("data/%s.json is not what the generator writes: run go run ./testvectors/internal/gen -out testvectors/data", f.ID())
		}
	}
}

// TestEngineAgreesWithVectors runs every file through the real engine. A policy is skipped only
// while engine.New returns an error for it.
func TestEngineAgreesWithVectors(t *testing.T) {
	for _, path := range dataFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := testvectors.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			p, err := testvectors.PolicyFor(f.ID(), f.Cases[0].Params)
			if err != nil {
				t.Fatal(err)
			}
			lim, err := engine.New(p, engine.WithClock(clock.NewManual(0)), engine.WithEviction(false))
			if err != nil {
				t.Fatalf("engine.New refuses %s, which it must support: %v", f.ID(), err)
			}
			if err := lim.Close(); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			passed, failed, err := testvectors.Run(f, &out)
			if err != nil || failed != 0 {
				t.Fatalf("passed %d, failed %d, err %v\n%s", passed, failed, err, out.String())
			}
		})
	}
}

// TestFailureLines checks the runner's report on a file whose expectations are wrong.
func TestFailureLines(t *testing.T) {
	f, err := testvectors.Parse("wrong.json", []byte(`{"policy": "rate-limiter/sliding-log", "version": 1, "cases": [
	  {"name": "log", "params": {"limit": 1, "windowMs": 100}, "seed": 1, "steps": [
	    {"call": "allow", "args": [4, 1, 50], "expect": false},
	    {"call": "retryAfter", "args": [4, 60], "expect": 90},
	    {"call": "countOf", "args": [4, 60], "expect": 1},
	    {"call": "stateSize", "args": [], "expect": 2}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	passed, failed, err := testvectors.RunReference(f, &out)
	// Step 1 passes (50 + 100 - 60 = 90) and step 2 too (one request in (−40, 60]).
	want := `wrong.json: case "log" step 0: allow(4, 1, 50): expected false, got true
wrong.json: case "log" step 3: stateSize(): expected 2, got 1
`
	if err != nil || passed != 2 || failed != 2 || out.String() != want {
		t.Fatalf("passed %d, failed %d, err %v, output:\n%s\nwant:\n%s", passed, failed, err, out.String(), want)
	}
}

func TestRunRefusesAnUncheckedFile(t *testing.T) {
	f := &testvectors.File{Policy: "rate-limiter/gcra", Version: 1, Cases: []testvectors.Case{{
		Name: "x", Params: map[string]int64{"ratePerSec": 1, "burst": 1},
		Steps: []testvectors.Step{{Call: "take", Args: []int64{1}, Expect: testvectors.Int(0)}},
	}}}
	if _, _, err := testvectors.Run(f, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), `unknown call "take"`) {
		t.Fatalf("Run: err = %v", err)
	}
	f.Policy = "rate-limiter/token-bucket-2"
	if _, _, err := testvectors.RunReference(f, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "unknown policy id") {
		t.Fatalf("RunReference: err = %v", err)
	}
}

func TestEncodeRoundTrips(t *testing.T) {
	path := filepath.Join("data", "gcra.json")
	f, err := testvectors.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := testvectors.Encode(&b, f); err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), have) {
		t.Fatal("Load then Encode changed the file")
	}
}

// TestRunReportsEngineDisagreement runs a sliding-counter case with one wrong expectation through
// the engine: the floor makes the estimate 4 + 1 = 5 one ms into the next window, not 4.
func TestRunReportsEngineDisagreement(t *testing.T) {
	f, err := testvectors.Parse("sc.json", []byte(`{"policy": "rate-limiter/sliding-counter", "version": 1, "cases": [
	  {"name": "floor", "params": {"limit": 5, "windowMs": 1000}, "seed": 1, "steps": [
	    {"call": "allow", "args": [1, 5, 1700000000000], "expect": true},
	    {"call": "allow", "args": [1, 1, 1700000001001], "expect": true},
	    {"call": "estimateOf", "args": [1, 1700000001001], "expect": 4},
	    {"call": "retryAfter", "args": [2, 1700000001001], "expect": 0},
	    {"call": "stateSize", "args": [], "expect": 1}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	passed, failed, err := testvectors.Run(f, &out)
	want := `sc.json: case "floor" step 2: estimateOf(1, 1700000001001): expected 4, got 5` + "\n"
	if err != nil || passed != 4 || failed != 1 || out.String() != want {
		t.Fatalf("passed %d, failed %d, err %v, output %q, want %q", passed, failed, err, out.String(), want)
	}
}

// TestRunCountsARefusedConfigurationAsFailures uses a sliding log longer than the engine's
// policy.MaxLogLimit: the registry's range allows it, the engine refuses it, and every step of
// the case fails with engine.New's reason while the next case still runs.
func TestRunCountsARefusedConfigurationAsFailures(t *testing.T) {
	f, err := testvectors.Parse("log.json", []byte(`{"policy": "rate-limiter/sliding-log", "version": 1, "cases": [
	  {"name": "too-long", "params": {"limit": 20000, "windowMs": 1000}, "seed": 1, "steps": [
	    {"call": "allow", "args": [1, 1, 0], "expect": true},
	    {"call": "stateSize", "args": [], "expect": 1}]},
	  {"name": "fine", "params": {"limit": 1, "windowMs": 1000}, "seed": 1, "steps": [
	    {"call": "stateSize", "args": [], "expect": 0}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	passed, failed, err := testvectors.Run(f, &out)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err != nil || failed < 2 || len(lines) < 2 || !strings.Contains(lines[0], `case "too-long" step 0: allow(1, 1, 0): expected true, got no result (engine.New: `) ||
		!strings.Contains(lines[1], `case "too-long" step 1: stateSize(): expected 1, got no result (engine.New: `) {
		t.Fatalf("passed %d, failed %d, err %v, output:\n%s", passed, failed, err, out.String())
	}
}
