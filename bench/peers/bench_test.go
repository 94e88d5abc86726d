package peers_test

import (
	"flag"
	"fmt"
	"os"
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
	b.Run("run=serial", func(b *testing.B) { batchSerial(b, l, w, 0) })
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

// fresh is the sequence of keys BenchmarkInsert and BenchmarkKeyFlood insert: 2^23 (8,388,608)
// keys, none of which the warm-up gives. Each limiter takes them in order from its own cursor,
// across every run of every -count and -cpu value, so that each request really is a new key to it.
// A run takes b.N+1 keys (the testing package runs a benchmark once at b.N = 1 before each -count
// and -cpu value), so a limiter needs runs x count x cpus x (N+1) of them. In BenchmarkInsert,
// slidelimit's run=serial and run=batch take from one cursor: -benchtime 1000000x fits -count 4
// (8,000,008 keys), not 6 (12,000,012). In BenchmarkKeyFlood run=serial and run=parallel do:
// -benchtime 100000x -count 6 fits five -cpu values (6,000,060). A benchmark that would need more
// fails instead of repeating keys, and so does the test binary (see TestMain).
var (
	freshOnce sync.Once
	freshKeys *peers.Workload
)

// freshSpent records that a freshCursor ran out. A benchmark's failure in its second or later
// -count, or at its second or later -cpu value, does not fail the test binary: the testing package
// runs those as benchmarks with no parent to report to, prints their --- FAIL lines and still ends
// with PASS and exit status 0. TestMain fails the binary instead.
var freshSpent atomic.Bool

// TestMain fails the test binary when a fresh-key cursor ran out (see freshSpent), so that a run
// whose later results are missing cannot pass for a whole one.
func TestMain(m *testing.M) {
	code := m.Run()
	if freshSpent.Load() {
		fmt.Println("FAIL: the fresh keys of BenchmarkInsert or BenchmarkKeyFlood ran out (see the --- FAIL lines above); the runs after the first of them have no results: use a smaller -benchtime or -count")
		code = max(code, 1)
	}
	os.Exit(code)
}

func freshWorkload() *peers.Workload {
	freshOnce.Do(func() { freshKeys = peers.Fresh("fresh", 23) })
	return freshKeys
}

// freshCursor hands out the fresh keys of one limiter, in chunks to concurrent goroutines.
type freshCursor struct {
	w    *peers.Workload
	next atomic.Uint64
}

// take returns the start of the next n fresh keys, or fails b when the sequence is spent.
func (c *freshCursor) take(b *testing.B, n uint64) uint64 {
	from := c.next.Add(n) - n
	if from+n > uint64(c.w.Len()) {
		freshSpent.Store(true)
		b.Fatalf("the %d fresh keys are spent: use a smaller -benchtime or -count", c.w.Len())
	}
	return from
}

// insertKeys is the number of keys BenchmarkInsert's limiters hold before they are timed.
const insertKeys = 10_000_000

// BenchmarkInsert measures the cost of a key a limiter has not seen, once it tracks 10M keys:
//
//	BenchmarkInsert/limiter=NAME/keys=10M/run=serial|batch
//
// Every op is a new key (see fresh). The floor's "insert" is its usual hash and add, into an
// array sized for 10M keys: the least a first request can cost. Only the floor, slidelimit,
// slidelimit-expected and httprate run by default (the others hold 10M keys in several gigabytes); -limiters picks others.
// run=batch, for the limiters with AllowBatch, hands the new keys over batchSize at a time; its
// ns/op is per key. Run it with a fixed -benchtime, e.g. -benchtime 100000x: with -count 4 the
// presized limiter takes 800,000 new keys, short of the 10.94M at which its shards would grow.
func BenchmarkInsert(b *testing.B) {
	names := []string{peers.Floor, peers.Slidelimit, peers.SlidelimitExpected, peers.Httprate}
	if *flagLimiters != "" {
		names = selected()
	}
	fw := freshWorkload()
	for _, name := range names {
		b.Run("limiter="+name, func(b *testing.B) {
			l := warmed(b, name, peers.Config{Limit: 1 << 20, Window: time.Minute, Keys: insertKeys})
			cur := &freshCursor{w: fw}
			b.Run("keys=10M", func(b *testing.B) {
				b.Run("run=serial", func(b *testing.B) { freshSerial(b, l, fw, cur) })
				if bl, ok := l.(peers.Batcher); ok {
					b.Run("run=batch", func(b *testing.B) { freshBatch(b, bl, fw, cur) })
				}
			})
		})
	}
}

// freshBatch is freshSerial through AllowBatch, batchSize new keys a call; ns/op is per key.
func freshBatch(b *testing.B, l peers.Batcher, fw *peers.Workload, cur *freshCursor) {
	batchSerial(b, l, fw, cur.take(b, uint64(b.N)))
}

// batchSerial times b.N decisions through AllowBatch, batchSize keys a call, on w's keys from
// from on, one goroutine, reporting the share admitted; ns/op is per key.
func batchSerial(b *testing.B, l peers.Batcher, w *peers.Workload, from uint64) {
	b.ReportAllocs()
	var keys [batchSize]string
	var out [batchSize]bool
	admitted := 0
	for i := 0; i < b.N; i += batchSize {
		m := min(batchSize, b.N-i)
		for j := range m {
			keys[j] = w.Key(from + uint64(i+j))
		}
		l.AllowBatch(keys[:m], 1, out[:m])
		for _, ok := range out[:m] {
			if ok {
				admitted++
			}
		}
	}
	b.ReportMetric(float64(admitted)/float64(b.N), "admitted/op")
}

// fillKeys are BenchmarkFill's keys: 2^24, of which it uses the first 10M.
var (
	fillOnce sync.Once
	fillKeys *peers.Workload
)

// BenchmarkFill measures the cost of a new key while a limiter grows from empty to 10M keys, the
// growth included:
//
//	BenchmarkFill/limiter=NAME/keys=10M/run=serial
//
// Each op builds a limiter and gives it one request for each of 10M distinct keys, one goroutine,
// and reports ns/key (the ns/op is the whole fill). The keys are read from a workload made before
// the timing (peers.Fresh), as BenchmarkInsert's are, so that making them costs nothing timed. slidelimit-expected is sized for those 10M up
// front and so never grows; the floor's array is always sized. Only the floor, slidelimit,
// slidelimit-expected and httprate run by default; -limiters picks others. Run it with
// -benchtime 1x.
func BenchmarkFill(b *testing.B) {
	names := []string{peers.Floor, peers.Slidelimit, peers.SlidelimitExpected, peers.Httprate}
	if *flagLimiters != "" {
		names = selected()
	}
	fillOnce.Do(func() { fillKeys = peers.Fresh("fill", 24) })
	for _, name := range names {
		b.Run("limiter="+name, func(b *testing.B) {
			b.Run("keys=10M", func(b *testing.B) {
				b.Run("run=serial", func(b *testing.B) {
					var elapsed time.Duration
					for range b.N {
						b.StopTimer()
						runtime.GC()
						l, err := peers.New(name, peers.Config{Limit: 1 << 20, Window: time.Minute, Keys: insertKeys})
						if err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
						start := time.Now()
						for i := range uint64(insertKeys) {
							if !l.Allow(fillKeys.Key(i)) {
								b.Fatalf("%s refused key %d's first request", name, i)
							}
						}
						elapsed += time.Since(start)
						b.StopTimer()
						if err := l.Close(); err != nil {
							b.Error(err)
						}
						b.StartTimer()
					}
					b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N)/insertKeys, "ns/key")
				})
			})
		})
	}
}

