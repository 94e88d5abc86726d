package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"slices"
	"sync"
	"text/tabwriter"
	"time"
)

type loadConfig struct {
	url         string
	duration    time.Duration
	concurrency int
	clients     int
	rounds      int
}

func loadMain(args []string, stdout, stderr io.Writer) error {
	var c loadConfig
	fs := newFlagSet("load", "[-url URL] [flags]", stderr)
	fs.StringVar(&c.url, "url", "", "URL to load; empty: start an upstream and two proxies in process (without and with limiting) and compare them")
	durationVar(fs, &c.duration, "duration", 2*time.Second, "length (a `duration`) of each measured run")
	fs.IntVar(&c.concurrency, "concurrency", 8*runtime.GOMAXPROCS(0), "requests in flight at once (one keep-alive connection each)")
	fs.IntVar(&c.clients, "clients", 10_000, "distinct client addresses sent in X-Forwarded-For, so that a limiter tracks many keys (0: none sent)")
	fs.IntVar(&c.rounds, "rounds", 3, "without -url: how many times each proxy is measured, alternating; the median counts")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case c.duration < time.Millisecond:
		return usageErr(fs, "-duration %v: must be at least 1ms", typed(&c.duration))
	case c.concurrency < 1 || c.concurrency > maxWorkers:
		return usageErr(fs, "-concurrency %d: must be in [1, %d]", c.concurrency, maxWorkers)
	case c.clients < 0 || c.clients > 1<<22:
		return usageErr(fs, "-clients %d: must be in [0, %d]", c.clients, 1<<22)
	case c.rounds < 1:
		return usageErr(fs, "-rounds %d: must be at least 1", c.rounds)
	}
	if c.url != "" {
		shown := redactURL(c.url) // its password hidden, here and in the report
		u, err := url.Parse(c.url)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			return usageErr(fs, "-url %q: must be an http:// or https:// URL with a host, like http://127.0.0.1:8080/", shown)
		}
		if err := checkPort(u); err != nil {
			return usageErr(fs, "-url %q: %v", shown, err)
		}
		r, err := loadRun(c, c.url, shown)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "slidelimit load: %s, %v, %d connections\n\n", shown, c.duration, c.concurrency)
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  req/s\tp50\tp99\tstatus codes")
		fmt.Fprintf(tw, "  %s\t%v\t%v\t%v\n", group(int64(r.rps)), r.p50, r.p99, r.codes)
		return tw.Flush()
	}
	return loadCompare(c, stdout, stderr)
}

// loadCompare starts an upstream and two proxies on loopback, one without limits and one that
// decides every request (with a limit no client reaches, so both forward every request), and
// measures both in alternating rounds.
func loadCompare(c loadConfig, stdout, stderr io.Writer) error {
	logger := log.New(io.Discard, "", 0)
	upstream, err := serveOn(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	}))
	if err != nil {
		return err
	}
	defer upstream.close()

	base := proxyConfig{
		upstream: "http://" + upstream.addr, window: time.Minute, policyID: "sliding-counter",
		key: "ip", trusted: "127.0.0.1", forwarded: "x-forwarded-for", ipv6Prefix: 64,
		name: "default", shutdownTimeout: time.Second,
	}
	targets := []struct {
		label string
		cfg   proxyConfig
	}{
		{"proxy, no limiter", base},
		{"proxy, limiter", base},
	}
	targets[0].cfg.unlimited = true
	targets[0].cfg.limit = 1
	targets[1].cfg.limit = 1 << 30

	fmt.Fprintf(stderr, "load: %d rounds of %v per proxy, %d connections, %d client addresses\n", c.rounds, c.duration, c.concurrency, c.clients)
	rps := make([][]float64, len(targets))
	cpu := make([][]float64, len(targets))
	lat := make([]loadResult, len(targets))
	for i, t := range targets {
		px, err := newProxy(&t.cfg, logger)
		if err != nil {
			return err
		}
		srv, err := serveOn(px.handler)
		if err != nil {
			px.close()
			return err
		}
		defer px.close()
		defer srv.close()
		targets[i].cfg.listen = srv.addr
		// Warm up: open the connections and fill the limiter's table before measuring.
		// At least 100ms, whatever -duration: a first request pays for its connection.
		warmCfg := c
		warmCfg.duration = max(min(c.duration/4, 500*time.Millisecond), 100*time.Millisecond)
		u := "http://" + srv.addr + "/"
		if _, err := loadRun(warmCfg, u, u); err != nil {
			return fmt.Errorf("warming up (%s, for %v): %w", t.label, warmCfg.duration, err)
		}
	}
	for round := range c.rounds {
		for i, t := range targets {
			u := "http://" + t.cfg.listen + "/"
			r, err := loadRun(c, u, u)
			if err != nil {
				return err
			}
			if r.codes[http.StatusOK] != r.total {
				return fmt.Errorf("%s: %d of %d requests were not 200 OK: %v", t.label, r.total-r.codes[http.StatusOK], r.total, r.codes)
			}
			rps[i] = append(rps[i], r.rps)
			cpu[i] = append(cpu[i], float64(r.cpuPerReq))
			if round == c.rounds/2 {
				lat[i] = r
			}
			fmt.Fprintf(stderr, "  round %d, %s: %s req/s, %v CPU per request\n", round+1, t.label, group(int64(r.rps)), r.cpuPerReq.Round(100*time.Nanosecond))
		}
	}

	fmt.Fprintf(stdout, "slidelimit load: upstream and proxies in this process on loopback, %d cores; %d connections, %d client addresses; median of %d runs of %v\n\n",
		runtime.NumCPU(), c.concurrency, c.clients, c.rounds, c.duration)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  \treq/s\tCPU per request\tp50\tp99")
	med, medCPU := make([]float64, len(targets)), make([]time.Duration, len(targets))
	for i, t := range targets {
		med[i], medCPU[i] = median(rps[i]), time.Duration(median(cpu[i]))
		fmt.Fprintf(tw, "  %s\t%s\t%v\t%v\t%v\n", t.label, group(int64(med[i])), medCPU[i].Round(100*time.Nanosecond), lat[i].p50, lat[i].p99)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	ratio := med[1] / med[0]
	fmt.Fprintf(stdout, "\n  throughput with limiter / without: %.3f (limiting costs %.1f%% of proxy throughput)\n", ratio, 100*(1-ratio))
	if medCPU[0] > 0 {
		fmt.Fprintf(stdout, "  CPU per request with limiter / without: %.3f (%+v per request, for load generator, proxy and upstream together)\n",
			float64(medCPU[1])/float64(medCPU[0]), (medCPU[1] - medCPU[0]).Round(100*time.Nanosecond))
	}
	return nil
}

