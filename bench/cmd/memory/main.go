// Command memory measures how many bytes of heap a rate limiter holds per tracked key.
//
//	go run ./cmd/memory [-keys 10000000] [-limiter slidelimit|all|NAME,...] [-bench] [-parallel N]
//
// (-limiter slidelimit-expected measures slidelimit sized up front for the keys it is given, with
// engine.WithExpectedKeys; "all" leaves it out.)
//
// For each limiter and each key count (1M and -keys, or -keys alone when it is 1M or fewer) it
// starts itself again in a fresh process, builds the limiter, gives it one request for each of N
// distinct keys (IPv4-like strings of 8 to 14 bytes, made afresh for each request so that the
// program itself keeps none of them), runs runtime.GC twice, and divides the growth of the live
// heap (MemStats.HeapAlloc) by N. A limiter that keeps the key string pays for it; one that keeps
// only a hash does not.
//
// Every limiter gets the sliding counter's limit of 2^20 per window (slidelimit's one-word cell;
// see docs/design.md ("The hot path")) with a ten-minute window, so that no limiter forgets a key before it is
// counted. -limiter all measures every limiter in the bench/peers package except the floor, whose
// array is sized to the next power of two and holds no keys. -bench prints Go benchmark-format
// lines (BenchmarkMemory/limiter=NAME/keys=N 1 X bytes/key ...) for benchstat and cmd/charts.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/slidelimit/slidelimit/bench/peers"
	"github.com/slidelimit/slidelimit/engine"
)

// result is what one child process measures, sent to the parent as one JSON line.
type result struct {
	Limiter    string  `json:"limiter"`
	Keys       int     `json:"keys"`
	HeapBytes  int64   `json:"heapBytes"`
	BytesPerK  float64 `json:"bytesPerKey"`
	Tracked    int64   `json:"tracked,omitempty"`    // slidelimit: Len() after the inserts
	TableBytes uint64  `json:"tableBytes,omitempty"` // slidelimit: Stats.TableBytes
	Shards     int     `json:"shards,omitempty"`
	InsertNs   float64 `json:"insertNsPerKey"`
}

const (
	limit  = 1 << 20
	window = 10 * time.Minute
)

func main() {
	keys := flag.Int("keys", 10_000_000, "number of distinct keys (also measured at 1M when larger)")
	which := flag.String("limiter", peers.Slidelimit, `limiter to measure: a name, a comma-separated list, or "all"`)
	bench := flag.Bool("bench", false, "print Go benchmark-format lines instead of a table")
	parallel := flag.Int("parallel", 1, "measure this many limiters at once, each in its own process")
	child := flag.Bool("child", false, "internal: measure one limiter at -keys in this process and print JSON")
	flag.Parse()

	if flag.NArg() > 0 { // the flag package stops at the first non-flag: every flag after it is lost
		usage(fmt.Errorf("unexpected argument %q", flag.Arg(0)))
	}
	if *keys < 1 || *keys > peers.MaxKeys {
		usage(fmt.Errorf("-keys = %d out of range [1, %d]", *keys, peers.MaxKeys))
	}
	if *parallel < 1 {
		usage(fmt.Errorf("-parallel = %d: must be at least 1", *parallel))
	}
	if *child {
		r, err := measure(*which, *keys)
		if err != nil {
			fail(err)
		}
		if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
			fail(err)
		}
		return
	}

	names, err := limiters(*which)
	if err != nil {
		usage(err)
	}
	counts := []int{*keys}
	if *keys > 1_000_000 {
		counts = []int{1_000_000, *keys}
	}
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	type job struct {
		name string
		n    int
	}
	var jobs []job
	for _, name := range names {
		for _, n := range counts {
			jobs = append(jobs, job{name, n})
		}
	}
	// Each job runs in its own process, so running a few at once changes no figure (only the
	// insert times, which are shown for information); the results keep the jobs' order.
	results := make([]result, len(jobs))
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, *parallel)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i], errs[i] = runChild(self, j.name, j.n)
			if errs[i] == nil && !*bench {
				fmt.Fprintf(os.Stderr, "measured %s at %d keys\n", j.name, j.n)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fail(err)
	}
	if *bench {
		printBench(results)
	} else {
		printTable(results)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "memory:", err)
	os.Exit(1)
}

