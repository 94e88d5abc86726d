package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/net/http/httpguts"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/internal/forwarded"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/redisstore/batched"
)

type proxyConfig struct {
	listen          string
	upstream        string
	limit           int64
	window          time.Duration
	rates           []rate
	policyID        string
	key             string
	trusted         string
	forwarded       string
	ipv6Prefix      int
	connLimit       int64
	redisURL        string
	redisMode       string
	onRedisError    string
	redisTimeout    time.Duration
	denyMaxAge      time.Duration
	fleetSize       int
	maxKeys         int
	expectedKeys    int
	maxDelay        time.Duration
	maxWaiting      int
	problem         bool
	shadow          bool
	name            string
	metricsListen   string
	tlsCert         string
	tlsKey          string
	tlsClientCA     string
	h2c             bool
	upstreamH2C     bool
	shutdownTimeout time.Duration
	upstreamTimeout time.Duration // for the upstream's response headers; 0: none
	idleTimeout     time.Duration
	configPath      string
	configPoll      time.Duration
	exemptPaths     string
	exemptCIDRs     string
	logFormat       string
	logAdmitted     int
	logRefused      int

	// set holds the flags given on the command line.
	set map[string]bool

	// unlimited builds the proxy without any limiter: the baseline of "slidelimit load".
	unlimited bool
	// clk, when set, is the in-process limiters' clock and the RateLimit fields' time: tests
	// pin it to make every field exact.
	clk *clock.Clock
}

const proxySynopsis = "-upstream URL [-listen ADDR] [-tls-cert FILE -tls-key FILE [-tls-client-ca FILE]] [-h2c] [-rate LIMIT/WINDOW ...] [-policy NAME] [-key ip|header:NAME|conn|path] [-config FILE] [-trusted-proxies LIST] [-redis URL] [-metrics-listen ADDR] [flags]"

func proxyFlags(stderr io.Writer) (*proxyConfig, *flag.FlagSet) {
	c := &proxyConfig{}
	fs := newFlagSet("proxy", proxySynopsis, stderr)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "address to listen on (host:port; port 0 picks a free one)")
	fs.StringVar(&c.upstream, "upstream", "", "URL of the server to forward to (required), e.g. http://127.0.0.1:9000; without user information, which is not sent")
	fs.Var(rateFlags{&c.rates}, "rate", "a limit, `LIMIT/WINDOW`: 10/1s, 1000/1h, 10r/m, 5/90s; repeat it for several limits, all of which must admit a request (instead of -limit and -window)")
	fs.Int64Var(&c.limit, "limit", 100, "requests admitted per key per window (the one-limit form of -rate)")
	c.window = time.Minute
	fs.Var(durationFlag{&c.window}, "window", "the `duration` of -limit's window (and of -conn-limit's), with a unit: 500ms, 60s, 1h, 1d")
	fs.StringVar(&c.policyID, "policy", "sliding-counter", "policy: "+strings.Join(policyIDs, ", "))
	fs.StringVar(&c.key, "key", "ip", "what a limit applies to: ip (the client address), header:NAME (a header's value; clients without it by ip), conn (each connection), path (each path per client address)")
	fs.StringVar(&c.configPath, "config", "", "YAML file of per-route rules and exemptions; reloaded on SIGHUP and when it changes")
	c.configPoll = 2 * time.Second
	fs.Var(durationFlag{d: &c.configPoll}, "config-poll", "how often to check -config for changes (a `duration`), applied once the file has stayed the same for one more check; 0: only on SIGHUP")
	fs.Var(listFlag{&c.exemptPaths}, "exempt-paths", "a comma-separated `LIST` of path prefixes never limited, e.g. /healthz,/ready; paths are matched as http.ServeMux cleans them; repeated, the lists add up")
	fs.Var(listFlag{&c.exemptCIDRs}, "exempt-cidrs", "a comma-separated `LIST` of client ranges or addresses never limited; repeated, the lists add up")
	fs.Var(listFlag{&c.trusted}, "trusted-proxies", "a comma-separated `LIST` of CIDR ranges or addresses of proxies in front of this one, whose forwarding headers name the client; repeated, the lists add up")
	fs.StringVar(&c.forwarded, "forwarded-header", "x-forwarded-for", "the header trusted proxies write the client chain into: x-forwarded-for or forwarded")
	fs.IntVar(&c.ipv6Prefix, "ipv6-prefix", 64, "group IPv6 clients by this prefix length (0 or 128: each address alone)")
	fs.Int64Var(&c.connLimit, "conn-limit", 0, "new connections admitted per TCP peer address per -window (always 1m with -rate, which -window cannot be given with), closed at accept; behind -trusted-proxies the peer is the load balancer, whose clients share its allowance (0: no connection limit)")
	fs.IntVar(&c.maxKeys, "max-keys", 0, "keys each in-process limiter tracks at most; a new key beyond is refused with 503 (0: the engine's default, 2^26)")
	fs.IntVar(&c.expectedKeys, "expected-keys", 0, "size each in-process limiter's tables for this many keys at start, about 20 bytes each for millions, more each for fewer (twice that for limits above 2^21 a window, which need two-word cells), so that none grows on the way to them; not with -redis (0: start empty and grow)")
	c.maxDelay = 0
	fs.Var(durationFlag{d: &c.maxDelay}, "max-delay", "let a request over the limit wait up to this `duration` for its turn instead of refusing it, like nginx's delay (0: refuse at once)")
	fs.IntVar(&c.maxWaiting, "max-waiting", 0, "with -max-delay: requests of one rule that may wait at once; beyond, a request is refused at once (0: 1024)")
	fs.BoolVar(&c.problem, "problem-json", false, "answer refusals, and the proxy's own errors (502, 503, 504), with an RFC 9457 application/problem+json body")
	fs.StringVar(&c.redisURL, "redis", "", "decide on Redis at this URL (redis://[:password@]host:port/db), shared by every proxy using it")
	fs.StringVar(&c.redisMode, "redis-mode", "exact", "with -redis: exact (one Redis round trip per decision) or batched (quota leased from Redis in batches, decided in process; sliding-counter only)")
	fs.StringVar(&c.onRedisError, "on-redis-error", "local", "when Redis fails or is slow: open (admit), closed (refuse with 503) or local (decide in process, each proxy enforcing its -fleet-size share; with -redis-mode batched, its share of the fleet last heard from Redis)")
	c.redisTimeout = redisstore.DefaultTimeout
	fs.Var(durationFlag{d: &c.redisTimeout}, "redis-timeout", "the deadline of each Redis call, a `duration` in [1ms, 1m]")
	fs.Var(durationFlag{d: &c.denyMaxAge}, "redis-deny-max-age", "with -redis-mode exact: answer a key Redis refused in process for at most this long (a `duration`, 0 or at least 1ms), so that a reset made elsewhere or a key Redis lost is seen within it (0: until its retry time)")
	fs.IntVar(&c.fleetSize, "fleet-size", 1, "how many proxies share the Redis limits: while Redis fails, each enforces limit/N (rounded down, at least 1); with -redis-mode batched, also the fleet size a proxy assumes until Redis first answers (after that, the count last heard from Redis)")
	fs.BoolVar(&c.shadow, "shadow", false, "decide, count and export metrics, but never refuse a request")
	fs.StringVar(&c.name, "name", "default", "the command line's limits' name in the RateLimit fields, metrics and Redis keys")
	fs.StringVar(&c.metricsListen, "metrics-listen", "", "serve /metrics on this address (metrics are never served on -listen)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "serve HTTPS on -listen (HTTP/1.1 and HTTP/2) with the PEM certificate chain in this `file` (with -tls-key); read again when it changes, for new connections")
	fs.StringVar(&c.tlsKey, "tls-key", "", "the PEM private key `file` of -tls-cert")
	fs.StringVar(&c.tlsClientCA, "tls-client-ca", "", "with -tls-cert: require each client to present a certificate signed by a CA in this PEM `file` (mutual TLS)")
	fs.BoolVar(&c.h2c, "h2c", false, "also accept HTTP/2 without TLS on -listen, by prior knowledge (as load balancers and gRPC clients speak it to a backend); not with -tls-cert, which offers HTTP/2 by ALPN")
	fs.BoolVar(&c.upstreamH2C, "upstream-h2c", false, "speak HTTP/2 without TLS, by prior knowledge, to an http:// -upstream (a gRPC server, say); an https:// one is offered HTTP/2 by ALPN already")
	c.shutdownTimeout = 10 * time.Second
	c.upstreamTimeout = time.Minute
	fs.Var(durationFlag{d: &c.upstreamTimeout}, "upstream-timeout", "how long (a `duration`) to wait for the upstream's response headers once a request is sent; past it the client gets 504 (0: no limit)")
	fs.Var(durationFlag{d: &c.shutdownTimeout}, "shutdown-timeout", "how long (a `duration`) in-flight requests, upgraded connections (WebSockets) included, may take to finish after SIGTERM")
	c.idleTimeout = 120 * time.Second
	fs.Var(durationFlag{d: &c.idleTimeout}, "idle-timeout", "how long (a `duration`) a client's keep-alive connection may stay idle between requests before it is closed")
	fs.StringVar(&c.logFormat, "log-format", "text", "log lines as text or json (log/slog), on stderr")
	fs.IntVar(&c.logAdmitted, "log-admitted", 0, "log one admitted request in N (0: none)")
	fs.IntVar(&c.logRefused, "log-refused", 1, "log one refused request in N (0: none)")
	return c, fs
}

var clientIPHeaders = []string{"X-Real-Ip", "True-Client-Ip", "X-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip", "X-Cluster-Client-Ip"}

