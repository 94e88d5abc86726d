package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/bench/internal/trace"
)

func TestUnknownPolicyIsNamed(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"-policy", "sliding-countr"}, &out, &errs); code != 2 {
		t.Fatalf("exit status %d, want 2", code)
	}
	if !strings.Contains(errs.String(), `"sliding-countr"`) || !strings.Contains(errs.String(), "sliding-counter") {
		t.Fatalf("stderr %q should name the bad id and the valid ones", errs.String())
	}
	if out.Len() != 0 {
		t.Fatalf("stdout %q, want nothing", out.String())
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-json", "-markdown"},
		{"-perftime", "-1ms"},
		{"-json", "-perftime", "0s"},
		{"extra"},
		{"-nosuchflag"},
	} {
		var out, errs bytes.Buffer
		if code := run(args, &out, &errs); code != 2 {
			t.Errorf("%v: exit status %d, want 2 (stderr %q)", args, code, errs.String())
		}
	}
}

// -h asks for the usage: it is printed, exit 0.
func TestHelpIsNotAnError(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"-h"}, &out, &errs); code != 0 || !strings.Contains(errs.String(), "-policy") {
		t.Fatalf("-h: exit status %d, stderr %q", code, errs.String())
	}
}

func TestSelectPolicies(t *testing.T) {
	all, err := selectPolicies("all")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range all {
		ids = append(ids, p.id)
		if p.pol.ID() != p.id {
			t.Errorf("policy listed as %q has ID %q", p.id, p.pol.ID())
		}
		if err := p.pol.Validate(); err != nil {
			t.Errorf("%s: reference configuration invalid: %v", p.id, err)
		}
	}
	want := "sliding-counter sliding-log fixed-window token-bucket gcra leaky-bucket dual-bucket"
	if got := strings.Join(ids, " "); got != want {
		t.Fatalf("all = %s, want %s", got, want)
	}
	one, err := selectPolicies("gcra")
	if err != nil || len(one) != 1 || one[0].id != "gcra" {
		t.Fatalf("selectPolicies(gcra) = %v, %v", one, err)
	}
}

// fakeReport is a report with hand-picked figures, to pin the output formats without the engine.
func fakeReport(t *testing.T) report {
	t.Helper()
	p, err := selectPolicies("sliding-counter")
	if err != nil {
		t.Fatal(err)
	}
	traces := []trace.Trace{{Name: trace.Steady}, {Name: trace.Bursty}, {Name: trace.ManyKeys}, {Name: trace.Overload}}
	return report{pol: p[0], traces: traces, results: []result{
		{trace: trace.Metrics{Events: 10, AcceptRate: 1, MaxBurst100ms: 3, EntriesTracked: 1}, peakLive: 1, opsPerSec: 1234567.4},
		{trace: trace.Metrics{Events: 20, AcceptRate: 0.5, MaxBurst100ms: 100, EntriesTracked: 1}, peakLive: 1, opsPerSec: 2e6},
		{trace: trace.Metrics{Events: 30, AcceptRate: 0.987654, MaxBurst100ms: 60, JainFairness: 0.123457, HasJain: true, EntriesTracked: 7278}, peakLive: 300, opsPerSec: 3e6},
		{trace: trace.Metrics{Events: 40, AcceptRate: 0.333333, MaxBurst100ms: 101, EntriesTracked: 1}, peakLive: 1, opsPerSec: 4e6},
	}}
}

