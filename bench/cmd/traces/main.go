// Command traces replays the policy registry's four canonical workloads through slidelimit's
// engine and prints the registry's metrics for each, so that slidelimit's decisions can be set
// beside the registry's figures. docs/testing.md says what the registry is, and restates the
// workloads and metrics.
//
//	cd bench && go run ./cmd/traces [-policy ID|all] [-json | -markdown] [-perftime 200ms]
//
// -perftime 0 skips the throughput measurement (its column prints "-"); -json, whose shape holds
// the figure, needs it positive, and -markdown ignores it.
//
// Each trace is replayed on a manual clock set to every event's time, with integer keys and cost 1,
// in the reference configuration of 100 permits per second. The metrics come from a replay with
// eviction off, so entriesTracked is every key ever seen, as the registry counts it; a second
// replay with eviction on gives the peak of live keys. Throughput is measured on further replays.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/slidelimit/slidelimit/bench/internal/trace"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks a bad command line (exit status 2, as the flag package uses).
var errUsage = errors.New("usage")

// run is the whole command, returning its exit status: 0 on success, 1 when a policy could not be
// measured (the others are still printed), 2 for a bad command line.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("traces", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyID := fs.String("policy", "sliding-counter", "registry policy id, or all")
	asJSON := fs.Bool("json", false, "print the registry's bench.json shape")
	asMarkdown := fs.Bool("markdown", false, "print a markdown table of the deterministic metrics, as docs/testing.md shows them")
	perfTime := fs.Duration("perftime", 200*time.Millisecond, "least time spent deciding per trace when measuring throughput; 0 skips the measurement (not with -json, whose shape has the figure)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // asked for: the usage is the answer
		}
		return 2
	}
	if err := checkFlags(fs, *asJSON, *asMarkdown, *perfTime); err != nil {
		fmt.Fprintf(stderr, "traces: %v\n", err)
		return 2
	}
	pols, err := selectPolicies(*policyID)
	if err != nil {
		fmt.Fprintf(stderr, "traces: %v\n", err)
		return 2
	}
	minTime := *perfTime
	if *asMarkdown {
		// The README's table holds only figures that every run reproduces exactly: no
		// throughput, and no peak of live keys (see peakLiveKeys).
		minTime = 0
	}

	traces := trace.All()
	var reports []report
	status := 0
	for _, p := range pols {
		rs, err := measure(p.pol, traces, minTime)
		if err != nil {
			fmt.Fprintf(stderr, "traces: %v\n", err)
			status = 1
		}
		reports = append(reports, report{pol: p, traces: traces, results: rs, err: err})
	}

	switch {
	case *asJSON:
		err = writeJSON(stdout, reports, *policyID == "all")
	case *asMarkdown:
		err = writeMarkdown(stdout, reports)
	default:
		err = writeText(stdout, reports)
	}
	if err != nil {
		fmt.Fprintf(stderr, "traces: %v\n", err)
		return 1
	}
	return status
}

func checkFlags(fs *flag.FlagSet, asJSON, asMarkdown bool, perfTime time.Duration) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if asJSON && asMarkdown {
		return fmt.Errorf("%w: -json and -markdown are exclusive", errUsage)
	}
	// 0 skips the measurement, which -markdown never makes; -json's registry shape needs it.
	switch {
	case perfTime < 0:
		return fmt.Errorf("%w: -perftime %v must not be negative", errUsage, perfTime)
	case perfTime == 0 && asJSON:
		return fmt.Errorf("%w: -json reports throughput (perf.opsPerSec), so -perftime must be positive", errUsage)
	}
	return nil
}

// report is one policy's figures over the traces, or the error that stopped it.
type report struct {
	pol     refPolicy
	traces  []trace.Trace
	results []result
	err     error
}