// forwardingHeaders are the headers whose value from an untrusted peer never reaches the upstream:
// the client-address ones, and those rewrite replaces.
var forwardingHeaders = append([]string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"}, clientIPHeaders...)

// dropUnderscoreSpellings removes every header that names one of forwardingHeaders with '_' for
// '-' (X_Real_IP, X-Forwarded_For), in any case. CGI and WSGI servers read both spellings as one
// variable (HTTP_X_REAL_IP), so such a header would pass for the real one. Proxies write the
// dashed spelling, so an underscore one came from a client, whoever the peer is: it always goes.
func dropUnderscoreSpellings(h http.Header) {
	for name := range h {
		if !strings.Contains(name, "_") {
			continue
		}
		dashed := strings.ReplaceAll(name, "_", "-")
		for _, f := range forwardingHeaders {
			if strings.EqualFold(dashed, f) {
				delete(h, name)
				break
			}
		}
	}
}

// validate checks the flags that need no network, returning an error that names the flag and
// the value, and the default rule: the command line's limits.
func (c *proxyConfig) validate() (ruleSpec, *url.URL, error) {
	var def ruleSpec
	if c.set == nil {
		// A proxyConfig built in code (the load generator's) leaves these at zero: take the
		// flags' defaults.
		c.redisMode, c.onRedisError, c.redisTimeout, c.fleetSize, c.logFormat = "exact", "local", redisstore.DefaultTimeout, 1, "text"
	}
	if c.upstream == "" {
		return def, nil, errors.New("-upstream is required: the URL of the server to forward to, like -upstream http://127.0.0.1:9000")
	}
	if !strings.Contains(c.upstream, "://") {
		// "127.0.0.1:9000" and "localhost:9000" fail to parse, or parse as a scheme, which
		// explains nothing: say what is missing.
		shown := redactURL(c.upstream)
		return def, nil, fmt.Errorf("-upstream %q: no scheme: write a URL, like http://%s", shown, shown)
	}
	up, err := url.Parse(c.upstream)
	if err != nil {
		// The parser's message quotes the URL: written with its password hidden, as every
		// -upstream error is.
		return def, nil, fmt.Errorf("-upstream %q: %v", redactURL(c.upstream), redisstore.RedactText(err.Error(), c.upstream))
	}
	// Errors quote the flag as written: a URL parsed and written again can differ from it
	// ("http://" comes back as "http:"). Its password, in the user part or a password= option,
	// is hidden.
	shown := redactURL(c.upstream)
	if up.Scheme != "http" && up.Scheme != "https" || up.Hostname() == "" {
		return def, nil, fmt.Errorf("-upstream %q: must be an http:// or https:// URL with a host", shown)
	}
	if err := checkPort(up); err != nil {
		return def, nil, fmt.Errorf("-upstream %q: %v", shown, err)
	}
	if c.upstreamH2C && up.Scheme != "http" {
		return def, nil, fmt.Errorf("-upstream-h2c with -upstream %q: HTTP/2 without TLS needs an http:// upstream; an https:// one is offered HTTP/2 by ALPN already", shown)
	}
	if strings.Contains(c.upstream, "#") {
		// A fragment is never sent: the upstream would not see what it seems to say.
		return def, nil, fmt.Errorf("-upstream %q: has a #fragment, which is never sent to the upstream: remove it", shown)
	}
	if up.User != nil {
		// The reverse proxy sends the URL's scheme, host and path, never its user information:
		// the credentials would be printed in the log and never reach the upstream.
		return def, nil, fmt.Errorf("-upstream %q: has a user part, and credentials in the URL are not sent to the upstream: remove it, and have the upstream trust the proxy another way (its address, a network policy, mTLS)", shown)
	}
	if len(c.rates) > 0 && (c.set["limit"] || c.set["window"]) {
		return def, nil, fmt.Errorf("-rate %s: give either -rate or -limit and -window, not both", rateFlags{&c.rates})
	}
	rates := c.rates
	if len(rates) == 0 {
		if c.limit < 1 || c.limit > policy.MaxLimit {
			return def, nil, fmt.Errorf("-limit %d: must be in [1, %d]", c.limit, int64(policy.MaxLimit))
		}
		if err := checkWindow(c.window); err != nil {
			return def, nil, fmt.Errorf("-window %s: %v", typed(&c.window), err)
		}
		rates = []rate{{c.limit, c.window}}
	}
	if err := checkRates(rates); err != nil {
		return def, nil, fmt.Errorf("-rate: %v", err)
	}
	if !contains(policyIDs, c.policyID) {
		return def, nil, fmt.Errorf("-policy %q: unknown policy; one of %s", c.policyID, strings.Join(policyIDs, ", "))
	}
	for _, r := range rates {
		if _, _, _, err := buildRate(c.policyID, r, c.fleet()); err != nil {
			if len(c.rates) == 0 {
				return def, nil, fmt.Errorf("-policy %s -limit %d -window %s: %v", c.policyID, r.limit, shortDuration(r.window), err)
			}
			return def, nil, fmt.Errorf("-policy %s -rate %s: %v", c.policyID, r, err)
		}
	}
	if err := checkKey(c.key); err != nil {
		return def, nil, fmt.Errorf("-key %v", err)
	}
	if _, err := c.clientIP(); err != nil {
		return def, nil, err
	}
	if c.connLimit < 0 || c.connLimit > policy.MaxLimit {
		return def, nil, fmt.Errorf("-conn-limit %d: must be in [0, %d]", c.connLimit, int64(policy.MaxLimit))
	}
	if err := checkKeyCounts(c.maxKeys, c.expectedKeys); err != nil {
		return def, nil, err
	}
	if c.expectedKeys > 0 && c.redisURL != "" {
		return def, nil, fmt.Errorf("-expected-keys %d: sizes in-process limits, and with -redis there are none", c.expectedKeys)
	}
	if c.maxKeys > 0 && c.redisURL != "" && c.redisMode == "batched" {
		// Exact mode's cap bounds its in-process fallback; batched mode keeps an entry per key
		// with no cap, so the flag would be taken and do nothing.
		return def, nil, fmt.Errorf("-max-keys %d: caps in-process limiters, and -redis-mode batched has no key cap", c.maxKeys)
	}
	if c.maxDelay < 0 || c.maxDelay > time.Minute {
		return def, nil, fmt.Errorf("-max-delay %v: must be in [0, 1m]", typed(&c.maxDelay))
	}
	if c.maxWaiting < 0 {
		return def, nil, fmt.Errorf("-max-waiting %d: must be 0 (the default, 1024) or more", c.maxWaiting)
	}
	// As the Redis-only flags are: set without what it qualifies, a flag changes nothing, and
	// setting it says that the other was meant to be given.
	if c.set["max-waiting"] && c.maxDelay == 0 {
		return def, nil, fmt.Errorf("-max-waiting %d: needs -max-delay (without it no request waits, so nothing is bounded)", c.maxWaiting)
	}
	if c.ipv6Prefix < 0 || c.ipv6Prefix > 128 {
		return def, nil, fmt.Errorf("-ipv6-prefix %d: must be in [0, 128]", c.ipv6Prefix)
	}
	if c.shutdownTimeout <= 0 {
		return def, nil, fmt.Errorf("-shutdown-timeout %v: must be positive, like 10s", typed(&c.shutdownTimeout))
	}
	if c.upstreamTimeout < 0 {
		return def, nil, fmt.Errorf("-upstream-timeout %v: must be 0 (no limit) or positive, like 60s", typed(&c.upstreamTimeout))
	}
	if c.idleTimeout <= 0 && c.set != nil {
		return def, nil, fmt.Errorf("-idle-timeout %v: must be positive, like 120s", typed(&c.idleTimeout))
	}
	if c.configPoll < 0 {
		return def, nil, fmt.Errorf("-config-poll %v: must be 0 (SIGHUP only) or positive, like 2s", typed(&c.configPoll))
	}
	if c.set["config-poll"] && c.configPath == "" {
		return def, nil, fmt.Errorf("-config-poll %v: needs -config FILE (there is no file to watch)", typed(&c.configPoll))
	}
	if c.name == "" || strings.ContainsAny(c.name, " {}:\"\\") || !isPrintableASCII(c.name) || len(c.name) > 64 {
		return def, nil, fmt.Errorf("-name %q: must be 1 to 64 printable ASCII characters without spaces, braces, quotes, backslashes or ':'", c.name)
	}
	switch c.redisMode {
	case "exact":
	case "batched":
		if c.redisURL == "" {
			return def, nil, errors.New("-redis-mode batched: needs -redis URL")
		}
		if c.policyID != "sliding-counter" {
			// Refused here, before a second spent dialling Redis: batched leases sliding-counter
			// quota only.
			return def, nil, fmt.Errorf("-redis-mode batched with -policy %s: batched mode decides the sliding-counter policy only; use -policy sliding-counter, or -redis-mode exact", c.policyID)
		}
	default:
		return def, nil, fmt.Errorf("-redis-mode %q: must be exact (one Redis round trip per decision) or batched (quota leased from Redis, decided in process)", c.redisMode)
	}
	if _, err := slidelimit.ParseFailureMode(c.onRedisError); err != nil {
		return def, nil, fmt.Errorf("-on-redis-error %q: must be open, closed or local", c.onRedisError)
	}
	if err := checkRedisTimeout(&c.redisTimeout); err != nil {
		return def, nil, err
	}
	if err := checkDenyMaxAge(&c.denyMaxAge, c.redisMode); err != nil {
		return def, nil, err
	}
	if c.fleetSize < 1 || c.fleetSize > 1<<20 {
		return def, nil, fmt.Errorf("-fleet-size %d: must be in [1, %d]", c.fleetSize, 1<<20)
	}
	if err := checkRedisOnly(c.set, c.redisURL,
		redisFlag{"redis-mode", c.redisMode}, redisFlag{"on-redis-error", c.onRedisError}, redisFlag{"redis-timeout", c.redisTimeout},
		redisFlag{"redis-deny-max-age", c.denyMaxAge}, redisFlag{"fleet-size", c.fleetSize}); err != nil {
		return def, nil, err
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return def, nil, fmt.Errorf("-log-format %q: must be text or json", c.logFormat)
	}
	if c.logAdmitted < 0 || c.logRefused < 0 {
		return def, nil, fmt.Errorf("-log-admitted %d -log-refused %d: must be 0 (none) or N (one in N)", c.logAdmitted, c.logRefused)
	}
	if _, err := c.exempt(); err != nil {
		return def, nil, err
	}
	def = ruleSpec{name: c.name, rates: rates, policyID: c.policyID, key: c.key}
	return def, up, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// fleet is the number of processes whose local fallback shares each limit.
func (c *proxyConfig) fleet() int {
	if c.redisURL == "" {
		return 1
	}
	return c.fleetSize
}

// exempt returns the command line's exemptions as a configSpec without rules.
func (c *proxyConfig) exempt() (*configSpec, error) {
	spec := &configSpec{}
	for p := range strings.SplitSeq(c.exemptPaths, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("-exempt-paths %q: %q must start with /", c.exemptPaths, p)
		}
		if err := checkCleanPath(p); err != nil {
			return nil, fmt.Errorf("-exempt-paths %q: %v", c.exemptPaths, err)
		}
		spec.exemptPaths = append(spec.exemptPaths, p)
	}
	ps, err := httplimit.ParsePrefixes(c.exemptCIDRs)
	if err != nil {
		return nil, fmt.Errorf("-exempt-cidrs %q: %v", c.exemptCIDRs, strings.TrimPrefix(err.Error(), "httplimit: trusted proxy "))
	}
	spec.exemptCIDRs = ps
	return spec, nil
}

// buildRate returns the policy for r under id, in units scaled by k, and the fallback's policy
// for one of fleet processes (the same when fleet is 1). Errors leave out the policy and the rate,
// which the caller names as the command line or the file gave them.
func buildRate(id string, r rate, fleet int) (p, local policy.Policy, k int64, err error) {
	share := fleetShare(r.limit, fleet)
	k = 1
	if isBucket(id) {
		if k, err = bucketScale(r.window, r.limit, share); err != nil {
			return nil, nil, 0, err
		}
	}
	if p, err = policyFor(id, r.limit, r.window, k); err != nil {
		return nil, nil, 0, err
	}
	if local, err = policyFor(id, share, r.window, k); err != nil {
		return nil, nil, 0, err
	}
	return p, local, k, nil
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func checkKey(k string) error {
	switch {
	case k == "ip", k == "conn", k == "path":
		return nil
	case strings.HasPrefix(k, "header:"):
		name := strings.TrimPrefix(k, "header:")
		if name == "" {
			return fmt.Errorf("%q: header:NAME needs a header name, like header:X-Api-Key", k)
		}
		// A name that is not an HTTP token can never arrive: Go's server answers 400 to a
		// request carrying one, so every client would be keyed as if it sent none.
		for _, r := range name {
			if !httpguts.IsTokenRune(r) {
				return fmt.Errorf("%q: header name %q has %q, which a header name cannot hold (letters, digits and !#$%%&'*+-.^_`|~ only), like header:X-Api-Key", k, name, r)
			}
		}
		// Go's server takes these out of the header map (Host is read from the request itself).
		switch http.CanonicalHeaderKey(name) {
		case "Transfer-Encoding", "Trailer":
			return fmt.Errorf("%q: the header %s never reaches the limiter (Go's server takes it out of the request's header map); key on another header, like header:X-Api-Key", k, name)
		}
		return nil
	}
	return fmt.Errorf("%q: must be ip, header:NAME, conn or path", k)
}

// clientIP returns the ClientIP that keys clients by -trusted-proxies, -forwarded-header and
// -ipv6-prefix.
func (c *proxyConfig) clientIP() (*httplimit.ClientIP, error) {
	trusted, err := httplimit.ParsePrefixes(c.trusted)
	if err != nil {
		return nil, fmt.Errorf("-trusted-proxies %q: %v", c.trusted, err)
	}
	bits := c.ipv6Prefix
	if bits == 0 {
		bits = 128 // the flag's 0 keeps each address alone
	}
	ip := &httplimit.ClientIP{TrustedProxies: trusted, IPv6Prefix: bits}
	switch strings.ToLower(c.forwarded) {
	case "x-forwarded-for":
		ip.Header = httplimit.XForwardedFor
	case "forwarded":
		ip.Header = httplimit.Forwarded
	default:
		return nil, fmt.Errorf("-forwarded-header %q: must be x-forwarded-for or forwarded", c.forwarded)
	}
	return ip, nil
}

// keyFunc returns the middleware's key function for key.
func keyFunc(key string, ip *httplimit.ClientIP) func(*http.Request) string {
	switch {
	case key == "conn":
		return httplimit.KeyByConn
	case key == "path":
		byPath := httplimit.KeyByPathAndIP(ip.Key)
		return func(r *http.Request) string {
			if !strings.Contains(r.URL.Path, ";") {
				return byPath(r)
			}
			// Keyed without its ;parameters, as rules match it (see withoutParams): a client
			// varying them (/a;x=1, /a;x=2) would otherwise get a fresh allowance each time
			// for what a servlet container serves as one path.
			u := *r.URL
			u.Path = withoutParams(u.Path)
			r2 := *r
			r2.URL = &u
			return byPath(&r2)
		}
	case strings.HasPrefix(key, "header:"):
		return httplimit.KeyByHeader(strings.TrimPrefix(key, "header:"), ip.Key)
	}
	return ip.Key
}

// proxy is a configured reverse proxy: its handler (limits included), the listener wrapper of
// -conn-limit, its metrics, and what must be closed at the end.
type proxy struct {
	handler  http.Handler // the limited reverse proxy
	metrics  http.Handler
	wrapLn   func(net.Listener) net.Listener
	describe string
	closers  []func()
	upstream *url.URL // -upstream, parsed
	// stopWaiting is closed when the proxy starts shutting down: requests waiting under
	// -max-delay are then refused with Retry-After, not held until the grace period cuts them.
	stopWaiting chan struct{}

	c     *proxyConfig
	def   ruleSpec
	ip    *httplimit.ClientIP
	rp    http.Handler
	log   *slog.Logger
	redis redis.UniversalClient
	state atomic.Pointer[proxyState]
	m     *proxyMetrics
	mu    sync.Mutex // serializes reloads and guards built and waiting
	built map[string]*builtLimit
	// waiting is each rule's count of requests waiting under -max-delay, by rule name, kept
	// across reloads so that -max-waiting bounds the requests of the old rule and the new one
	// together.
	waiting map[string]*httplimit.Waiting
	closed  bool

	configSeen     os.FileInfo           // -config as it was just before start-up read it
	retired        []*redisstore.Limiter // Redis limiters a reload dropped, not yet closed, whose counts the metrics keep
	retiredBatched []*batched.Limiter    // the same in -redis-mode batched
	retiring       []*builtLimit         // limits a reload dropped, closed after -shutdown-timeout
	// The counts of the Redis limiters closed after a reload, summed (addCounts): the metrics keep
	// them without keeping the limiters, whose fallback tables would otherwise stay in memory.
	closedExact   redisstore.Stats
	closedBatched batched.Stats
	logSecret     [32]byte // the access log's key for hashing keys (logKey), drawn at start
	// reloadMu orders the reloads' log lines against stopping: once quiet is set, as the proxy
	// starts to stop, a reload still running logs nothing, so no line follows "stopped".
	reloadMu     sync.Mutex
	quiet        bool
	errLogged    atomic.Uint64
	admittedSeen atomic.Uint64
	refusedSeen  atomic.Uint64
}

// proxyState is one configuration, built and then only read; a reload swaps in a new one.
type proxyState struct {
	rules       []*liveRule
	exemptPaths []string
	exemptCIDRs []netip.Prefix
	limits      []*builtLimit
}

type liveRule struct {
	spec    ruleSpec
	handler http.Handler
	limits  []*builtLimit
}

// builtLimit is one limit of one rule, with its limiter. A reload that keeps a limit (same
// name, policy and parameters) keeps its limiter, and so every key's count.
type builtLimit struct {
	sig   string
	lim   httplimit.Limiter
	quota httplimit.Quota
	eng   *engine.Limiter // the in-process limiter, or Redis' fallback; nil: none
	// refunds: lim gives units back, so that a request a later limit refuses is not charged
	// here (see httplimit.Middleware).
	refunds bool
	rs      *redisstore.Limiter
	bl      *batched.Limiter // -redis-mode batched
	once    sync.Once
	rule    atomic.Pointer[string] // the rule name the latency histogram is labelled with
}

func (b *builtLimit) close() {
	b.once.Do(func() {
		if b.rs != nil {
			b.rs.Close()
		}
		if b.bl != nil {
			b.bl.Close()
		}
		if b.eng != nil {
			b.eng.Close()
		}
	})
}

// close releases the limiters and the Redis client. Safe to call more than once: run calls it
// before its last line, and again on its way out.
func (p *proxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	built, retiring := p.built, p.retiring
	p.built, p.retiring = nil, nil
	p.mu.Unlock()
	// At once: a batched limiter's Close on a hung Redis takes a few -redis-timeout.
	var wg sync.WaitGroup
	for _, b := range built {
		wg.Go(b.close)
	}
	for _, b := range retiring {
		wg.Go(b.close)
	}
	wg.Wait()
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// newProxy builds the proxy of c with the command line's limits only, logging to logger. Errors
// name the flag at fault.
func newProxy(c *proxyConfig, logger *log.Logger) (*proxy, error) {
	return buildProxy(c, slog.New(slog.NewTextHandler(logger.Writer(), nil)))
}

type proxyMetrics struct {
	reg        *prometheus.Registry
	decisions  *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	errors     prometheus.Counter
	exempted   *prometheus.CounterVec
	reloads    *prometheus.CounterVec
	lastReload prometheus.Gauge
	rules      prometheus.Gauge
	connRef    prometheus.Counter
}

func newMetrics(c *proxyConfig, p *proxy) *proxyMetrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &proxyMetrics{
		reg: reg,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slidelimit_decisions_total",
			Help: "Requests decided, by rule, decision (allowed, denied) and reason (ok, limited, cost_above_limit, key_cap, negative_cost, closed, invalid_limit; redis_error: decided by -on-redis-error open or closed, Redis having failed); denied requests still pass in -shadow mode.",
		}, []string{"rule", "decision", "reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slidelimit_decision_duration_seconds",
			Help:    "Time each limiter took to decide one limit of one request, by rule (with -redis: the round trip).",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}, []string{"rule"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slidelimit_limiter_errors_total",
			Help: "Limiter calls that returned an error (with -redis: decided as -on-redis-error says).",
		}),
		exempted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slidelimit_exempt_total",
			Help: "Requests passed without limiting, by why (path, cidr).",
		}, []string{"why"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slidelimit_config_reloads_total",
			Help: "Reloads of -config, by result (ok, error); a failed reload keeps the last good configuration.",
		}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slidelimit_config_last_reload_success_timestamp_seconds",
			Help: "When the configuration in use was loaded, in Unix seconds.",
		}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{Name: "slidelimit_rules", Help: "Rules in the configuration in use, the command line's default rule included."}),
		connRef: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slidelimit_connections_refused_total",
			Help: "Connections closed at accept by -conn-limit.",
		}),
	}
	shadow := prometheus.NewGauge(prometheus.GaugeOpts{Name: "slidelimit_shadow_mode", Help: "1 when the proxy runs with -shadow."})
	if c.shadow {
		shadow.Set(1)
	}
	v := buildVersion()
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slidelimit_build_info", Help: "Always 1; its labels say which build runs."}, []string{"version", "revision", "goversion"})
	info.WithLabelValues(v.version, v.revision, v.goVersion).Set(1)
	// Every documented series exists from the start, at 0, so that a rate() or an alert on it
	// works before its first event; apply does the same for each rule's decisions.
	for _, why := range []string{"path", "cidr"} {
		m.exempted.WithLabelValues(why)
	}
	for _, result := range []string{"ok", "error"} {
		m.reloads.WithLabelValues(result)
	}
	reg.MustRegister(m.decisions, m.latency, m.errors, m.exempted, m.reloads, m.lastReload, m.rules, m.connRef, shadow, info)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "slidelimit_keys_tracked",
		Help: "Keys held in process by the limiters of the configuration in use: without -redis, the limiters' keys; with -redis-mode exact, the -on-redis-error local fallbacks' (0 with open or closed); with -redis-mode batched, the keys each limiter has an entry for, by which it also decides while Redis is away.",
	}, func() float64 {
		n := 0
		if st := p.state.Load(); st != nil {
			var bs batched.Stats
			for _, b := range st.limits {
				if b.eng != nil {
					n += b.eng.Len()
				}
				if b.bl != nil {
					b.bl.Stats(&bs)
					n += bs.Keys
				}
			}
		}
		return float64(n)
	}))
	return m
}