func TestJSONShape(t *testing.T) {
	var b bytes.Buffer
	if err := writeJSON(&b, []report{fakeReport(t)}, false); err != nil {
		t.Fatal(err)
	}
	want := `{
  "policy": "rate-limiter/sliding-counter",
  "traces": {
    "steady": {
      "metrics": {
        "acceptRate": 1,
        "maxBurst100ms": 3,
        "entriesTracked": 1
      },
      "perf": {
        "opsPerSec": 1234567
      },
      "slidelimit": {
        "peakLiveKeys": 1
      }
    },
    "bursty": {
      "metrics": {
        "acceptRate": 0.5,
        "maxBurst100ms": 100,
        "entriesTracked": 1
      },
      "perf": {
        "opsPerSec": 2000000
      },
      "slidelimit": {
        "peakLiveKeys": 1
      }
    },
    "many-keys": {
      "metrics": {
        "acceptRate": 0.987654,
        "maxBurst100ms": 60,
        "jainFairness": 0.123457,
        "entriesTracked": 7278
      },
      "perf": {
        "opsPerSec": 3000000
      },
      "slidelimit": {
        "peakLiveKeys": 300
      }
    },
    "overload": {
      "metrics": {
        "acceptRate": 0.333333,
        "maxBurst100ms": 101,
        "entriesTracked": 1
      },
      "perf": {
        "opsPerSec": 4000000
      },
      "slidelimit": {
        "peakLiveKeys": 1
      }
    }
  }
}
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestJSONArrayForAll(t *testing.T) {
	var b bytes.Buffer
	failed := report{pol: refPolicy{id: "gcra"}, err: errTest}
	if err := writeJSON(&b, []report{fakeReport(t), failed}, true); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	if !strings.HasPrefix(s, "[\n  {\n    \"policy\": \"rate-limiter/sliding-counter\"") || strings.Contains(s, "gcra") {
		t.Fatalf("want an array holding only the measured policy, got\n%s", s)
	}
	b.Reset()
	if err := writeJSON(&b, []report{failed}, true); err != nil {
		t.Fatal(err)
	}
	if b.String() != "[]\n" {
		t.Fatalf("nothing measured: got %q, want an empty array", b.String())
	}
}

var errTest = bytes.ErrTooLarge

func TestMarkdown(t *testing.T) {
	var b bytes.Buffer
	failed := report{pol: refPolicy{id: "gcra"}, err: errors.New("policy gcra: not | supported")}
	if err := writeMarkdown(&b, []report{fakeReport(t), failed}); err != nil {
		t.Fatal(err)
	}
	want := `| policy | trace | acceptRate | maxBurst100ms | jainFairness | entriesTracked |
|---|---|--:|--:|--:|--:|
| sliding-counter | steady | 1.000000 | 3 | - | 1 |
| sliding-counter | bursty | 0.500000 | 100 | - | 1 |
| sliding-counter | many-keys | 0.987654 | 60 | 0.123457 | 7278 |
| sliding-counter | overload | 0.333333 | 101 | - | 1 |
| gcra | all | not measured: policy gcra: not \| supported | | | |
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestText(t *testing.T) {
	var b bytes.Buffer
	if err := writeText(&b, []report{fakeReport(t)}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 8 || !strings.HasPrefix(lines[7], "peakLiveKeys: ") || lines[0] != "sliding-counter (limit=100 window=1000ms)" {
		t.Fatalf("got\n%s", b.String())
	}
	for i, want := range [][]string{
		{"steady", "10", "1.000000", "3", "-", "1", "1", "1.23M"},
		{"many-keys", "30", "0.987654", "60", "0.123457", "7278", "300", "3M"},
	} {
		if got := strings.Fields(lines[2+2*i]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("line %d = %q, want fields %v", 2+2*i, lines[2+2*i], want)
		}
	}
}

// -perftime 0 skips the throughput measurement: the text output prints "-" in its column, and
// -markdown, which never measures it, accepts the flag.
func TestPerftimeZeroSkipsThroughput(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"-perftime", "0"}, &out, &errs); code != 0 {
		t.Fatalf("exit status %d, stderr %q", code, errs.String())
	}
	rows := 0
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) == 8 && f[0] != "trace" {
			rows++
			if f[7] != "-" {
				t.Errorf("decisions/s %q, want - (not measured): %q", f[7], line)
			}
		}
	}
	if rows != len(trace.All()) {
		t.Fatalf("%d rows, want %d:\n%s", rows, len(trace.All()), out.String())
	}
	out.Reset()
	if code := run([]string{"-markdown", "-perftime", "0"}, &out, &errs); code != 0 || !strings.Contains(out.String(), "|") {
		t.Fatalf("-markdown -perftime 0: exit status %d, stdout %q, stderr %q", code, out.String(), errs.String())
	}
}
