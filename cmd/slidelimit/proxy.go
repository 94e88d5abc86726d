package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore"
)

type proxyConfig struct {
	listen          string
	upstream        string
	limit           int64
	window          time.Duration
	policyID        string
	key             string
	trusted         string
	forwarded       string
	ipv6Prefix      int
	connLimit       int64
	redisURL        string
	shadow          bool
	name            string
	metricsListen   string
	shutdownTimeout time.Duration

	// unlimited builds the proxy without any limiter: the baseline of "slidelimit load".
	unlimited bool
}

const proxySynopsis = "-upstream URL [-listen ADDR] [-limit N] [-window D] [-policy NAME] [-key ip|header:NAME|conn|path] [-trusted-proxies CIDRS] [-conn-limit N] [-redis URL] [-shadow]"

func proxyFlags(stderr io.Writer) (*proxyConfig, *flag.FlagSet) {
	c := &proxyConfig{}
	fs := newFlagSet("proxy", proxySynopsis, stderr)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "address to listen on (host:port; port 0 picks a free one)")
	fs.StringVar(&c.upstream, "upstream", "", "URL of the server to forward to (required), e.g. http://127.0.0.1:9000")
	fs.Int64Var(&c.limit, "limit", 100, "requests admitted per key per window")
	fs.DurationVar(&c.window, "window", time.Minute, "the policy's window")
	fs.StringVar(&c.policyID, "policy", "sliding-counter", "policy: "+strings.Join(policyIDs, ", ")+" (as the engine or Redis store supports them)")
	fs.StringVar(&c.key, "key", "ip", "what a limit applies to: ip (the client address), header:NAME (a header's value; clients without it by ip), conn (each connection), path (each path per client address)")
	fs.StringVar(&c.trusted, "trusted-proxies", "", "comma-separated CIDR ranges or addresses of proxies in front of this one, whose forwarding header names the client")
	fs.StringVar(&c.forwarded, "forwarded-header", "x-forwarded-for", "the header trusted proxies write: x-forwarded-for or forwarded")
	fs.IntVar(&c.ipv6Prefix, "ipv6-prefix", 64, "group IPv6 clients by this prefix length (0 or 128: each address alone)")
	fs.Int64Var(&c.connLimit, "conn-limit", 0, "new connections admitted per client address per window (0: no connection limit)")
	fs.StringVar(&c.redisURL, "redis", "", "decide on Redis at this URL (redis://host:port/db), shared by every proxy using it; falls back to in-process limits when Redis fails")
	fs.BoolVar(&c.shadow, "shadow", false, "decide, count and export metrics, but never refuse a request")
	fs.StringVar(&c.name, "name", "default", "the policy's name in the RateLimit fields and in Redis keys")
	fs.StringVar(&c.metricsListen, "metrics-listen", "", "serve /metrics on this address instead of on -listen")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long in-flight requests may take to finish after SIGTERM")
	return c, fs
}