// buildProxy builds the proxy of c. Errors name the flag at fault.
func buildProxy(c *proxyConfig, logger *slog.Logger) (*proxy, error) {
	def, up, err := c.validate()
	if err != nil {
		return nil, err
	}
	ip, _ := c.clientIP()
	px := &proxy{c: c, def: def, ip: ip, upstream: up, stopWaiting: make(chan struct{}), log: logger, built: map[string]*builtLimit{}, wrapLn: func(l net.Listener) net.Listener { return l }}
	rand.Read(px.logSecret[:]) // never fails: it ends the process where the system has no randomness
	ok := false
	defer func() {
		if !ok {
			px.close()
		}
	}()
	px.m = newMetrics(c, px)
	px.metrics = promhttp.HandlerFor(px.m.reg, promhttp.HandlerOpts{Registry: px.m.reg})

	for _, p := range ip.TrustedProxies {
		if p.Bits() == 0 || p.Addr().Is4() && p.Bits() < 8 || p.Addr().Is6() && !p.Addr().Is4In6() && p.Bits() < 16 {
			logger.Warn("WARNING: -trusted-proxies " + p.String() + " trusts a large part of the Internet: any client there can choose its own key by sending X-Forwarded-For or Forwarded. List only the addresses of your own load balancers.")
		}
	}

	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { rewrite(pr, up, ip) },
		Transport: upstreamTransport(c.upstreamTimeout, c.upstreamH2C),
		// What the ReverseProxy logs beside its ErrorHandler (a body cut short) goes through the
		// command's log too, in its format (see proxyErrLog).
		ErrorLog: proxyErrLog(logger),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			bodyFailed, malformed := clientBodyFailed(r)
			if malformed {
				// The client's body broke its own framing: the client may still be reading, and
				// the fault is its own, not the upstream's. At DEBUG, as a client's abort is.
				logger.Debug("request body malformed: "+err.Error(), "path", truncate(r.URL.Path, logPathBytes))
				px.badRequest(w, "the request body is malformed")
				return
			}
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil || bodyFailed {
				// The client went away (before the answer, or partway through its body), or
				// shutdown cut the request off: no fault of the upstream's, and nobody reads the
				// answer. At ERROR it would fire alerts on every rollout, and let any client
				// write ERROR lines at will.
				// Its access-log line says 499, nginx's "client closed request", not 502, so
				// that client aborts are not counted as upstream failures.
				logger.Debug("request cancelled before the upstream answered", "path", truncate(r.URL.Path, logPathBytes))
				w.WriteHeader(statusClientClosed)
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// No answer in time (-upstream-timeout, or the dial's): the gateway timed out.
				logger.Error("http: proxy error: upstream did not answer in time: "+err.Error(), "path", truncate(r.URL.Path, logPathBytes))
				upstreamFailed(w, c.problem, http.StatusGatewayTimeout, "the upstream did not answer in time")
				return
			}
			logger.Error("http: proxy error: "+err.Error(), "path", truncate(r.URL.Path, logPathBytes))
			upstreamFailed(w, c.problem, http.StatusBadGateway, "the upstream could not be reached or gave no valid answer")
		},
	}
	px.rp = keepPipelined(watchClientBody(rp))
	if c.unlimited {
		px.handler = px.rp
		px.describe = "no limits"
		ok = true
		return px, nil
	}

	if c.redisURL != "" {
		// NewClient understands cluster and sentinel URLs too, and finds a cluster behind a URL
		// that names one of its nodes.
		client, err := redisstore.NewClient(c.redisURL)
		if err != nil {
			return nil, fmt.Errorf("-redis: %w", err)
		}
		px.redis = client
		px.closers = append(px.closers, func() { client.Close() })
		// Redis being down at start is not a configuration error: the failure mode decides
		// until it answers. Say so once, so that an operator is not surprised.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = client.Ping(ctx).Err()
		cancel()
		if err != nil {
			logger.Warn("Redis does not answer; deciding as -on-redis-error says until it does", "redis", redactURL(c.redisURL), "on-redis-error", c.onRedisError, "error", redisErrText(err, c.redisURL))
		}
		px.registerRedisMetrics()
	}

	spec, err := c.exempt()
	if err != nil {
		return nil, err
	}
	if c.configPath != "" {
		// Seen before it is read, so that an edit made while the proxy starts is newer than what
		// the watcher compares with, and is picked up at its first poll.
		px.configSeen, _ = os.Stat(c.configPath)
		fileSpec, err := parseConfigFile(c.configPath, def)
		if err != nil {
			return nil, fmt.Errorf("-config %v", err)
		}
		fileSpec.exemptPaths = append(spec.exemptPaths, fileSpec.exemptPaths...)
		fileSpec.exemptCIDRs = append(spec.exemptCIDRs, fileSpec.exemptCIDRs...)
		spec = fileSpec
	} else {
		spec.rules = []ruleSpec{def}
	}
	if err := px.apply(spec); err != nil {
		return nil, err
	}
	px.handler = http.HandlerFunc(px.serve)

	where := "in process"
	if c.redisURL != "" {
		where = "on Redis " + redactURL(c.redisURL) + ", -on-redis-error " + c.onRedisError
		if c.fleetSize > 1 {
			where += fmt.Sprintf(" (each of %d proxies enforcing its share)", c.fleetSize)
		}
	}
	px.describe = fmt.Sprintf("%s, %s per %s, %s", c.policyID, rateFlags{&def.rates}, c.key, where)
	if n := len(spec.rules) - 1; n > 0 {
		noun := "rules"
		if n == 1 {
			noun = "rule"
		}
		px.describe += fmt.Sprintf(", %d %s from %s", n, noun, c.configPath)
	}
	if c.shadow {
		px.describe += ", shadow mode"
	}

	if c.connLimit > 0 {
		cp, _, k, err := buildRate(c.policyID, rate{c.connLimit, c.window}, 1)
		if err != nil {
			return nil, fmt.Errorf("-conn-limit %d with -policy %s -window %s: %w", c.connLimit, c.policyID, shortDuration(c.window), err)
		}
		var opts []engine.Option
		if c.clk != nil {
			opts = append(opts, engine.WithClock(c.clk))
		}
		connLim, err := engine.New(cp, opts...)
		if err != nil {
			return nil, fmt.Errorf("-conn-limit with -policy %s: %w", c.policyID, err)
		}
		px.closers = append(px.closers, func() { connLim.Close() })
		conns := &scaled{lim: connLim.AsLimiter(), k: k}
		px.wrapLn = func(l net.Listener) net.Listener {
			return &httplimit.Listener{
				Listener: l, Limiter: conns, IPv6Prefix: ip.IPv6Prefix,
				Skip: px.exemptConn, Shadow: c.shadow,
				OnRefused: func(net.Conn, engine.Decision) { px.m.connRef.Inc() },
			}
		}
		px.describe += fmt.Sprintf(", %d new connections per %v per address", c.connLimit, c.window)
	}
	ok = true
	return px, nil
}

