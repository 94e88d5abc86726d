// Command fleet runs one workload against four ways of sharing a per-key limit across a fleet of
// three processes, and reports for each: decisions per second, the 99th percentile latency of a
// decision, the Redis commands it cost, and how far its admissions strayed from an exact
// fleet-wide count.
//
//	cd bench && go run ./fleet [-duration 3s] [-keys 8] [-limit 500] [-window 1s] [-goroutines N]
//	                           [-modes engine,exact,batched,gubernator] [-redis ADDR] [-chart FILE.png]
//
// With -chart it also draws the table as a PNG of four panels: decisions/s, p99 latency and Redis
// commands per 1,000 decisions per mode (log scales), and over- and under-admission per mode.
//
// The four, each as three "processes" in this one process (separate limiters and clients):
//   - engine: each process alone, with the limit divided by three (no coordination at all);
//   - exact: redisstore, one Redis round trip per decision;
//   - batched: redisstore/batched, decisions from quota leased from Redis;
//   - gubernator: gubernator v2.13.0, three in-process daemons on loopback gRPC, GLOBAL behaviour
//     (each asks its own daemon; non-owners answer from their copy and sync hits to the owner).
//
// Redis is a redis-server started on a free loopback port (it must be on PATH), or -redis ADDR.
//
// Accuracy is measured per key and millisecond. The requests and admissions of every process are
// counted in a grid; an exact fleet-wide limiter is then replayed on it: "over" counts the units
// admitted beyond what the fleet-wide count allowed at that millisecond (given what had really
// been admitted before), "exact" the units an exact fleet-wide limiter would have admitted on the
// same requests. The sliding window counter is the reference for the first three; gubernator
// runs its own token bucket (limit per duration, renewed a duration after the first hit), and is
// measured against an exact replay of that rule. Each decision's millisecond is read, just after
// the call, from the process-wide coarse clock that slidelimit's limiters read too, and clamped
// into the window the limiter's Decision names (ResetAt); gubernator names no window, so its
// figures carry the attribution noise of a goroutine preempted around its call.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gubernator-io/gubernator/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/redisstore/batched"
)

const procs = 3

type config struct {
	duration   time.Duration
	keys       int
	limit      int64
	window     time.Duration
	goroutines int
	redisAddr  string
	modes      []string
	chart      string // PNG file to draw the results to; none if empty
}