func writeText(w io.Writer, reports []report) error {
	for i, r := range reports {
		if r.err != nil {
			continue
		}
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s (%s)\n", r.pol.id, r.pol.params)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "trace\tevents\tacceptRate\tmaxBurst100ms\tjainFairness\tentriesTracked\tpeakLiveKeys\tdecisions/s")
		for j, res := range r.results {
			m := res.trace
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%d\t%d\t%s\n", r.traces[j].Name, m.Events, fmt6(m.AcceptRate),
				m.MaxBurst100ms, jain(m), m.EntriesTracked, res.peakLive, opsText(res.opsPerSec))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(w, "\npeakLiveKeys: eviction on, evicted by the background sweeper on wall-clock ticks, so it varies from run to run.")
	return err
}

func fmt6(v float64) string { return strconv.FormatFloat(v, 'f', 6, 64) }

func jain(m trace.Metrics) string {
	if !m.HasJain {
		return "-"
	}
	return fmt6(m.JainFairness)
}

func opsText(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3gM", v/1e6)
}

func writeMarkdown(w io.Writer, reports []report) error {
	var b strings.Builder
	b.WriteString("| policy | trace | acceptRate | maxBurst100ms | jainFairness | entriesTracked |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|\n")
	for _, r := range reports {
		if r.err != nil {
			msg := strings.ReplaceAll(r.err.Error(), "|", `\|`)
			fmt.Fprintf(&b, "| %s | all | not measured: %s | | | |\n", r.pol.id, msg)
			continue
		}
		for j, res := range r.results {
			m := res.trace
			fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %d |\n", r.pol.id, r.traces[j].Name,
				fmt6(m.AcceptRate), m.MaxBurst100ms, jain(m), m.EntriesTracked)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// The registry's bench.json shape. Field order follows the registry's files; the traces are a
// struct rather than a map so that they print in the registry's order, not alphabetically.
type benchJSON struct {
	Policy string     `json:"policy"`
	Traces tracesJSON `json:"traces"`
}

type tracesJSON struct {
	Steady   *traceJSON `json:"steady,omitempty"`
	Bursty   *traceJSON `json:"bursty,omitempty"`
	ManyKeys *traceJSON `json:"many-keys,omitempty"`
	Overload *traceJSON `json:"overload,omitempty"`
}

type traceJSON struct {
	Metrics metricsJSON `json:"metrics"`
	Perf    perfJSON    `json:"perf"`
	// Slidelimit holds figures the registry has no field for, outside metrics so that a reader
	// comparing metrics with the registry's sees only the registry's fields there.
	Slidelimit extraJSON `json:"slidelimit"`
}

type metricsJSON struct {
	AcceptRate     float64  `json:"acceptRate"`
	MaxBurst100ms  int      `json:"maxBurst100ms"`
	JainFairness   *float64 `json:"jainFairness,omitempty"`
	EntriesTracked int      `json:"entriesTracked"`
}

type perfJSON struct {
	OpsPerSec int64 `json:"opsPerSec"`
}

type extraJSON struct {
	PeakLiveKeys int `json:"peakLiveKeys"`
}

func toJSON(r report) benchJSON {
	out := benchJSON{Policy: "rate-limiter/" + r.pol.id}
	for j, res := range r.results {
		m := res.trace
		t := &traceJSON{
			Metrics:    metricsJSON{AcceptRate: m.AcceptRate, MaxBurst100ms: m.MaxBurst100ms, EntriesTracked: m.EntriesTracked},
			Perf:       perfJSON{OpsPerSec: int64(res.opsPerSec + 0.5)},
			Slidelimit: extraJSON{PeakLiveKeys: res.peakLive},
		}
		if m.HasJain {
			v := m.JainFairness
			t.Metrics.JainFairness = &v
		}
		switch r.traces[j].Name {
		case trace.Steady:
			out.Traces.Steady = t
		case trace.Bursty:
			out.Traces.Bursty = t
		case trace.ManyKeys:
			out.Traces.ManyKeys = t
		case trace.Overload:
			out.Traces.Overload = t
		}
	}
	return out
}

// writeJSON prints one object for one policy, and an array for -policy all. A policy that failed
// is left out (its error went to stderr and the exit status).
func writeJSON(w io.Writer, reports []report, array bool) error {
	var objs []benchJSON
	for _, r := range reports {
		if r.err == nil {
			objs = append(objs, toJSON(r))
		}
	}
	var v any = objs
	if !array {
		if len(objs) == 0 {
			return nil
		}
		v = objs[0]
	} else if objs == nil {
		v = []benchJSON{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