// exemptConn reports whether a new connection's peer is in an exempt range of the configuration
// in use (reloads included), which -conn-limit then neither counts nor closes, as the request
// path forwards its requests without a decision. Safe for concurrent use: it reads px.state.
func (px *proxy) exemptConn(c net.Conn) bool {
	a, ok := c.RemoteAddr().(*net.TCPAddr)
	st := px.state.Load()
	if !ok || st == nil {
		return false
	}
	ip := a.AddrPort().Addr().Unmap().WithZone("")
	for _, p := range st.exemptCIDRs {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func (px *proxy) registerRedisMetrics() {
	// Each counter sums over every Redis limiter built so far, of either mode: exact's stats, and
	// batched's for the same event (a failed call; a decision made without Redis, which batched
	// makes alone while offline). The gauge (a limiter not deciding through Redis now) sums the
	// limiters in use only: one a reload retired keeps the state it closed in, and would hold the
	// gauge up for good.
	sum := func(exact func(redisstore.Stats) float64, fleet func(batched.Stats) float64, withRetired bool) func() float64 {
		return func() float64 {
			px.mu.Lock()
			defer px.mu.Unlock()
			var total float64
			rs, bs := px.allRedis(withRetired)
			if withRetired {
				total += exact(px.closedExact) + fleet(px.closedBatched)
			}
			for _, b := range rs {
				var s redisstore.Stats
				b.Stats(&s)
				total += exact(s)
			}
			for _, b := range bs {
				var s batched.Stats
				b.Stats(&s)
				total += fleet(s)
			}
			return total
		}
	}
	one := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	px.m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "slidelimit_redis_errors_total",
			Help: "Calls to Redis that failed (timeout, connection error, error reply).",
		}, sum(func(s redisstore.Stats) float64 { return float64(s.Failures) },
			func(s batched.Stats) float64 { return float64(s.Failures) }, true)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "slidelimit_redis_fallbacks_total",
			Help: "Decisions made without Redis, one per limit of a request: by -on-redis-error because Redis failed or its circuit breaker was open (exact mode), or while Redis was unreachable or after an error reply about the key (batched mode: by -on-redis-error open or closed, or alone on the process's share of the limit under local).",
		}, sum(func(s redisstore.Stats) float64 { return float64(s.Failures + s.ShortCircuits) },
			func(s batched.Stats) float64 { return float64(s.OfflineDecisions) }, true)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "slidelimit_redis_breaker_open",
			Help: "How many Redis limiters are not deciding through Redis now: their circuit breaker is open (exact mode), or they are offline (batched mode); 0 when Redis is healthy.",
		}, sum(func(s redisstore.Stats) float64 { return one(s.BreakerOpen) },
			func(s batched.Stats) float64 { return one(s.Offline) }, false)),
	)
}

// allRedis lists the Redis limiters in use, exact and batched, and withRetired those a reload
// has replaced too; px.mu must be held.
func (px *proxy) allRedis(withRetired bool) ([]*redisstore.Limiter, []*batched.Limiter) {
	var rs []*redisstore.Limiter
	var bs []*batched.Limiter
	for _, b := range px.built {
		if b.rs != nil {
			rs = append(rs, b.rs)
		}
		if b.bl != nil {
			bs = append(bs, b.bl)
		}
	}
	if !withRetired {
		return rs, bs
	}
	return append(rs, px.retired...), append(bs, px.retiredBatched...)
}

// apply builds spec's rules and swaps them in. Limits the new configuration keeps keep their
// limiters (and counts); the others are closed once requests that may still use them are done.
// On an error nothing changes.
func (px *proxy) apply(spec *configSpec) error {
	px.mu.Lock()
	defer px.mu.Unlock()
	if px.closed {
		return errors.New("proxy closed")
	}
	st := &proxyState{exemptPaths: spec.exemptPaths, exemptCIDRs: spec.exemptCIDRs}
	fresh := map[string]*builtLimit{}
	waiting := map[string]*httplimit.Waiting{}
	abort := func() {
		for sig, b := range fresh {
			if px.built[sig] != b {
				b.close()
			}
		}
	}
	for _, rs := range spec.rules {
		var limits []*builtLimit
		for _, r := range rs.rates {
			b, err := px.limitFor(rs, r, len(rs.rates) > 1)
			if err != nil {
				abort()
				var ek *expectedKeysError
				if errors.As(err, &ek) {
					// The flag's tables, not the rule, are what does not fit: whichever limit
					// was being built when they ran out is only where it showed.
					where := fmt.Sprintf("rule %s, %s", rs.name, r)
					if rs.where != "" {
						where = fmt.Sprintf("-config %s: %s: rates: %s", px.c.configPath, rs.where, r)
					}
					return &expectedKeysError{n: ek.n, where: where, each: "each limit of each rule", err: ek.err}
				}
				if rs.where != "" {
					return fmt.Errorf("-config %s: %s: rates: %s: %w", px.c.configPath, rs.where, r, err)
				}
				return fmt.Errorf("rule %s, %s: %w", rs.name, r, err)
			}
			if _, dup := fresh[b.sig]; !dup {
				fresh[b.sig] = b
			}
			limits = append(limits, fresh[b.sig])
		}
		st.limits = append(st.limits, limits...)
		w := px.waiting[rs.name]
		if w == nil {
			w = new(httplimit.Waiting)
		}
		waiting[rs.name] = w
		st.rules = append(st.rules, &liveRule{spec: rs, handler: px.ruleHandler(rs, limits, w), limits: limits})
	}
	var retire []*builtLimit
	for sig, b := range px.built {
		if fresh[sig] == nil {
			retire = append(retire, b)
			if b.rs != nil {
				px.retired = append(px.retired, b.rs)
			}
			if b.bl != nil {
				px.retiredBatched = append(px.retiredBatched, b.bl)
			}
		}
	}
	// The most Redis calls a request routed to the old configuration may still be making: one
	// per rate of its rule, and as many to give back a refused request's takes.
	calls := 0
	if old := px.state.Load(); old != nil && px.redis != nil {
		for _, lr := range old.rules {
			calls = max(calls, 2*len(lr.limits))
		}
	}
	px.built, px.waiting = fresh, waiting
	px.state.Store(st)
	for _, lr := range st.rules {
		px.initRuleMetrics(lr.spec.name)
	}
	for i, rs := range spec.rules {
		px.warnNoRefund(rs, st.rules[i])
	}
	px.m.rules.Set(float64(len(st.rules)))
	px.m.lastReload.SetToCurrentTime()
	if len(retire) > 0 {
		// Requests already past the router may still ask the old limiters: close them after
		// the longest such a request is given at shutdown, plus the longest it may wait for its
		// turn under -max-delay before it asks, plus its Redis calls (or when the proxy closes).
		// Closed under a request still deciding, a limiter answered it 503, not -on-redis-error's
		// decision.
		px.retiring = append(px.retiring, retire...)
		time.AfterFunc(px.c.shutdownTimeout+px.c.maxDelay+time.Duration(calls)*px.c.redisTimeout, func() { px.release(retire) })
	}
	return nil
}

// addExactCounts adds b's counters to a; the gauges (BreakerOpen, DenyCacheKeys) describe a limiter
// in use, and are left alone.
func addExactCounts(a *redisstore.Stats, b redisstore.Stats) {
	a.Calls += b.Calls
	a.RoundTrips += b.RoundTrips
	a.DenyCacheHits += b.DenyCacheHits
	a.Failures += b.Failures
	a.ShortCircuits += b.ShortCircuits
	a.BreakerOpens += b.BreakerOpens
}

// addBatchedCounts is addExactCounts for fleet mode's counters (not Fleet, Offline or Keys).
func addBatchedCounts(a *batched.Stats, b batched.Stats) {
	a.Leases += b.Leases
	a.Exchanges += b.Exchanges
	a.Returns += b.Returns
	a.Charges += b.Charges
	a.OfflineDecisions += b.OfflineDecisions
	a.RefusedLocally += b.RefusedLocally
	a.Failures += b.Failures
}