func main() {
	var cfg config
	var modes string
	flag.DurationVar(&cfg.duration, "duration", 3*time.Second, "how long each mode runs")
	flag.IntVar(&cfg.keys, "keys", 8, "keys, drawn uniformly")
	flag.Int64Var(&cfg.limit, "limit", 500, "fleet-wide limit per key and window")
	flag.DurationVar(&cfg.window, "window", time.Second, "window")
	flag.IntVar(&cfg.goroutines, "goroutines", 8, "goroutines per process")
	flag.StringVar(&cfg.redisAddr, "redis", "", "Redis address (default: start redis-server on a free loopback port)")
	flag.StringVar(&modes, "modes", "engine,exact,batched,gubernator", "modes to run, comma-separated")
	flag.StringVar(&cfg.chart, "chart", "", "also draw the results as a PNG to this file (name ending in .png)")
	flag.Parse()
	if flag.NArg() > 0 {
		// flag stops at the first argument that is no flag: those after it would go unread.
		fmt.Fprintf(os.Stderr, "fleet: unexpected argument %q: every setting is a flag\n", flag.Arg(0))
		os.Exit(2)
	}
	cfg.modes = strings.Split(modes, ",")
	if err := checkFlags(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// checkFlags refuses a bad command line before anything runs or prints.
func checkFlags(cfg config) error {
	if cfg.keys < 1 || cfg.limit < procs || cfg.duration <= 0 || cfg.goroutines < 1 {
		return fmt.Errorf("need -keys >= 1, -limit >= %d, -duration > 0, -goroutines >= 1", procs)
	}
	// The fleet-wide limit, and the engine mode's share of it for each process: checked now,
	// not after the table's header.
	for _, p := range []policy.SlidingCounter{{Limit: cfg.limit, Window: cfg.window}, {Limit: cfg.limit / procs, Window: cfg.window}} {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("-limit %d -window %v: %v", cfg.limit, cfg.window, err)
		}
	}
	for _, m := range cfg.modes {
		if !slices.Contains([]string{"engine", "exact", "batched", "gubernator"}, m) {
			return fmt.Errorf("-modes: unknown mode %q (engine, exact, batched, gubernator)", m)
		}
	}
	// A bad chart name is found now, not after every mode has run.
	if cfg.chart != "" {
		if !strings.HasSuffix(strings.ToLower(cfg.chart), ".png") {
			return fmt.Errorf("-chart %q: the name must end in .png", cfg.chart)
		}
		if fi, err := os.Stat(filepath.Dir(cfg.chart)); err != nil || !fi.IsDir() {
			return fmt.Errorf("-chart %q: no directory %s to write it in", cfg.chart, filepath.Dir(cfg.chart))
		}
	}
	return nil
}

func run(cfg config) error {
	needRedis := slices.Contains(cfg.modes, "exact") || slices.Contains(cfg.modes, "batched")
	if cfg.redisAddr == "" && needRedis {
		addr, stop, err := startRedis()
		if err != nil {
			return err
		}
		defer stop()
		cfg.redisAddr = addr
	}
	fmt.Printf("workload: %d processes × %d goroutines, closed loop, %d keys uniform, limit %d per %v per key (fleet-wide), %v per mode; GOMAXPROCS %d\n\n",
		procs, cfg.goroutines, cfg.keys, cfg.limit, cfg.window, cfg.duration, runtime.GOMAXPROCS(0))
	fmt.Println("| mode | decisions/s | p99 latency | Redis commands / 1k decisions | admitted | exact fleet-wide count admits | over-admitted units | under-admitted units |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	var rows []row
	for _, m := range cfg.modes {
		r, err := runMode(cfg, m)
		if err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
		w := row{m, r}
		rows = append(rows, w)
		cmds := "—"
		if c, ok := w.cmdsPer1k(); ok {
			cmds = strconv.FormatFloat(c, 'f', 1, 64)
		}
		fmt.Printf("| %s | %.0f | %v | %s | %d | %d | %d (%.2f%%) | %d (%.2f%%) |\n", m, w.rate(), r.p99, cmds,
			r.admitted, r.exact, r.over, w.overPct(), r.under, w.underPct())
	}
	if cfg.chart != "" {
		if err := writeChart(cfg.chart, chartHeader(cfg, runtime.GOMAXPROCS(0)), rows); err != nil {
			return err
		}
		fmt.Printf("\nchart: %s\n", cfg.chart)
	}
	return nil
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) * 100 / float64(b)
}

// decider decides one unit for key; it reports whether it was admitted and, where the limiter
// says, the end of the window it was decided in (ms; 0 if unknown).
type decider func(ctx context.Context, key string) (bool, int64, error)

type result struct {
	decisions, admitted, exact, over, under, cmds int64
	elapsed                                       time.Duration
	p99                                           time.Duration
}

// counter counts the commands a go-redis client sends, pipelined or not.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

func runMode(cfg config, mode string) (result, error) {
	p := policy.SlidingCounter{Limit: cfg.limit, Window: cfg.window}
	ds := make([]decider, procs)
	var closers []func()
	defer func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}()
	var cnt counter
	cmds := int64(-1)
	ref := "sliding"
	newClient := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: cfg.redisAddr, PoolSize: 4 * cfg.goroutines, DisableIdentity: true, ContextTimeoutEnabled: true})
		c.AddHook(&cnt)
		closers = append(closers, func() { _ = c.Close() })
		return c
	}
	switch mode {
	case "engine":
		for i := range ds {
			l, err := engine.New(policy.SlidingCounter{Limit: cfg.limit / procs, Window: cfg.window})
			if err != nil {
				return result{}, err
			}
			closers = append(closers, func() { _ = l.Close() })
			ds[i] = func(_ context.Context, k string) (bool, int64, error) {
				d := l.Take(k, 1)
				return d.Allowed, d.ResetAt.UnixMilli(), nil
			}
		}
	case "exact":
		for i := range ds {
			// Client time: the limiter decides on the coarse clock the accounting reads. With the
			// server's clock (the default) the two differ: while every goroutine waits on Redis no
			// decision refreshes the coarse clock, which then lags by up to the scheduler's slice
			// on a loaded machine, so decisions are placed early in their window, and the replay
			// reports equal over- and under-admission that did not happen (some 12% each here).
			l, err := redisstore.New(newClient(), "fleet-exact", p, redisstore.WithTimeout(time.Second), redisstore.WithDenyCache(0), redisstore.WithClientTime())
			if err != nil {
				return result{}, err
			}
			closers = append(closers, func() { _ = l.Close() })
			ds[i] = func(ctx context.Context, k string) (bool, int64, error) {
				d, err := l.Take(ctx, k, 1)
				return d.Allowed, d.ResetAt.UnixMilli(), err
			}
		}
	case "batched":
		for i := range ds {
			l, err := batched.New(newClient(), "fleet-batched", p, batched.WithTimeout(time.Second))
			if err != nil {
				return result{}, err
			}
			closers = append(closers, func() { _ = l.Close() })
			ds[i] = func(ctx context.Context, k string) (bool, int64, error) {
				d, err := l.Take(ctx, k, 1)
				return d.Allowed, d.ResetAt.UnixMilli(), err
			}
		}
	case "gubernator":
		ref = "gubernator"
		daemons, err := startGubernator()
		if err != nil {
			return result{}, err
		}
		closers = append(closers, func() {
			// A daemon's Close waits for its global syncs, which retry against peers already
			// closed: bounded here, since the program is about to exit anyway.
			done := make(chan struct{})
			go func() {
				for _, d := range daemons {
					d.Close()
				}
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				fmt.Fprintln(os.Stderr, "fleet: gubernator daemons did not close within 3s; leaving them")
			}
		})
		for i := range ds {
			c, err := daemons[i].Client()
			if err != nil {
				return result{}, err
			}
			ds[i] = func(ctx context.Context, k string) (bool, int64, error) {
				ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				resp, err := c.GetRateLimits(ctx, &gubernator.GetRateLimitsReq{Requests: []*gubernator.RateLimitReq{{
					Name: "fleet", UniqueKey: k, Hits: 1, Limit: cfg.limit, Duration: cfg.window.Milliseconds(),
					Algorithm: gubernator.Algorithm_TOKEN_BUCKET, Behavior: gubernator.Behavior_GLOBAL,
				}}})
				if err != nil {
					return false, 0, err
				}
				r := resp.Responses[0]
				if r.Error != "" {
					return false, 0, errors.New(r.Error)
				}
				return r.Status == gubernator.Status_UNDER_LIMIT, 0, nil
			}
		}
	default:
		return result{}, fmt.Errorf("unknown mode %q (engine, exact, batched, gubernator)", mode)
	}
	if mode == "exact" || mode == "batched" {
		cmds = 0
	}
	keys := make([]string, cfg.keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d-%d", mode, time.Now().UnixNano(), i)
	}
	// Warm up: one decision per key and process (connections, scripts, leases).
	for _, d := range ds {
		for _, k := range keys[:1] {
			if _, _, err := d(context.Background(), k); err != nil {
				return result{}, err
			}
		}
	}
	before := cnt.n.Load()
	r, err := workload(cfg, ds, keys, ref)
	if cmds == 0 {
		r.cmds = cnt.n.Load() - before
	} else {
		r.cmds = -1
	}
	return r, err
}

