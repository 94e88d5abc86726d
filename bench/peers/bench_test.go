package peers_test

import (
	"flag"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/bench/peers"
)

var (
	flagLimiters = flag.String("limiters", "", "comma-separated limiter names to run (default: all)")
	flagLimit    = flag.Int64("limit", 0, "requests per window per key for every limiter (default: the workload's)")
	flagWindow   = flag.Duration("window", 0, "window (or refill interval) for every limiter (default: the workload's)")
)

// seqLog2 makes each many-key sequence 4M requests long: about four requests per key, so a pass
// over it touches 98% of the keys.
const seqLog2 = 22

var (
	workloadsOnce sync.Once
	workloads     []workload
)

// workload is a key sequence and the limit every limiter gets for it. The limits are set so that
// every request is admitted, and so the work is the same for every limiter: an update of the
// key's state, never the cheaper refusal; and the windows are long enough that no limiter forgets
// a key between two of its requests, even at a few hundred thousand decisions a second.
//
//   - keys=1: 2^20 per 10ms (105M/s, more than any limiter here reaches).
//   - keys=1M-uniform: 2^20 per 10s per key; each key sees a few requests a second.
//   - keys=1M-zipf: 2^30 per 10s per key, because the top key takes 12% of the requests, more than
//     2^21 per window at a few million decisions a second.
//
// Limits below 2^21 are where slidelimit's sliding counter packs a key's state into one 8-byte
// word, as it does for any ordinary limit; the Zipf workload's limit needs its two-word cell
// (a 16-byte compare-and-swap, 32-byte slots).
type workload struct {
	*peers.Workload
	cfg peers.Config
}

func loadWorkloads() []workload {
	workloadsOnce.Do(func() {
		const keys = 1 << 20
		workloads = []workload{
			{peers.HotKey(), peers.Config{Limit: 1 << 20, Window: 10 * time.Millisecond, Keys: 1}},
			{peers.Uniform("1M-uniform", keys, seqLog2), peers.Config{Limit: 1 << 20, Window: 10 * time.Second, Keys: keys}},
			{peers.Zipf("1M-zipf", keys, 1.1, seqLog2), peers.Config{Limit: 1 << 30, Window: 10 * time.Second, Keys: keys}},
		}
	})
	return workloads
}

func selected() []string {
	if *flagLimiters == "" {
		return peers.Names()
	}
	return strings.Split(*flagLimiters, ",")
}

// BenchmarkLimiters runs every limiter on every workload, one goroutine (run=serial) and
// GOMAXPROCS goroutines (run=parallel), under one naming scheme:
//
//	BenchmarkLimiters/limiter=NAME/keys=WORKLOAD/run=serial|parallel-GOMAXPROCS
//
// Every limiter is given every key of a workload before it is timed, so what is measured is the
// steady state of deciding for keys it already tracks. Besides ns/op and allocs/op each result
// reports admitted/op, the share of requests the limiter admitted.
func BenchmarkLimiters(b *testing.B) {
	ws := loadWorkloads()
	for _, name := range selected() {
		b.Run("limiter="+name, func(b *testing.B) {
			built := map[peers.Config]peers.Limiter{}
			defer func() {
				for _, l := range built {
					if err := l.Close(); err != nil {
						b.Error(err)
					}
				}
				clear(built)
				runtime.GC() // release this limiter's state before the next one is built
			}()
			for _, w := range ws {
				b.Run("keys="+w.Name, func(b *testing.B) {
					cfg := w.cfg
					if *flagLimit != 0 {
						cfg.Limit = *flagLimit
					}
					if *flagWindow != 0 {
						cfg.Window = *flagWindow
					}
					l, ok := built[cfg]
					if !ok {
						var err error
						if l, err = peers.New(name, cfg); err != nil {
							b.Fatal(err)
						}
						built[cfg] = l
						warm(l, w.Keys)
					}
					benchWorkload(b, l, w.Workload)
				})
			}
		})
	}
}

// warm gives l one request for each of the keys, from GOMAXPROCS goroutines (every limiter is
// safe for concurrent use), so that setting up a run takes seconds, not minutes.
func warm(l peers.Limiter, keys int) {
	// Fewer collections while the limiter's state grows: setting up, not measuring.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	var wg sync.WaitGroup
	var next atomic.Uint32
	const chunk = 4096
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for {
				from := next.Add(chunk) - chunk
				if from >= uint32(keys) {
					return
				}
				for i := from; i < min(from+chunk, uint32(keys)); i++ {
					buf = peers.AppendKey(buf[:0], i)
					l.Allow(string(buf))
				}
			}
		}()
	}
	wg.Wait()
}