// release closes limits a reload retired and lets them go, keeping only the counts the metrics
// sum: every reload that changes a limit would otherwise keep the old limiter's tables until the
// process exits.
func (px *proxy) release(retire []*builtLimit) {
	for _, b := range retire {
		b.close()
	}
	px.mu.Lock()
	defer px.mu.Unlock()
	for _, b := range retire {
		if b.rs != nil && slices.Contains(px.retired, b.rs) {
			var s redisstore.Stats
			b.rs.Stats(&s)
			addExactCounts(&px.closedExact, s)
			px.retired = slices.DeleteFunc(px.retired, func(r *redisstore.Limiter) bool { return r == b.rs })
		}
		if b.bl != nil && slices.Contains(px.retiredBatched, b.bl) {
			var s batched.Stats
			b.bl.Stats(&s)
			addBatchedCounts(&px.closedBatched, s)
			px.retiredBatched = slices.DeleteFunc(px.retiredBatched, func(r *batched.Limiter) bool { return r == b.bl })
		}
	}
	px.retiring = slices.DeleteFunc(px.retiring, func(b *builtLimit) bool { return slices.Contains(retire, b) })
}

// initRuleMetrics creates rule's decision series at 0: every reason a decision can have, each with
// the decision it goes with, and its latency histogram.
func (px *proxy) initRuleMetrics(rule string) {
	for r := range reasonLabels {
		decision := "denied"
		if slidelimit.Reason(r) == slidelimit.ReasonOK {
			decision = "allowed"
		}
		px.m.decisions.WithLabelValues(rule, decision, reasonLabel(slidelimit.Reason(r)))
	}
	if decides, allowed := px.failureDecides(); decides {
		decision := "denied"
		if allowed {
			decision = "allowed"
		}
		px.m.decisions.WithLabelValues(rule, decision, reasonRedisError)
	}
	px.m.latency.WithLabelValues(rule)
}

// warnNoRefund says, at start and on each reload, when a rule is not all or nothing: httplimit
// asks the limits that cannot give units back last, so one of them is harmless, but with two or
// more a request refused by a later one stays counted by the earlier ones.
func (px *proxy) warnNoRefund(rs ruleSpec, lr *liveRule) {
	n := 0
	for _, b := range lr.limits {
		if !b.refunds {
			n++
		}
	}
	if n < 2 {
		return
	}
	why := "-policy " + rs.policyID
	if rs.where != "" {
		why = "policy " + rs.policyID
	}
	if px.c.redisMode == "batched" && px.redis != nil {
		why = "-redis-mode batched"
	}
	px.log.Warn(fmt.Sprintf("rule %s: %d of its limits cannot give units back (%s): a request refused by a later limit stays counted by the earlier ones", rs.name, n, why),
		"rule", rs.name, "rates", rateFlags{&rs.rates}.String())
}

// limitFor returns the limit r of rule rs: the one built before when nothing about it changed,
// else a new one. px.mu is held.
func (px *proxy) limitFor(rs ruleSpec, r rate, several bool) (*builtLimit, error) {
	c := px.c
	// A file's rule names its policy as the file does, the command line's as the flag.
	pol := "-policy " + rs.policyID
	if rs.where != "" {
		pol = "policy " + rs.policyID
	}
	p, local, k, err := buildRate(rs.policyID, r, c.fleet())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pol, err)
	}
	name := rs.name
	if several {
		name += "-" + r.label()
	}
	storeName := c.name
	if rs.name != px.def.name {
		storeName += "." + rs.name
	}
	if several {
		storeName += "-" + r.label()
	}
	// What identifies a limit's counts: in process, the rule and the policy; on Redis, the keys'
	// name too. The name in the fields is left out, so that a rule given a second rate (which
	// renames its first limit "rule-1m") keeps the first one's counts.
	id := rs.name
	if px.redis != nil {
		id = storeName
	}
	sig := fmt.Sprintf("%s|%#v|%#v|%d", id, p, local, k)
	if b := px.built[sig]; b != nil {
		b.quota.Name = name // read only by the handlers built under px.mu, each into its own copy
		return b, nil
	}
	var opts []engine.Option
	if c.maxKeys > 0 {
		opts = append(opts, engine.WithMaxKeys(c.maxKeys))
	}
	if c.clk != nil {
		opts = append(opts, engine.WithClock(c.clk))
	}
	b := &builtLimit{sig: sig, quota: httplimit.Quota{Name: name, Limit: r.limit, Window: r.window}}
	b.rule.Store(&rs.name)
	sc := &scaled{k: k}
	sc.onTake = func(d time.Duration) { px.m.latency.WithLabelValues(*b.rule.Load()).Observe(d.Seconds()) }
	if px.redis == nil {
		// Only here (-expected-keys is refused with -redis): the -on-redis-error local fallback
		// holds keys only while Redis is away, and would hold the memory all the time.
		eng, err := newPresized(p, c.expectedKeys, opts...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pol, err)
		}
		b.eng, sc.lim, sc.eng = eng, eng.AsLimiter(), eng
		if canRefund(p) {
			b.lim, b.refunds = refundable{peekable{sc}}, true
		} else {
			b.lim = peekable{sc}
		}
		return b, nil
	}
	mode, _ := slidelimit.ParseFailureMode(c.onRedisError)
	if c.redisMode == "batched" {
		// -fleet-size is also the size a proxy started while Redis is down assumes until a
		// heartbeat answers: without it each such proxy would take the whole limit alone.
		bopts := []batched.Option{batched.WithTimeout(c.redisTimeout), batched.WithInitialFleetSize(c.fleetSize), batched.WithOfflineMode(mode)}
		if c.clk != nil {
			bopts = append(bopts, batched.WithClock(c.clk))
		}
		bl, err := batched.New(px.redis, storeName, p, bopts...)
		if err != nil {
			return nil, fmt.Errorf("-redis-mode batched with %s: %w", pol, err)
		}
		b.bl, sc.lim, b.lim = bl, offlineAs{bl, mode}, sc
		return b, nil
	}
	ropts := []redisstore.Option{redisstore.WithTimeout(c.redisTimeout), redisstore.WithOnFailure(mode), redisstore.WithDenyCacheMaxAge(c.denyMaxAge)}
	if mode == slidelimit.FailLocal {
		eng, err := engine.New(local, opts...)
		if err != nil {
			return nil, fmt.Errorf("-on-redis-error local with %s: %w", pol, err)
		}
		b.eng = eng
		ropts = append(ropts, redisstore.WithFallback(eng))
	}
	lim, err := redisstore.New(px.redis, storeName, p, ropts...)
	if err != nil {
		if b.eng != nil {
			b.eng.Close()
		}
		return nil, fmt.Errorf("-redis with %s: %w", pol, err)
	}
	b.rs, sc.lim, b.lim = lim, lim, sc
	// redisstore gives back what the engine gives back (not the sliding log's entries). A
	// Limiter that would give nothing back is left without Refund, so that httplimit asks it
	// after those that can.
	if rf, ok := any(lim).(storeRefunder); ok && canRefund(p) {
		b.lim, b.refunds = storeRefundable{sc, rf}, true
	}
	return b, nil
}

// offlineAs applies -on-redis-error to what the batched mode decides while Redis is away: local
// (the default) keeps its decision, made with the limit divided by the fleet size last heard from
// Redis (-fleet-size until Redis first answers); open admits; closed refuses. While Redis answers,
// its decisions stand as they are. The limiter must be built with batched.WithOfflineMode(mode),
// so that open and closed count nothing (a refused request consumes nothing, in Redis later
// either), and so that its errors, which the logs print with their cause, say what the mode did.
type offlineAs struct {
	l    *batched.Limiter
	mode slidelimit.FailureMode
}

func (o offlineAs) Take(ctx context.Context, key string, n int64) (slidelimit.Decision, error) {
	d, err := o.l.Take(ctx, key, n)
	if err == nil || !errors.Is(err, batched.ErrOffline) {
		return d, err
	}
	switch o.mode {
	case slidelimit.FailOpen:
		return slidelimit.Decision{Allowed: true, Limit: d.Limit, Reason: slidelimit.ReasonOK}, err
	case slidelimit.FailClosed:
		return slidelimit.Decision{Limit: d.Limit, Reason: slidelimit.ReasonLimited, RetryAfter: time.Second}, err
	}
	return d, err
}

func (o offlineAs) Policy() policy.Policy { return o.l.Policy() }

// Close closes the batched limiter, giving back its leases.
func (o offlineAs) Close() error { return o.l.Close() }

// storeRefunder is a store that gives units back (redisstore.Limiter), which httplimit then uses
// to keep several limits all or nothing.
type storeRefunder interface {
	Refund(ctx context.Context, key string, n int64, d slidelimit.Decision) (int64, error)
}

type storeRefundable struct {
	*scaled
	rf storeRefunder
}

func (s storeRefundable) Refund(ctx context.Context, key string, n int64, d slidelimit.Decision) (int64, error) {
	if n <= 0 || n > math.MaxInt64/s.k {
		return 0, nil
	}
	g, err := s.rf.Refund(ctx, key, n*s.k, d)
	return g / s.k, err
}

// now is the time of the RateLimit fields: the limiters' clock.
func (px *proxy) now() time.Time {
	if px.c.clk != nil {
		return time.UnixMilli(px.c.clk.Now())
	}
	return time.Now()
}

// requestInfo is what the access log learns of a request while it is served.
type requestInfo struct {
	key     string
	decided bool
	d       engine.Decision
	failed  bool   // a limiter returned an error
	reason  string // the reason label, when not d.Reason's
}

// upstreamFailed answers a request the upstream did not: with no body, as the standard library's
// reverse proxy does, or under -problem-json with an RFC 9457 problem, so that a client that
// parses the proxy's refusals as problems can parse every error of the proxy's own the same way.
// The detail says what failed, never the upstream's address or the error's text, which are for
// the log.
func upstreamFailed(w http.ResponseWriter, problem bool, status int, detail string) {
	if !problem {
		w.WriteHeader(status)
		return
	}
	httplimit.WriteProblem(w, status, detail)
}

// badRequest answers a request the proxy refuses to forward: in plain text, or under
// -problem-json as a problem, as the proxy's other errors are.
func (px *proxy) badRequest(w http.ResponseWriter, detail string) {
	if !px.c.problem {
		http.Error(w, detail, http.StatusBadRequest)
		return
	}
	httplimit.WriteProblem(w, http.StatusBadRequest, detail)
}

// statusClientClosed is the status logged for a request whose client went away before the
// upstream answered (nginx's 499); nobody receives it.
const statusClientClosed = 499

// reasonRedisError is the reason label of a request that -on-redis-error open or closed decided:
// no limit could decide it, Redis having failed.
const reasonRedisError = "redis_error"

// failureDecides reports whether -on-redis-error decides the requests no limit could decide
// (open admits them, closed refuses them), and which way: allowed.
func (px *proxy) failureDecides() (decides, allowed bool) {
	if px.redis == nil {
		return false, false
	}
	mode, _ := slidelimit.ParseFailureMode(px.c.onRedisError)
	return mode == slidelimit.FailOpen || mode == slidelimit.FailClosed, mode == slidelimit.FailOpen
}

type infoKey struct{}