// validate checks the flags that need no network, returning an error that names the flag and
// the value.
func (c *proxyConfig) validate() (policy.Policy, *url.URL, error) {
	if c.upstream == "" {
		return nil, nil, errors.New("-upstream is required")
	}
	up, err := url.Parse(c.upstream)
	if err != nil {
		return nil, nil, fmt.Errorf("-upstream %q: %v", c.upstream, err)
	}
	if up.Scheme != "http" && up.Scheme != "https" || up.Host == "" {
		return nil, nil, fmt.Errorf("-upstream %q: must be an http:// or https:// URL with a host", c.upstream)
	}
	p, err := buildPolicy(c.policyID, c.limit, c.window)
	if err != nil {
		return nil, nil, err
	}
	if _, _, err := keyFunc(c); err != nil {
		return nil, nil, err
	}
	if c.connLimit < 0 || c.connLimit > policy.MaxLimit {
		return nil, nil, fmt.Errorf("-conn-limit %d: must be in [0, %d]", c.connLimit, int64(policy.MaxLimit))
	}
	if c.ipv6Prefix < 0 || c.ipv6Prefix > 128 {
		return nil, nil, fmt.Errorf("-ipv6-prefix %d: must be in [0, 128]", c.ipv6Prefix)
	}
	if c.shutdownTimeout <= 0 {
		return nil, nil, fmt.Errorf("-shutdown-timeout %v: must be positive", c.shutdownTimeout)
	}
	if c.name == "" || strings.ContainsAny(c.name, " {}:\"\\") || !isPrintableASCII(c.name) || len(c.name) > 64 {
		return nil, nil, fmt.Errorf("-name %q: must be 1 to 64 printable ASCII characters without spaces, braces, quotes, backslashes or ':'", c.name)
	}
	return p, up, nil
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// keyFunc returns the middleware's key function for -key, and the ClientIP it keys clients by.
func keyFunc(c *proxyConfig) (func(*http.Request) string, *httplimit.ClientIP, error) {
	trusted, err := httplimit.ParsePrefixes(c.trusted)
	if err != nil {
		return nil, nil, fmt.Errorf("-trusted-proxies %q: %v", c.trusted, err)
	}
	ip := &httplimit.ClientIP{TrustedProxies: trusted, IPv6Prefix: c.ipv6Prefix}
	switch strings.ToLower(c.forwarded) {
	case "x-forwarded-for":
		ip.Header = httplimit.XForwardedFor
	case "forwarded":
		ip.Header = httplimit.Forwarded
	default:
		return nil, nil, fmt.Errorf("-forwarded-header %q: must be x-forwarded-for or forwarded", c.forwarded)
	}
	switch k := c.key; {
	case k == "ip":
		return ip.Key, ip, nil
	case k == "conn":
		return httplimit.KeyByConn, ip, nil
	case k == "path":
		return httplimit.KeyByPathAndIP(ip.Key), ip, nil
	case strings.HasPrefix(k, "header:"):
		name := strings.TrimPrefix(k, "header:")
		if name == "" || strings.ContainsAny(name, " \t:\r\n") {
			return nil, nil, fmt.Errorf("-key %q: header:NAME needs a header name", k)
		}
		return httplimit.KeyByHeader(name, ip.Key), ip, nil
	}
	return nil, nil, fmt.Errorf("-key %q: must be ip, header:NAME, conn or path", c.key)
}

// proxy is a configured reverse proxy: its handler (limits included), the listener wrapper of
// -conn-limit, its metrics, and what must be closed at the end.
type proxy struct {
	handler  http.Handler // the limited reverse proxy
	metrics  http.Handler
	wrapLn   func(net.Listener) net.Listener
	describe string
	closers  []func()
}

func (p *proxy) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// newProxy builds the proxy of c. Errors name the flag at fault.
func newProxy(c *proxyConfig, logger *log.Logger) (*proxy, error) {
	pol, up, err := c.validate()
	if err != nil {
		return nil, err
	}
	kf, ip, _ := keyFunc(c)
	px := &proxy{wrapLn: func(l net.Listener) net.Listener { return l }}
	ok := false
	defer func() {
		if !ok {
			px.close()
		}
	}()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slidelimit_decisions_total",
		Help: "Requests decided by the limiter, by outcome (denied requests still pass in -shadow mode).",
	}, []string{"decision"})
	allowed, denied := decisions.WithLabelValues("allowed"), decisions.WithLabelValues("denied")
	limiterErrors := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "slidelimit_limiter_errors_total",
		Help: "Requests for which the limiter returned an error (with -redis: decided by the in-process fallback).",
	})
	connRefused := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "slidelimit_connections_refused_total",
		Help: "Connections closed at accept by -conn-limit.",
	})
	shadow := prometheus.NewGauge(prometheus.GaugeOpts{Name: "slidelimit_shadow_mode", Help: "1 when the proxy runs with -shadow."})
	if c.shadow {
		shadow.Set(1)
	}
	reg.MustRegister(decisions, limiterErrors, connRefused, shadow)
	px.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})

	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			// Pass the chain on only when it came from a proxy we trust; a client's own
			// X-Forwarded-For is dropped, as the limiter ignored it.
			if trustedPeer(ip, pr.In) {
				pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			}
			pr.SetXForwarded()
		},
		Transport: upstreamTransport(),
		ErrorLog:  logger,
	}
	if c.unlimited {
		px.handler = rp
		px.describe = "no limits"
		ok = true
		return px, nil
	}

	// The in-process limiter decides alone, or stands in for Redis while Redis fails. A policy
	// that only Redis runs goes without a fallback: the store then fails open.
	local, err := engine.New(pol)
	switch {
	case err != nil && c.redisURL == "":
		return nil, fmt.Errorf("-policy %s: %w", c.policyID, err)
	case err != nil:
		logger.Printf("note: the in-process engine cannot run %s (%v); while Redis fails, requests are admitted", c.policyID, err)
		local = nil
	default:
		px.closers = append(px.closers, func() { local.Close() })
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "slidelimit_keys_tracked",
			Help: "Keys tracked by the in-process limiter (with -redis: the fallback's, used while Redis fails).",
		}, func() float64 { return float64(local.Len()) }))
	}

	var lim httplimit.Limiter
	mode := httplimit.FailOpen
	if c.redisURL != "" {
		rs, err := newRedisLimiter(c, pol, local, reg, logger)
		if err != nil {
			return nil, err
		}
		px.closers = append(px.closers, rs.close)
		lim, mode = rs.lim, httplimit.TrustDecision
		px.describe = fmt.Sprintf("%s, %d per %v per %s, on Redis %s", c.policyID, c.limit, c.window, c.key, redactURL(c.redisURL))
	} else {
		lim = httplimit.Local(local)
		px.describe = fmt.Sprintf("%s, %d per %v per %s, in process", c.policyID, c.limit, c.window, c.key)
	}
	if c.shadow {
		px.describe += ", shadow mode"
	}

	mw := &httplimit.Middleware{
		Limiter:   lim,
		Quota:     httplimit.QuotaOf(c.name, pol),
		KeyFunc:   kf,
		ErrorMode: mode,
		Shadow:    c.shadow,
		OnDecision: func(_ *http.Request, _ string, d engine.Decision) {
			if d.Allowed {
				allowed.Inc()
			} else {
				denied.Inc()
			}
		},
		OnError: func(_ *http.Request, _ string, _ error) { limiterErrors.Inc() },
	}
	if err := mw.Validate(); err != nil {
		return nil, err
	}
	px.handler = mw.Wrap(rp)

	if c.connLimit > 0 {
		cp, err := buildPolicy(c.policyID, c.connLimit, c.window)
		if err != nil {
			return nil, fmt.Errorf("-conn-limit: %w", err)
		}
		connLim, err := engine.New(cp)
		if err != nil {
			return nil, fmt.Errorf("-conn-limit with -policy %s: %w", c.policyID, err)
		}
		px.closers = append(px.closers, func() { connLim.Close() })
		px.wrapLn = func(l net.Listener) net.Listener {
			return &httplimit.Listener{
				Listener: l, Limiter: httplimit.Local(connLim), IPv6Prefix: c.ipv6Prefix,
				OnRefused: func(net.Conn, engine.Decision) { connRefused.Inc() },
			}
		}
		px.describe += fmt.Sprintf(", %d new connections per %v per address", c.connLimit, c.window)
	}
	ok = true
	return px, nil
}