// workload runs every process's goroutines in a closed loop for cfg.duration, and replays the
// exact fleet-wide limiter on what they asked and got.
func workload(cfg config, ds []decider, keys []string, ref string) (result, error) {
	startMs := time.Now().UnixMilli() - 1000
	slots := int(cfg.duration.Milliseconds()) + 2000
	req := make([][]atomic.Int32, len(keys))
	adm := make([][]atomic.Int32, len(keys))
	for i := range keys {
		req[i], adm[i] = make([]atomic.Int32, slots), make([]atomic.Int32, slots)
	}
	clk := clock.Acquire()
	defer clock.Release(clk)
	w := cfg.window.Milliseconds()
	deadline := time.Now().Add(cfg.duration)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lats []time.Duration
	var decisions atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	for pi, d := range ds {
		for g := range cfg.goroutines {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(pi), uint64(g)))
				var sample []time.Duration
				ctx := context.Background()
				n := 0
				for ; ; n++ {
					// time.Now costs more than a decision in process: read it (and time the
					// call) on one decision in eight, and the coarse clock on every one.
					timed := n%8 == 0
					var t0 time.Time
					if timed {
						if t0 = time.Now(); !t0.Before(deadline) {
							break
						}
					}
					k := r.IntN(len(keys))
					ok, reset, err := d(ctx, keys[k])
					if timed {
						sample = append(sample, time.Since(t0))
					}
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
						break
					}
					// The limiter read the clock during the call: attribute the decision to the
					// clock's reading after it, within the window the limiter says it decided in
					// (a goroutine preempted across a window edge would otherwise be counted in
					// the wrong window).
					at := clk.Now()
					if reset > 0 {
						at = min(max(at, reset-w), reset-1)
					}
					ms := int(at - startMs)
					if ms < 0 || ms >= slots {
						continue
					}
					req[k][ms].Add(1)
					if ok {
						adm[k][ms].Add(1)
					}
				}
				decisions.Add(int64(n))
				mu.Lock()
				lats = append(lats, sample...)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	if e := firstErr.Load(); e != nil {
		return result{}, e.(error)
	}
	slices.Sort(lats)
	res := result{decisions: decisions.Load(), elapsed: elapsed}
	if len(lats) > 0 {
		res.p99 = lats[min(len(lats)*99/100, len(lats)-1)]
	}
	for k := range keys {
		actual, exact := newModel(ref, cfg.limit, w), newModel(ref, cfg.limit, w)
		for ms := range slots {
			t := startMs + int64(ms)
			a, q := int64(adm[k][ms].Load()), int64(req[k][ms].Load())
			res.admitted += a
			if room := actual.room(t); a > room {
				res.over += a - room
			}
			actual.add(t, a)
			e := min(q, exact.room(t))
			exact.add(t, e)
			res.exact += e
		}
	}
	res.under = max(0, res.exact-(res.admitted-res.over))
	return res, nil
}