// ruleHandler is the limited reverse proxy of one rule, with its metrics and access log.
func (px *proxy) ruleHandler(rs ruleSpec, limits []*builtLimit, waiting *httplimit.Waiting) http.Handler {
	c := px.c
	// In process the only error is a closed limiter's, whose Decision (ReasonClosed) FailLocal
	// answers 503, as the README says; FailOpen would forward the request uncounted.
	mode := httplimit.FailLocal
	if px.redis != nil {
		mode, _ = slidelimit.ParseFailureMode(c.onRedisError)
	}
	var more []httplimit.Limit
	for _, b := range limits[1:] {
		more = append(more, httplimit.Limit{Limiter: b.lim, Quota: b.quota})
	}
	rule := rs.name
	mw := &httplimit.Middleware{
		Limiter: limits[0].lim, Quota: limits[0].quota, Limits: more,
		KeyFunc: keyFunc(rs.key, px.ip), ErrorMode: mode, Shadow: c.shadow,
		Problem: c.problem, MaxDelay: c.maxDelay, MaxWaiting: c.maxWaiting, Waiting: waiting, StopWaiting: px.stopWaiting, Now: px.now,
		OnDecision: func(r *http.Request, key string, d engine.Decision) {
			decision := "allowed"
			if !d.Allowed {
				decision = "denied"
			}
			px.m.decisions.WithLabelValues(rule, decision, reasonLabel(d.Reason)).Inc()
			if ri, ok := r.Context().Value(infoKey{}).(*requestInfo); ok {
				ri.key, ri.decided, ri.d = key, true, d
			}
		},
		OnError: func(r *http.Request, key string, err error) {
			px.m.errors.Inc()
			if ri, ok := r.Context().Value(infoKey{}).(*requestInfo); ok && !ri.failed {
				ri.failed = true
				if !ri.decided {
					ri.key = key
				}
			}
			if px.errLogged.Add(1)%1000 == 1 {
				px.log.Warn("limiter error (logged once in 1000)", "rule", rule, "error", redisErrText(err, c.redisURL))
			}
		},
	}
	inner := mw.Wrap(keepForFinal(px.rp))
	failDecides, failAllows := px.failureDecides()
	logs := c.logAdmitted != 0 || c.logRefused != 0
	if !logs && !failDecides {
		return inner
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri := &requestInfo{}
		var sw *statusWriter
		if logs {
			sw = &statusWriter{ResponseWriter: w}
			w = sw
		}
		start := time.Now()
		inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), infoKey{}, ri)))
		if ri.failed && !ri.decided && failDecides {
			// Redis failed and no limit decided: the middleware never reports such a request to
			// OnDecision, but -on-redis-error decided it, admitted (open) or refused (closed).
			ri.decided, ri.reason = true, reasonRedisError
			ri.d = engine.Decision{Allowed: failAllows}
			if secs, err := strconv.Atoi(w.Header().Get("Retry-After")); err == nil && !failAllows {
				// The refusal's wait is the one its 503 sent (the circuit breaker's, at least a
				// second): no limit decided, so no Decision holds it. (An admission's header, if
				// any, is the upstream's.)
				ri.d.RetryAfter = time.Duration(secs) * time.Second
			}
			decision := "denied"
			if failAllows {
				decision = "allowed"
			}
			px.m.decisions.WithLabelValues(rule, decision, reasonRedisError).Inc()
		}
		if logs && !c.shadow && ri.decided && !ri.d.Allowed && ri.d.Reason == engine.ReasonLimited {
			// Retry-After may be a limit's that was not asked, with no unit left for longer than
			// the refusing limit's wait (see httplimit.Middleware): the log gives the wait the
			// client was sent, in the header's whole seconds when it is that longer one. (Under
			// -shadow no refusal sets the header: one there is the upstream's.)
			if secs, err := strconv.Atoi(w.Header().Get("Retry-After")); err == nil {
				own := max((ri.d.RetryAfter + time.Second - 1).Truncate(time.Second), time.Second) // as the header would give it
				if sent := time.Duration(secs) * time.Second; sent > own {
					ri.d.RetryAfter = sent
				}
			}
		}
		if logs {
			status := sw.status()
			if status == http.StatusTooManyRequests && r.Context().Err() != nil {
				// The client hung up while its request waited under -max-delay: the refusal
				// that ended the wait reached nobody. 499, as for a client that leaves before
				// the upstream answers, so that the log does not count it as a refusal sent.
				status = statusClientClosed
			}
			px.accessLog(r, rule, ri, status, time.Since(start))
		}
	})
}

// accessLog logs one request in -log-admitted (admitted) or -log-refused (refused), with its key
// hashed: the log never holds a client's address or API key.
func (px *proxy) accessLog(r *http.Request, rule string, ri *requestInfo, status int, took time.Duration) {
	if !ri.decided {
		return
	}
	var every int
	var n uint64
	if ri.d.Allowed {
		every, n = px.c.logAdmitted, px.admittedSeen.Add(1)
	} else {
		every, n = px.c.logRefused, px.refusedSeen.Add(1)
	}
	if every == 0 || (n-1)%uint64(every) != 0 {
		return
	}
	decision := "allowed"
	if !ri.d.Allowed {
		decision = "denied"
	}
	reason := ri.reason
	if reason == "" {
		reason = reasonLabel(ri.d.Reason)
	}
	px.log.Info("request", "rule", rule, "decision", decision, "reason", reason, "status", status,
		"key", px.logKey(ri.key), "method", truncate(r.Method, logMethodBytes), "path", truncate(r.URL.Path, logPathBytes),
		"remaining", ri.d.Remaining, "retry_after_ms", ri.d.RetryAfter.Milliseconds(), "duration_ms", float64(took.Microseconds())/1000,
		"sampled", every)
}

// logKey is how the access log writes a key: "hmac:" and the first 12 hex digits of its
// HMAC-SHA256 under the process's secret. A plain hash of a key drawn from a small space (every
// IPv4 address is 2^32 keys) is reversed by hashing them all, in seconds; without the secret it
// cannot be, and within the process one key still has one name, so that its lines can be told.
func (px *proxy) logKey(key string) string {
	m := hmac.New(sha256.New, px.logSecret[:])
	m.Write([]byte(key))
	return "hmac:" + hex.EncodeToString(m.Sum(nil)[:6])
}

// logPathBytes and logMethodBytes bound what a log line holds of the request's path and method,
// which the client chooses: whole, a megabyte-long one would be written for every request.
const logPathBytes, logMethodBytes = 128, 32

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Back to the start of a UTF-8 character, so that a path in another script is not cut in the
	// middle of one (the log would show its first bytes escaped, as if the path held them).
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			n = i
			break
		}
	}
	return s[:n] + "…"
}

var reasonLabels = [...]string{
	slidelimit.ReasonOK:             "ok",
	slidelimit.ReasonLimited:        "limited",
	slidelimit.ReasonCostAboveLimit: "cost_above_limit",
	slidelimit.ReasonNegativeCost:   "negative_cost",
	slidelimit.ReasonKeyCap:         "key_cap",
	slidelimit.ReasonClosed:         "closed",
	slidelimit.ReasonInvalidLimit:   "invalid_limit",
}

func reasonLabel(r slidelimit.Reason) string {
	if int(r) < len(reasonLabels) {
		return reasonLabels[r]
	}
	return "unknown"
}

// statusWriter remembers the status a handler wrote. Unwrap lets http.ResponseController (and
// the reverse proxy's flushing) reach the connection's writer.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && !interim(code) {
		w.code = code // a 103 Early Hints is not the request's status: the final one follows
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands the connection over for an upgrade (a WebSocket): the reverse proxy takes it only
// once the upstream has answered 101, which it then writes on the connection itself, past
// WriteHeader, so the status is recorded here.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.code == 0 {
		w.code = http.StatusSwitchingProtocols
	}
	return c, brw, err
}

// interim reports whether code is an informational response that a final one follows (101
// Switching Protocols ends the HTTP exchange, so it is final).
func interim(code int) bool {
	return code >= 100 && code < 200 && code != http.StatusSwitchingProtocols
}

// keepForFinal serves h, keeping the RateLimit fields the middleware set for the final response.
// The reverse proxy sends an upstream's 1xx response (103 Early Hints) with every header set so
// far and then clears them, so without this the 103 carried the fields and the final response
// none.
func keepForFinal(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&finalWriter{ResponseWriter: w}, r)
	})
}

// finalWriter holds the RateLimit fields back from 1xx responses and puts them on the final one,
// first, as if no 1xx had come (the upstream's own fields of those names follow).
type finalWriter struct {
	http.ResponseWriter
	saved http.Header
	final bool
}

var rateLimitFields = []string{"Ratelimit-Policy", "Ratelimit"} // canonical forms