// trustedPeer reports whether r came straight from one of the trusted proxies.
func trustedPeer(ip *httplimit.ClientIP, r *http.Request) bool {
	peer := new(httplimit.ClientIP).Addr(r)
	for _, p := range ip.TrustedProxies {
		if peer.IsValid() && p.Contains(peer) {
			return true
		}
	}
	return false
}

// upstreamTransport keeps enough idle connections to the upstream for a busy proxy; the default
// of two per host would open (and leave in TIME_WAIT) a connection for most requests.
func upstreamTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	t.IdleConnTimeout = 90 * time.Second
	return t
}

type redisLimiter struct {
	lim   *redisstore.Limiter
	close func()
}

// newRedisLimiter connects to -redis, with local (if not nil) as the fallback while Redis fails,
// and exports the store's failures and fallbacks.
func newRedisLimiter(c *proxyConfig, pol policy.Policy, local *engine.Limiter, reg *prometheus.Registry, logger *log.Logger) (*redisLimiter, error) {
	opt, err := redis.ParseURL(c.redisURL)
	if err != nil {
		return nil, fmt.Errorf("-redis %q: %v", redactURL(c.redisURL), err)
	}
	// The store bounds each call with a context deadline; go-redis honours it only when told to.
	opt.ContextTimeoutEnabled = true
	client := redis.NewClient(opt)
	var opts []redisstore.Option
	if local != nil {
		opts = append(opts, redisstore.WithFallback(local))
	}
	lim, err := redisstore.New(client, c.name, pol, opts...)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("-redis with -policy %s: %w", c.policyID, err)
	}
	// Redis being down at start is not a configuration error: the fallback decides until it
	// answers. Say so once, so that an operator is not surprised.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		logger.Printf("warning: Redis at %s does not answer (%v); deciding in process until it does", redactURL(c.redisURL), err)
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "slidelimit_redis_errors_total",
			Help: "Calls to Redis that failed (timeout, connection error, error reply).",
		}, func() float64 { return float64(statsOf(lim).Failures) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "slidelimit_redis_fallbacks_total",
			Help: "Requests decided by the in-process fallback because Redis failed or its circuit breaker was open.",
		}, func() float64 { s := statsOf(lim); return float64(s.Failures + s.ShortCircuits) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "slidelimit_redis_breaker_open",
			Help: "1 while the circuit breaker in front of Redis is open.",
		}, func() float64 {
			if statsOf(lim).BreakerOpen {
				return 1
			}
			return 0
		}),
	)
	return &redisLimiter{lim: lim, close: func() { lim.Close(); client.Close() }}, nil
}