// model is an exact fleet-wide limiter for one key, at millisecond resolution.
type model interface {
	room(t int64) int64 // units it would admit at t
	add(t, n int64)     // n units admitted at t (more than room when replaying over-admission)
}

func newModel(ref string, limit, w int64) model {
	if ref == "gubernator" {
		return &bucketModel{limit: limit, w: w}
	}
	return &slidingModel{limit: limit, w: w, win: -1}
}

// slidingModel is the sliding window counter: estimate = floor(prev × (W − elapsed) / W) + cur.
type slidingModel struct {
	limit, w, win, cur, prev int64
}

func (m *slidingModel) roll(t int64) {
	start := t - t%m.w
	switch {
	case start == m.win:
	case start == m.win+m.w:
		m.win, m.prev, m.cur = start, m.cur, 0
	default:
		m.win, m.prev, m.cur = start, 0, 0
	}
}

func (m *slidingModel) room(t int64) int64 {
	m.roll(t)
	x := new(big.Int).Mul(big.NewInt(m.prev), big.NewInt(m.w-(t-m.win)))
	est := x.Quo(x, big.NewInt(m.w)).Int64() + m.cur
	return max(0, m.limit-est)
}

func (m *slidingModel) add(t, n int64) { m.roll(t); m.cur += n }

// bucketModel is gubernator's token bucket: limit units, all back one duration after the hit
// that found the bucket missing or expired.
type bucketModel struct {
	limit, w, remaining, expireAt int64
	live                          bool
}

func (m *bucketModel) room(t int64) int64 {
	if !m.live || t >= m.expireAt {
		return m.limit
	}
	return max(0, m.remaining)
}

func (m *bucketModel) add(t, n int64) {
	if n == 0 {
		return
	}
	if !m.live || t >= m.expireAt {
		m.live, m.remaining, m.expireAt = true, m.limit, t+m.w
	}
	m.remaining -= n
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startRedis runs redis-server on a free loopback port, persistence off, dying with this process.
func startRedis() (string, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, errors.New("redis-server not found on PATH (apt-get install redis-server), or pass -redis ADDR")
	}
	addr, err := freeAddr()
	if err != nil {
		return "", nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel", "warning")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	defer c.Close()
	for range 500 {
		if c.Ping(context.Background()).Err() == nil {
			return addr, stop, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	return "", nil, fmt.Errorf("redis-server on %s did not answer within 5s", addr)
}

// startGubernator starts three daemons on loopback and tells each about the others.
func startGubernator() ([]*gubernator.Daemon, error) {
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	var daemons []*gubernator.Daemon
	var peers []gubernator.PeerInfo
	for range procs {
		grpcAddr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		httpAddr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, err := gubernator.SpawnDaemon(ctx, gubernator.DaemonConfig{
			GRPCListenAddress: grpcAddr, HTTPListenAddress: httpAddr, AdvertiseAddress: grpcAddr, InstanceID: grpcAddr,
			Logger: logrus.NewEntry(log),
			Behaviors: gubernator.BehaviorConfig{
				// The same exchange interval as the batched mode's default sync interval.
				GlobalSyncWait: 50 * time.Millisecond, GlobalTimeout: 5 * time.Second, BatchTimeout: 5 * time.Second,
			},
		})
		cancel()
		if err != nil {
			for _, d := range daemons {
				d.Close()
			}
			return nil, err
		}
		d.PeerInfo = gubernator.PeerInfo{GRPCAddress: d.GRPCListeners[0].Addr().String(), HTTPAddress: d.HTTPListener.Addr().String()}
		daemons = append(daemons, d)
		peers = append(peers, d.PeerInfo)
	}
	for _, d := range daemons {
		d.SetPeers(peers)
	}
	return daemons, nil
}