type loadResult struct {
	total    int
	codes    map[int]int
	rps      float64
	p50, p99 time.Duration
	// cpuPerReq is the process's CPU time per request: load generator, proxy and upstream
	// together when they share the process. Unlike throughput, it barely moves when other
	// programs compete for the cores.
	cpuPerReq time.Duration
}

// loadRun sends GET requests to url from c.concurrency goroutines for c.duration. Errors name the
// URL as shown (its password hidden).
func loadRun(c loadConfig, target, shown string) (loadResult, error) {
	tr := &http.Transport{
		MaxIdleConns: c.concurrency, MaxIdleConnsPerHost: c.concurrency, DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	defer tr.CloseIdleConnections()
	// A redirect is the answer measured, not a second request: following it would count two
	// round trips as one and report the other URL's status.
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	type worker struct {
		lat   []time.Duration
		codes map[int]int
		err   error
		cut   error // a request the run's end cut short: no failure, unless no request completed
	}
	ws := make([]worker, c.concurrency)
	ctx, cancel := context.WithTimeout(context.Background(), c.duration)
	defer cancel()
	start, cpu0 := time.Now(), processCPU()
	var wg sync.WaitGroup
	for i := range ws {
		w := &ws[i]
		w.codes = map[int]int{}
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		wg.Go(func() {
			for ctx.Err() == nil {
				// Tied to the run, so that a request in flight when it ends is cut there, not
				// left to the client's own timeout.
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
				if err != nil {
					w.err = err
					return
				}
				if c.clients > 0 {
					req.Header.Set("X-Forwarded-For", clientAddr(rng.IntN(c.clients)))
				}
				t0 := time.Now()
				res, err := client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
				if err != nil {
					if ctx.Err() == nil {
						w.err = err
					} else {
						w.cut = err
					}
					return
				}
				w.lat = append(w.lat, time.Since(t0))
				w.codes[res.StatusCode]++
			}
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), processCPU()-cpu0

	r := loadResult{codes: map[int]int{}}
	var all []time.Duration
	var cut error
	for _, w := range ws {
		if w.err != nil {
			// net/http's errors quote the URL with the user part's password hidden ("***"), but
			// not a password= option: the URL is quoted as the report shows it instead. Scrubbing
			// the message would leave gaps where the password is also a word of the URL
			// (password "api", path /api/v1).
			err := w.err
			if ue, ok := err.(*url.Error); ok {
				c := *ue
				c.URL = shown
				err = &c
			}
			return r, fmt.Errorf("load %s: %w", shown, err)
		}
		all = append(all, w.lat...)
		for k, v := range w.codes {
			r.codes[k] += v
		}
		cut = cmp.Or(cut, w.cut)
	}
	if len(all) == 0 {
		if cut != nil {
			return r, fmt.Errorf("load %s: no request completed within %v (%w)", shown, c.duration, cut)
		}
		return r, fmt.Errorf("load %s: no request completed within %v", shown, c.duration)
	}
	r.total = len(all)
	r.rps = float64(r.total) / elapsed.Seconds()
	if r.total > 0 {
		r.cpuPerReq = cpu / time.Duration(r.total)
	}
	if len(all) > 0 {
		slices.Sort(all)
		r.p50 = all[len(all)/2].Round(time.Microsecond)
		r.p99 = all[len(all)*99/100].Round(time.Microsecond)
	}
	return r, nil
}

// clientAddr returns the i-th client address, in 100.64.0.0/10 (shared address space, never a
// trusted proxy).
func clientAddr(i int) string {
	a := netip.AddrFrom4([4]byte{100, 64 + byte(i>>16&0x3f), byte(i >> 8), byte(i)})
	return a.String()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// server is an http.Server on a free loopback port.
type server struct {
	addr  string
	close func()
}

func serveOn(h http.Handler) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(ln)
	}()
	return &server{addr: ln.Addr().String(), close: func() { s.Close(); <-done }}, nil
}