// redactURL hides a password in a Redis URL for logs and errors.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}

func proxyMain(args []string, _, stderr io.Writer) error {
	c, fs := proxyFlags(stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	logger := log.New(stderr, "slidelimit proxy: ", log.LstdFlags)
	px, err := newProxy(c, logger)
	if err != nil {
		return usageErr(fs, "%v", err)
	}
	defer px.close()

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("-listen %q: %v", c.listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", px.handler)
	servers := []*http.Server{{Handler: mux, ConnContext: httplimit.ConnContext, ReadHeaderTimeout: 10 * time.Second, ErrorLog: logger}}
	listeners := []net.Listener{px.wrapLn(ln)}
	if c.metricsListen == "" {
		mux.Handle("/metrics", px.metrics)
	} else {
		mln, err := net.Listen("tcp", c.metricsListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("-metrics-listen %q: %v", c.metricsListen, err)
		}
		mm := http.NewServeMux()
		mm.Handle("/metrics", px.metrics)
		servers = append(servers, &http.Server{Handler: mm, ReadHeaderTimeout: 10 * time.Second, ErrorLog: logger})
		listeners = append(listeners, mln)
		logger.Printf("metrics on http://%s/metrics", mln.Addr())
	}
	logger.Printf("listening on %s, forwarding to %s; %s", ln.Addr(), c.upstream, px.describe)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, len(servers))
	for i, s := range servers {
		go func() { errc <- s.Serve(listeners[i]) }()
	}
	select {
	case err := <-errc:
		for _, s := range servers {
			s.Close()
		}
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	stop()
	logger.Printf("shutting down: waiting up to %v for requests in flight", c.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	var firstErr error
	for _, s := range servers {
		if err := s.Shutdown(sctx); err != nil && firstErr == nil {
			firstErr = err
			s.Close()
		}
	}
	if firstErr != nil {
		return fmt.Errorf("shutdown: %w", firstErr)
	}
	logger.Printf("stopped")
	return nil
}

// statsOf returns the Redis limiter's counters as a value.
func statsOf(l *redisstore.Limiter) redisstore.Stats {
	var s redisstore.Stats
	l.Stats(&s)
	return s
}