// usage reports a bad command line: exit 2, as flag's own errors.
func usage(err error) {
	fmt.Fprintln(os.Stderr, "memory:", err)
	os.Exit(2)
}

func limiters(which string) ([]string, error) {
	all := slices.DeleteFunc(peers.Names(), func(n string) bool { return n == peers.Floor })
	if which == "all" {
		return all, nil
	}
	names := strings.Split(which, ",")
	known := append(peers.Names(), peers.Variants()...)
	for _, n := range names {
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("-limiter: unknown limiter %q (known: all, %s)", n, strings.Join(known, ", "))
		}
	}
	return names, nil
}

// runChild measures one limiter at n keys in a fresh process, so that no limiter's garbage,
// heap fragmentation or background goroutines touch another's figure.
func runChild(self, name string, n int) (result, error) {
	cmd := exec.Command(self, "-child", "-limiter", name, "-keys", fmt.Sprint(n))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("measuring %s at %d keys: %v: %s", name, n, err, strings.TrimSpace(errOut.String()))
	}
	var r result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return result{}, fmt.Errorf("measuring %s at %d keys: bad child output %q: %v", name, n, out.String(), err)
	}
	return r, nil
}

func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC() // a second cycle frees what the first one's finalizers released
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func measure(name string, n int) (result, error) {
	base := liveHeap()
	l, err := peers.New(name, peers.Config{Limit: limit, Window: window, Keys: n})
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	var buf []byte
	for i := range uint32(n) {
		buf = peers.AppendKey(buf[:0], i)
		if !l.Allow(string(buf)) {
			return result{}, fmt.Errorf("%s refused key %d's first request", name, i)
		}
	}
	insert := time.Since(start)
	heap := liveHeap() - base
	r := result{
		Limiter:   name,
		Keys:      n,
		HeapBytes: heap,
		BytesPerK: float64(heap) / float64(n),
		InsertNs:  float64(insert.Nanoseconds()) / float64(n),
	}
	if sl, ok := l.(interface{ Stats(*engine.Stats) }); ok {
		var s engine.Stats
		sl.Stats(&s)
		r.Tracked, r.TableBytes, r.Shards = s.Keys, s.TableBytes, s.Shards
		if s.Keys != int64(n) {
			return result{}, fmt.Errorf("%s tracks %d keys after %d distinct requests", name, s.Keys, n)
		}
	}
	runtime.KeepAlive(l)
	return r, errors.Join(l.Close())
}

func keysLabel(n int) string {
	switch {
	case n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func printTable(rs []result) {
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	fmt.Fprintf(w, "# heap after runtime.GC per tracked key; limit 2^20 per %v; %s %s/%s\n",
		window, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	width := len("limiter")
	for _, r := range rs {
		width = max(width, len(r.Limiter))
	}
	fmt.Fprintf(w, "%-*s %10s %12s %10s %14s %10s\n", width, "limiter", "keys", "heap MiB", "bytes/key", "table B/key", "insert ns")
	for _, r := range rs {
		table := "-"
		if r.TableBytes > 0 {
			table = fmt.Sprintf("%.1f", float64(r.TableBytes)/float64(r.Keys))
		}
		fmt.Fprintf(w, "%-*s %10d %12.1f %10.1f %14s %10.0f\n",
			width, r.Limiter, r.Keys, float64(r.HeapBytes)/(1<<20), r.BytesPerK, table, r.InsertNs)
	}
}

// printBench writes one benchmark-format line per measurement; benchstat and cmd/charts read
// them (the iteration count is 1: each is one measurement).
func printBench(rs []result) {
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for _, r := range rs {
		fmt.Fprintf(w, "BenchmarkMemory/limiter=%s/keys=%s 1 %.2f bytes/key %d heap-B\n",
			r.Limiter, keysLabel(r.Keys), r.BytesPerK, r.HeapBytes)
	}
}