func benchWorkload(b *testing.B, l peers.Limiter, w *peers.Workload) {
	b.Run("run=serial", func(b *testing.B) {
		b.ReportAllocs()
		var admitted int
		var i uint64
		for b.Loop() {
			if l.Allow(w.Key(i)) {
				admitted++
			}
			i++
		}
		b.ReportMetric(float64(admitted)/float64(b.N), "admitted/op")
	})
	b.Run("run=parallel", func(b *testing.B) {
		b.ReportAllocs()
		var admitted atomic.Int64
		var goroutine atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			// Each goroutine starts elsewhere in the sequence, so that they do not move in step.
			i := goroutine.Add(1) * uint64(w.Len()) / 17
			n := int64(0)
			for pb.Next() {
				if l.Allow(w.Key(i)) {
					n++
				}
				i++
			}
			admitted.Add(n)
		})
		b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
	})
}

// batchSize is the batch BenchmarkBatch decides at a time: a typical UDP read or message poll.
const batchSize = 64

// BenchmarkBatch sets slidelimit's AllowBatch beside the single-key calls of the floor and of
// slidelimit, in one run, on the many-key workloads, under BenchmarkLimiters' naming scheme:
//
//	BenchmarkBatch/limiter=floor|slidelimit|slidelimit-batch/keys=WORKLOAD/run=serial|parallel
//
// ns/op is per key for all three (the batch run counts each key of a batch as one op), so
// `benchstat -col /limiter` lines them up. The keys of a batch are read from the workload as
// the single-key runs read them, one after the other.
func BenchmarkBatch(b *testing.B) {
	ws := loadWorkloads()[1:] // the many-key workloads
	for _, name := range []string{peers.Floor, peers.Slidelimit, peers.Slidelimit + "-batch"} {
		b.Run("limiter="+name, func(b *testing.B) {
			built := map[peers.Config]peers.Limiter{}
			defer func() {
				for _, l := range built {
					if err := l.Close(); err != nil {
						b.Error(err)
					}
				}
				clear(built)
				runtime.GC()
			}()
			for _, w := range ws {
				b.Run("keys="+w.Name, func(b *testing.B) {
					l, ok := built[w.cfg]
					if !ok {
						var err error
						if l, err = peers.New(strings.TrimSuffix(name, "-batch"), w.cfg); err != nil {
							b.Fatal(err)
						}
						built[w.cfg] = l
						warm(l, w.Keys)
					}
					if !strings.HasSuffix(name, "-batch") {
						benchWorkload(b, l, w.Workload)
						return
					}
					bl, ok := l.(peers.Batcher)
					if !ok {
						b.Fatalf("%s has no AllowBatch", name)
					}
					benchBatch(b, bl, w.Workload)
				})
			}
		})
	}
}

func benchBatch(b *testing.B, l peers.Batcher, w *peers.Workload) {
	b.Run("run=serial", func(b *testing.B) {
		b.ReportAllocs()
		var keys [batchSize]string
		var out [batchSize]bool
		var admitted int
		for i := 0; i < b.N; i += batchSize {
			m := min(batchSize, b.N-i)
			for j := range m {
				keys[j] = w.Key(uint64(i + j))
			}
			l.AllowBatch(keys[:m], 1, out[:m])
			for _, ok := range out[:m] {
				if ok {
					admitted++
				}
			}
		}
		b.ReportMetric(float64(admitted)/float64(b.N), "admitted/op")
	})
	b.Run("run=parallel", func(b *testing.B) {
		b.ReportAllocs()
		var admitted atomic.Int64
		var goroutine atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			i := goroutine.Add(1) * uint64(w.Len()) / 17
			var keys [batchSize]string
			var out [batchSize]bool
			n := int64(0)
			for more := true; more; {
				m := 0
				for m < batchSize {
					if more = pb.Next(); !more {
						break
					}
					keys[m] = w.Key(i)
					m++
					i++
				}
				l.AllowBatch(keys[:m], 1, out[:m])
				for _, ok := range out[:m] {
					if ok {
						n++
					}
				}
			}
			admitted.Add(n)
		})
		b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
	})
}