// floodCap is the key cap slidelimit gets in BenchmarkKeyFlood, and the number of keys every
// limiter is given before it is timed.
const floodCap = 1 << 20

// BenchmarkKeyFlood is a flood of new keys (random source addresses, a scan, a cardinality
// attack): every request is a key the limiter has not seen.
//
//	BenchmarkKeyFlood/limiter=NAME/keys=new/run=serial|parallel-GOMAXPROCS
//
// Every limiter is first given 2^20 keys. slidelimit then runs with eviction on and a key cap of
// 2^20 reached by evicting the stalest key, so every timed request finds the cap reached and makes
// room; the peers have no key cap and grow by one key a request. The floor hashes and adds, as
// always. Run it with a fixed -benchtime, e.g. -benchtime 100000x.
func BenchmarkKeyFlood(b *testing.B) {
	fw := freshWorkload()
	for _, name := range selected() {
		b.Run("limiter="+name, func(b *testing.B) {
			l := warmed(b, name, peers.Config{Limit: 1 << 20, Window: time.Minute, Keys: floodCap, MaxKeys: floodCap})
			cur := &freshCursor{w: fw}
			b.Run("keys=new", func(b *testing.B) {
				b.Run("run=serial", func(b *testing.B) { freshSerial(b, l, fw, cur) })
				b.Run("run=parallel", func(b *testing.B) {
					b.ReportAllocs()
					// All the keys up front, so that goroutines never take a key twice.
					base := cur.take(b, uint64(b.N))
					var next atomic.Uint64
					var admitted atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						n := int64(0)
						for pb.Next() {
							if l.Allow(fw.Key(base + next.Add(1) - 1)) {
								n++
							}
						}
						admitted.Add(n)
					})
					b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
				})
			})
		})
	}
}

// warmed builds limiter name for cfg, gives it cfg.Keys keys (see warm), and closes it, then
// collects its state, when b ends.
func warmed(b *testing.B, name string, cfg peers.Config) peers.Limiter {
	l, err := peers.New(name, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := l.Close(); err != nil {
			b.Error(err)
		}
		runtime.GC()
	})
	warm(l, cfg.Keys)
	return l
}

// freshSerial times b.N decisions on keys l has never seen, one goroutine, reporting the share
// admitted.
func freshSerial(b *testing.B, l peers.Limiter, fw *peers.Workload, cur *freshCursor) {
	b.ReportAllocs()
	from := cur.take(b, uint64(b.N))
	admitted := 0
	for i := range uint64(b.N) {
		if l.Allow(fw.Key(from + i)) {
			admitted++
		}
	}
	b.ReportMetric(float64(admitted)/float64(b.N), "admitted/op")
}