func (w *finalWriter) WriteHeader(code int) {
	if w.final || !interim(code) {
		w.restore()
		w.ResponseWriter.WriteHeader(code)
		return
	}
	hdr := w.Header()
	if w.saved == nil {
		w.saved = http.Header{}
		for _, f := range rateLimitFields {
			if v, ok := hdr[f]; ok {
				w.saved[f] = v
			}
		}
	}
	for f := range w.saved {
		delete(hdr, f)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *finalWriter) restore() {
	if w.final {
		return
	}
	w.final = true
	hdr := w.Header()
	for f, v := range w.saved {
		hdr[f] = append(v[:len(v):len(v)], hdr[f]...)
	}
}

func (w *finalWriter) Write(b []byte) (int, error) {
	w.restore()
	return w.ResponseWriter.Write(b)
}

func (w *finalWriter) Flush() {
	w.restore()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *finalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// dotParam reports whether a segment of path p is "." or ".." followed by a ;parameter.
func dotParam(p string) bool {
	if !strings.Contains(p, ".;") {
		return false // nearly every path: one scan
	}
	for p != "" {
		var seg string
		seg, p, _ = strings.Cut(p, "/")
		if strings.HasPrefix(seg, ".;") || strings.HasPrefix(seg, "..;") {
			return true
		}
	}
	return false
}

// serve routes a request: exempt ones straight to the upstream, the others to the first rule
// that matches (the command line's rule matches everything).
func (px *proxy) serve(w http.ResponseWriter, r *http.Request) {
	if strings.ContainsRune(r.URL.Path, '\\') {
		// Some upstreams (IIS, and servers on Windows) read a backslash, sent as is or as %5C, as
		// a /: /healthz\..\api would pass here as exempt and be served there as /api, and
		// /admin\x would miss a rule for /admin/ and be served as /admin/x.
		px.badRequest(w, "the path holds a backslash, which some upstreams read as /")
		return
	}
	if dotParam(r.URL.Path) {
		// Servlet containers (Tomcat, Jetty) drop a segment's ;parameters before they resolve dot
		// segments: /healthz/..;/api would pass here as exempt and be served there as /api.
		px.badRequest(w, "the path holds a dot segment with a ;parameter (..;), which some upstreams read as ..")
		return
	}
	if r.Method == "PRI" {
		// HTTP/2's connection preface, cut or garbled, which net/http reads as an HTTP/1 request
		// when it is not the whole preface: forwarded, the upstream got "PRI /%2A HTTP/1.1". No
		// HTTP/1 client sends it.
		px.badRequest(w, "PRI is HTTP/2's connection preface, not a request: this one was malformed")
		return
	}
	if r.Method == http.MethodConnect && r.URL.Path == "" {
		// Authority-form (CONNECT host:port) asks for a tunnel: no rule's path would see it, and
		// the upstream would be sent "/".
		px.badRequest(w, "CONNECT host:port asks for a tunnel, and this proxy forwards to its upstream only")
		return
	}
	r, ok := cleanRequestPath(r)
	if !ok {
		px.badRequest(w, "the path's dot segments or repeated slashes involve an encoded / or .")
		return
	}
	st := px.state.Load()
	for _, p := range st.exemptPaths {
		if strings.HasPrefix(r.URL.Path, p) {
			px.m.exempted.WithLabelValues("path").Inc()
			px.rp.ServeHTTP(w, r)
			return
		}
	}
	if len(st.exemptCIDRs) > 0 {
		if a := px.ip.Addr(r); a.IsValid() {
			for _, p := range st.exemptCIDRs {
				if p.Contains(a) {
					px.m.exempted.WithLabelValues("cidr").Inc()
					px.rp.ServeHTTP(w, r)
					return
				}
			}
		}
	}
	if i := firstMatch(len(st.rules), func(i int) *ruleSpec { return &st.rules[i].spec }, r.Method, withoutParams(r.URL.Path)); i >= 0 {
		st.rules[i].handler.ServeHTTP(w, r)
		return
	}
	http.Error(w, "no rule matches", http.StatusInternalServerError) // unreachable: the default rule matches all
}

// cleanRequestPath returns r with its path in the form http.ServeMux routes by: dot segments
// resolved, repeated slashes merged, a trailing slash kept. Exempt prefixes, rules and -key path
// match that form, and the upstream is sent it too, so that /healthz/../api, //login or
// /x/../login are limited as the resource the upstream serves for them. The client's escaping is
// kept where it carries meaning (an encoded '/' in a segment). ok is false for a path that can be
// cleaned only by resolving an encoded '/' or '.' (/a%2F..%2Fb): upstreams disagree on what it
// names, so it is refused rather than limited as one resource and served as another. r itself is
// left alone, as http.StripPrefix does.
func cleanRequestPath(r *http.Request) (clean *http.Request, ok bool) {
	p := cleanPath(r.URL.Path)
	if p == r.URL.Path {
		return r, true
	}
	raw := ""
	if r.URL.RawPath != "" {
		raw = cleanPath(r.URL.RawPath)
		if dec, err := url.PathUnescape(raw); err != nil || dec != p {
			return r, false
		}
	}
	r2 := new(http.Request)
	*r2 = *r
	r2.URL = new(url.URL)
	*r2.URL = *r.URL
	r2.URL.Path, r2.URL.RawPath = p, raw
	return r2, true
}

// withoutParams returns p, a clean path, with each segment's ;parameters removed and the path
// cleaned again (/api;jsessionid=1/admin and /;x/api/admin are /api/admin), for matching rules:
// servlet containers (Tomcat, Jetty) drop them, and serve such a path as the one without, which a
// rule for /api/admin must therefore limit. Exemptions are matched on p as it is, so that a
// parameter can only add limits. (A segment that held only a parameter leaves an empty one,
// which the second cleaning merges: /;x/admin was //admin, which matched no rule for /admin.)
func withoutParams(p string) string {
	if !strings.Contains(p, ";") {
		return p
	}
	var b strings.Builder
	for i, seg := range strings.Split(p, "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		seg, _, _ = strings.Cut(seg, ";")
		b.WriteString(seg)
	}
	return cleanPath(b.String())
}

// checkCleanPath refuses a path prefix that a cleaned request path can never start with
// (/admin//, /a/./b): requests are matched in their clean form (see cleanRequestPath).
func checkCleanPath(p string) error {
	if c := cleanPath(p); c != p {
		return fmt.Errorf("%q is matched against clean paths, so write it as %q", p, c)
	}
	// Requests whose path holds a backslash are refused (400): a prefix holding one could never
	// match. (A %-escape in a prefix is literal text, matched against the decoded path.)
	if strings.Contains(p, `\`) {
		return fmt.Errorf("%q holds a backslash, which no request path the proxy forwards holds", p)
	}
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		// Prefixes match the path alone: "/search?q=x" would match no request's query, only a
		// path holding an encoded ? (%3F), which no one means by it.
		return fmt.Errorf("%q holds %q: prefixes match the request's path, never its query or fragment", p, p[i])
	}
	return nil
}

// cleanPath is http.ServeMux's: path.Clean, but "/" for an empty path and the trailing slash
// kept, as ServeMux's patterns "/api/" depend on it.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// reload reads -config again and swaps it in; a bad file keeps the configuration in use and says
// why.
func (px *proxy) reload(why string) {
	c := px.c
	if c.configPath == "" {
		px.logReload(func() { px.log.Info("nothing to reload: no -config file", "signal", why) })
		return
	}
	spec, err := parseConfigFile(c.configPath, px.def)
	if err == nil {
		var base *configSpec
		if base, err = c.exempt(); err == nil {
			spec.exemptPaths = append(base.exemptPaths, spec.exemptPaths...)
			spec.exemptCIDRs = append(base.exemptCIDRs, spec.exemptCIDRs...)
			err = px.apply(spec)
		}
	}
	if err != nil {
		px.m.reloads.WithLabelValues("error").Inc()
		px.logReload(func() {
			px.log.Error("config reload failed; keeping the last good configuration", "config", c.configPath, "trigger", why, "error", err)
		})
		return
	}
	px.m.reloads.WithLabelValues("ok").Inc()
	px.logReload(func() {
		px.log.Info("config reloaded", "config", c.configPath, "trigger", why, "rules", len(spec.rules))
	})
}

// logReload writes a reload's log line, unless the proxy has started to stop (quietReloads).
func (px *proxy) logReload(write func()) {
	px.reloadMu.Lock()
	defer px.reloadMu.Unlock()
	if !px.quiet {
		write()
	}
}

// quietReloads makes every later reload log nothing. It waits only for a line being written,
// not for a reload in progress, which may take a while for a large -config: a second stop
// signal must not wait for it.
func (px *proxy) quietReloads() {
	px.reloadMu.Lock()
	px.quiet = true
	px.reloadMu.Unlock()
}

// watchConfig reloads -config on SIGHUP and, every -config-poll, when its modification time or
// size changed and then stayed the same for one more poll, until ctx ends. A file rewritten in
// place is read half written if read between the writes; a prefix that parses (a rule list cut
// before a rule, a range cut to 10.0.0.0/1) was applied until the next poll, dropping rules and
// their counts or exempting half the Internet.
func (px *proxy) watchConfig(ctx context.Context, hup <-chan os.Signal) {
	var tick <-chan time.Time
	var last, pending os.FileInfo // last: what was loaded; pending: a change seen, not yet settled
	same := func(a, b os.FileInfo) bool {
		return a != nil && b != nil && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
	}
	if px.c.configPath != "" && px.c.configPoll > 0 {
		t := time.NewTicker(px.c.configPoll)
		defer t.Stop()
		tick = t.C
		last = px.configSeen
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if px.c.configPath != "" {
				last, _ = os.Stat(px.c.configPath)
				pending = nil
			}
			px.reload("SIGHUP")
		case <-tick:
			fi, err := os.Stat(px.c.configPath)
			if err != nil {
				if last != nil {
					// Counted once, when the file goes, as a SIGHUP's failed reload is: an alert on
					// the counter is how a deleted or renamed file gets noticed.
					px.m.reloads.WithLabelValues("error").Inc()
					px.logReload(func() {
						// The same line as a failed reload's, which is what an alert on the log matches.
						px.log.Error("config reload failed; keeping the last good configuration", "config", px.c.configPath, "trigger", "file gone", "error", err)
					})
				}
				last, pending = nil, nil
				continue
			}
			if same(fi, last) {
				pending = nil
				continue
			}
			if !same(fi, pending) {
				pending = fi // changed since the last poll: it may still be being written
				continue
			}
			last, pending = fi, nil
			px.reload("file changed")
		}
	}
}

// rewrite prepares the request to the upstream. From a trusted proxy, the forwarding headers it
// wrote (X-Forwarded-For, -Host, -Proto, Forwarded, and the client-address headers such as
// X-Real-IP) are kept, and this hop is appended where the header is a chain. From anyone else
// they are replaced with what this proxy sees, and the client-address headers are dropped, so
// that the upstream never reads an address a client chose; their underscore spellings are
// dropped from everyone.
func rewrite(pr *httputil.ProxyRequest, up *url.URL, ip *httplimit.ClientIP) {
	pr.SetURL(up)
	in, out := pr.In, pr.Out.Header
	dropUnderscoreSpellings(out)
	if strings.EqualFold(out.Get("Upgrade"), "h2c") {
		// A client's "Upgrade: h2c" asks this hop to switch to HTTP/2 (RFC 7540's handshake,
		// which RFC 9113 withdrew), which the proxy does not offer: the request is served as
		// HTTP/1.1, and the upstream is not asked to switch in its place.
		out.Del("Upgrade")
		out.Del("Connection")
	}
	trusted := trustedPeer(ip, in)
	// ReverseProxy removed the forwarding headers before Rewrite, and every header the request's
	// Connection field lists: those were for this hop alone (RFC 9110, 7.6.1), so a trusted
	// proxy's forwarding headers are copied back only where it did not list them.
	kept := func(name string) []string {
		if !trusted || httpguts.HeaderValuesContainsToken(in.Header["Connection"], name) {
			return nil
		}
		return in.Header[name]
	}
	if trusted {
		// Put back so that SetXForwarded extends the trusted chain instead of starting one.
		out["X-Forwarded-For"] = kept("X-Forwarded-For")
	} else {
		for _, h := range clientIPHeaders {
			delete(out, h)
		}
	}
	pr.SetXForwarded()
	if v := kept("X-Forwarded-Host"); len(v) > 0 {
		out["X-Forwarded-Host"] = v
	}
	if v := kept("X-Forwarded-Proto"); len(v) > 0 {
		out["X-Forwarded-Proto"] = v
	}
	peer := new(httplimit.ClientIP).Addr(in)
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	elem := "for=" + forwardedNode(peer) + ";host=" + strconv.Quote(in.Host) + ";proto=" + proto
	if fs := kept("Forwarded"); len(fs) > 0 {
		repaired := make([]string, len(fs))
		for i, f := range fs {
			repaired[i] = forwarded.Repair(f)
		}
		out["Forwarded"] = []string{strings.Join(repaired, ", ") + ", " + elem}
	} else {
		out["Forwarded"] = []string{elem}
	}
}

// forwardedNode writes a as an RFC 7239 node: IPv6 in brackets and quotes.
func forwardedNode(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return "unknown"
	case a.Is6():
		return `"[` + a.String() + `]"`
	}
	return a.String()
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
// of two per host would open (and leave in TIME_WAIT) a connection for most requests. headers
// bounds the wait for a response's headers (-upstream-timeout; 0: none).
func upstreamTransport(headers time.Duration, h2c bool) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = headers
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	t.IdleConnTimeout = 90 * time.Second
	if h2c {
		// Every request to an http:// upstream then goes as HTTP/2; the transport has no way to
		// fall back, which is why it is a flag and not a guess.
		t.Protocols = new(http.Protocols)
		t.Protocols.SetUnencryptedHTTP2(true)
	}
	return t
}

// checkPort refuses a port of u outside [1, 65535], and an empty one after a ':': url.Parse takes
// any digits, and a port out of range would pass it and fail every request (502 in the proxy),
// while "host:" is read as the scheme's default port, so that a port left out by mistake would
// send every request to port 80 or 443.
func checkPort(u *url.URL) error {
	p := u.Port()
	if p == "" {
		if strings.HasSuffix(u.Host, ":") {
			return errors.New("the port after ':' is empty; give one, or leave out the ':' for the scheme's default")
		}
		return nil
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %s is out of range [1, 65535]", p)
	}
	return nil
}

// redisErrText is the text of err, an error of a limiter on Redis, for the log, with any copy of
// rawURL written as redactURL writes it. Nothing else is hidden: neither Redis's replies nor
// go-redis's errors quote a password, and hiding the password where it is one of their words
// ("WRONGPASS invalid username-password pair", for a password "pair") gave it away, beside
// redisstore's own ERROR line that prints the reply as it is.
func redisErrText(err error, rawURL string) string {
	if rawURL == "" {
		return err.Error()
	}
	return strings.ReplaceAll(err.Error(), rawURL, redactURL(rawURL))
}

// redactURL hides the user information of a Redis URL (password included) for logs and errors,
// whether or not the URL parses.
func redactURL(s string) string { return redisstore.RedactURL(s) }

func newLogger(c *proxyConfig, w io.Writer) *slog.Logger {
	if c.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

func proxyMain(args []string, _, stderr io.Writer) error {
	c, fs := proxyFlags(stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	if err := checkListenAddrs(c.listen, c.metricsListen); err != nil {
		return usageErr(fs, "%v", err)
	}
	switch {
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return usageErr(fs, "-tls-cert and -tls-key go together: give both, or neither for plain HTTP")
	case c.tlsClientCA != "" && c.tlsCert == "":
		return usageErr(fs, "-tls-client-ca %s: needs -tls-cert and -tls-key (mutual TLS is TLS first)", c.tlsClientCA)
	case c.h2c && c.tlsCert != "":
		return usageErr(fs, "-h2c is HTTP/2 without TLS: with -tls-cert, HTTP/2 is offered by ALPN already")
	}
	logger := newLogger(c, stderr)
	var tlsConfig *tls.Config
	transport := "plain HTTP"
	if c.tlsCert != "" {
		// HTTP/2 first: a client offering both gets it, as from any HTTPS server in Go.
		files, err := newTLSFiles(c.tlsCert, c.tlsKey, c.tlsClientCA, []string{"h2", "http/1.1"}, func(warning bool, msg string) {
			if warning {
				logger.Warn(msg)
			} else {
				logger.Info(msg)
			}
		})
		if err != nil {
			return usageErr(fs, "%v", err)
		}
		tlsConfig = files.serverConfig()
		transport = "HTTPS, " + describeCert(files.cfg)
		if c.tlsClientCA != "" {
			transport += ", client certificates required"
		}
	}
	// The libraries' own log lines (redisstore's, when its breaker opens) follow -log-format.
	slog.SetDefault(logger)
	if c.redisURL != "" {
		forwardRedisLog(func(msg string, suppressed int) {
			logger.Warn("redis client: "+msg, "suppressed", suppressed)
		}, c.redisURL)
	}
	// Caught before the limiters are built, which takes seconds for a file of thousands of rules;
	// a second signal cuts off what is in flight (below).
	ctx, _, stopSignals, releaseSignals := stopOnSignal()
	defer releaseSignals()
	// SIGHUP reloads -config and never stops the proxy; one that comes while the limiters are
	// built is held, and reloads once the proxy runs.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	px, err := buildProxy(c, logger)
	if err != nil {
		return usageErr(fs, "%v", err)
	}
	// Closed on the way out, unless the shutdown below has begun closing it, bounded: this
	// close would not be.
	closing := false
	defer func() {
		if !closing {
			px.close()
		}
	}()
	if ctx.Err() != nil {
		logger.Info("stopped before listening")
		return nil
	}

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("-listen %q: %v", c.listen, err)
	}
	errLog := serverErrLog(logger)
	// Every request's context descends from cutCtx: cancelling it at the end of
	// -shutdown-timeout is what ends upgraded connections, which Server.Close does not close.
	cutCtx, cutOff := context.WithCancel(context.Background())
	defer cutOff()
	flight := &inFlight{}
	silent := &silentConns{m: map[net.Conn]struct{}{}}
	servers := []*http.Server{{
		Handler: flight.track(px.handler), ConnContext: httplimit.ConnContext, ConnState: silent.track, ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog,
		// Without it an idle keep-alive connection stays open for as long as the client keeps it.
		IdleTimeout: c.idleTimeout,
		BaseContext: func(net.Listener) context.Context { return cutCtx },
	}}
	if c.h2c {
		servers[0].Protocols = new(http.Protocols)
		servers[0].Protocols.SetHTTP1(true)
		servers[0].Protocols.SetUnencryptedHTTP2(true)
		transport = "plain HTTP/1.1 and HTTP/2"
	}
	// -conn-limit closes a connection at accept, before its TLS handshake costs anything.
	listeners := []net.Listener{px.wrapLn(ln)}
	if tlsConfig != nil {
		// http.Server hands a connection that chose "h2" by ALPN to its HTTP/2 server, which Serve
		// sets up by itself when the Server has no TLSConfig of its own.
		listeners[0] = tls.NewListener(listeners[0], tlsConfig)
	}
	if c.metricsListen != "" {
		mln, err := net.Listen("tcp", c.metricsListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("-metrics-listen %q: %v", c.metricsListen, err)
		}
		mm := http.NewServeMux()
		mm.Handle("/metrics", px.metrics)
		servers = append(servers, &http.Server{Handler: mm, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: c.idleTimeout, ErrorLog: errLog})
		listeners = append(listeners, mln)
		logger.Info(fmt.Sprintf("metrics on http://%s/metrics", mln.Addr()))
	}
	// SIGTERM and SIGINT drain and stop the proxy. Their handlers, and SIGHUP's, were in place
	// before the limiters were built, so that no signal is taken with its default action
	// (SIGHUP's kills).
	logger.Info(fmt.Sprintf("listening on %s, forwarding to %s; %s; %s", ln.Addr(), redactURL(px.upstream.String()), transport, px.describe))
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { px.watchConfig(watchCtx, hup); close(watched) }()
	defer func() { stopWatch(); <-watched }()

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
	// No reload from here on, and none still running logs: its line would follow "stopped".
	px.quietReloads()
	stopWatch()
	close(px.stopWaiting)
	logger.Info(fmt.Sprintf("shutting down: waiting up to %v for requests in flight", c.shutdownTimeout))
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	var signalled atomic.Bool // the second signal, not the timeout, ended the wait
	second, returned := make(chan struct{}), make(chan struct{})
	defer close(returned)
	go func() {
		select {
		case <-stopSignals: // a second stop signal cuts off what is in flight at once, still exit 0
			signalled.Store(true)
			logger.Info("a second stop signal: cutting off what is in flight")
			cancel()
			close(second)
		case <-returned:
		}
	}()
	// A request still running at the deadline is cut off rather than waited for: SIGTERM is a
	// request to stop, and the orchestrator that sent it kills the process soon after anyway.
	// Stopping as asked is a success, as in "slidelimit rls".
	cut := false
	silent.closeAll()
	for _, s := range servers {
		if err := s.Shutdown(sctx); err != nil {
			cut = true
		}
	}
	inFlightAtCut := flight.count() > 0
	if !cut {
		// Shutdown neither waits for nor closes hijacked connections, so the handlers still
		// running now hold upgraded ones (WebSockets): they get the same deadline.
		if n := flight.count(); n > 0 {
			logger.Info("waiting for upgraded connections (WebSockets) to close", "open", n)
			cut = !flight.wait(sctx)
		}
	}
	if cut {
		// ReverseProxy closes an upgraded connection's upstream side when its request's context
		// ends, and then the client's.
		cutOff()
		for _, s := range servers {
			s.Close()
		}
		// The handlers cut off still write their access-log lines (an upgraded connection's 101
		// is written as it closes): a short, bounded wait lets them, so that no line is lost.
		gctx, gcancel := context.WithTimeout(context.Background(), time.Second)
		flight.wait(gctx)
		gcancel()
		switch {
		case !inFlightAtCut:
			// What Shutdown waited for held no request: nothing was cut off.
		case signalled.Load():
			logger.Warn("requests still in flight at the second stop signal were cut off")
		default:
			logger.Warn(fmt.Sprintf("requests still in flight after -shutdown-timeout %v were cut off", c.shutdownTimeout))
		}
	}
	// A batched limiter's sync still waiting on a hung Redis logs its failure when it ends: it
	// ends in here, so that "stopped" stays the last line.
	closing = true
	if !closeBounded(px.close, c.redisURL != "", c.redisTimeout, second) {
		logger.Warn(fmt.Sprintf("Redis did not answer within twice -redis-timeout %v while the limiters were closed: what they held stays counted until its window ends", c.redisTimeout))
	}
	logger.Info("stopped")
	return nil
}

// silentConns are the connections that have sent no request yet (http.StateNew). Shutdown waits
// for one until five seconds after it opened, as it might yet send a request: a browser's TLS
// preconnect, or a health checker's bare TCP connect, held the stop that long, and was then
// reported as a request cut off. At shutdown they are closed at once; an HTTP/2 connection leaves
// StateNew as soon as its server takes it. Safe for concurrent use: ConnState runs on each
// connection's goroutine.
type silentConns struct {
	mu     sync.Mutex
	m      map[net.Conn]struct{}
	closed bool // closeAll ran: a connection still new is closed as it comes
}

func (s *silentConns) track(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case st != http.StateNew:
		delete(s.m, c)
	case s.closed:
		c.Close()
	default:
		s.m[c] = struct{}{}
	}
}

func (s *silentConns) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.m {
		c.Close()
	}
	clear(s.m)
}

// inFlight counts the requests a handler is serving, upgraded connections included: Shutdown
// loses sight of those once they are hijacked, but their handler runs until they close. A counter
// and no lock, since every request passes here; only the wait at shutdown polls.
type inFlight struct{ n atomic.Int64 }

func (f *inFlight) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.n.Add(1)
		defer f.n.Add(-1)
		h.ServeHTTP(w, r)
	})
}

func (f *inFlight) count() int64 { return f.n.Load() }

// wait reports whether every request was done before ctx ended.
func (f *inFlight) wait(ctx context.Context) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for f.n.Load() > 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// newPresized is engine.New(p, opts..., engine.WithExpectedKeys(expected)). When that fails and
// the same limiter without the option does not, what fails is the memory -expected-keys asks for
// (the engine refuses tables past the Go memory limit, ulimit -v, the control group's or the
// machine's memory): the error is then an *expectedKeysError, which names the flag rather than
// the policy the tables happened to be built for.
func newPresized(p policy.Policy, expected int, opts ...engine.Option) (*engine.Limiter, error) {
	eng, err := engine.New(p, append(opts[:len(opts):len(opts)], engine.WithExpectedKeys(expected))...)
	if err == nil || expected == 0 {
		return eng, err
	}
	bare, berr := engine.New(p, opts...)
	if berr != nil {
		return nil, err
	}
	bare.Close()
	return nil, &expectedKeysError{n: expected, err: err}
}

// expectedKeysError is -expected-keys asking for more table memory than the process may hold.
// where, when set, is the limit being built when the memory ran out, and each what every such
// limit is ("each rate limit"): the tables of all of them together are what does not fit.
type expectedKeysError struct {
	n           int
	where, each string
	err         error
}

func (e *expectedKeysError) Error() string {
	where := ""
	if e.where != "" {
		where = e.where + ": "
	}
	each := e.each
	if each == "" {
		each = "each in-process limit"
	}
	return fmt.Sprintf("-expected-keys %d: %s%v; lower -expected-keys (%s gets tables for that many keys), or raise that limit", e.n, where, e.err, each)
}

func (e *expectedKeysError) Unwrap() error { return e.err }

// checkKeyCounts checks -max-keys and -expected-keys, shared by proxy and rls: each in its range,
// and the tables sized at start no larger than the cap allows.
func checkKeyCounts(maxKeys, expectedKeys int) error {
	if maxKeys < 0 {
		return fmt.Errorf("-max-keys %d: must be 0 (the default cap) or more", maxKeys)
	}
	if expectedKeys < 0 {
		return fmt.Errorf("-expected-keys %d: must be 0 (tables that grow) or more", expectedKeys)
	}
	if capKeys := cmp.Or(maxKeys, engine.DefaultMaxKeys); expectedKeys > capKeys {
		if maxKeys == 0 {
			return fmt.Errorf("-expected-keys %d: above the default key cap, %d (raise -max-keys)", expectedKeys, capKeys)
		}
		return fmt.Errorf("-expected-keys %d: above -max-keys %d", expectedKeys, capKeys)
	}
	if uint64(expectedKeys) > engine.MaxExpectedKeys {
		return fmt.Errorf("-expected-keys %d: must be at most %d", expectedKeys, uint64(engine.MaxExpectedKeys))
	}
	return nil
}
