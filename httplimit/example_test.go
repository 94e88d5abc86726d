package httplimit_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/policy"
)

// The middleware in five lines: 100 requests per minute per client IP in front of any handler.
// The server is started on a free port here, where a program would call srv.ListenAndServe().
func Example() {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello\n") })

	lim, _ := engine.New(policy.SlidingCounter{Limit: 100, Window: time.Minute})
	defer lim.Close()
	mw := &httplimit.Middleware{Limiter: httplimit.Local(lim)}
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: mw.Wrap(mux)}

	ln := newListener()
	go srv.Serve(ln)
	defer srv.Close()
	res, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Print(res.StatusCode, " ", res.Header.Get("RateLimit-Policy"), " ", string(body))
	// Output: 200 "default";q=100;w=60 hello
}

// What clients see: two requests per minute admitted, the third refused with 429. The manual
// clock pins the time 15.5 s into a minute so that the output is exact.
func ExampleMiddleware() {
	clk := clock.NewManual(1_699_999_980_000 + 15_500)
	lim, _ := engine.New(policy.SlidingCounter{Limit: 2, Window: time.Minute}, engine.WithClock(clk))
	defer lim.Close()
	mw := &httplimit.Middleware{
		Limiter: httplimit.Local(lim),
		Now:     func() time.Time { return time.UnixMilli(clk.Now()) },
	}
	ts := httptest.NewServer(mw.Wrap(http.NotFoundHandler()))
	defer ts.Close()

	for range 3 {
		res, err := ts.Client().Get(ts.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		res.Body.Close()
		fmt.Println(res.StatusCode, res.Header.Get("RateLimit-Policy"), res.Header.Get("RateLimit"))
		if ra := res.Header.Get("Retry-After"); ra != "" {
			fmt.Println("Retry-After:", ra)
		}
	}
	// Output:
	// 404 "default";q=2;w=60 "default";r=1;t=45
	// 404 "default";q=2;w=60 "default";r=0;t=45
	// 429 "default";q=2;w=60 "default";r=0;t=45
	// Retry-After: 45
}

// Clients behind a load balancer at 10.0.0.0/8 are told apart by X-Forwarded-For; IPv6 clients
// are grouped by /64.
func ExampleClientIP() {
	trusted, err := httplimit.ParsePrefixes("10.0.0.0/8")
	if err != nil {
		fmt.Println(err)
		return
	}
	ip := &httplimit.ClientIP{TrustedProxies: trusted, IPv6Prefix: 64}

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.1.2.3:50000"
	r.Header.Set("X-Forwarded-For", "203.0.113.9, 2001:db8:1:2::99")
	fmt.Println(ip.Key(r))

	r.RemoteAddr = "198.51.100.4:50000" // not a trusted proxy: the header is ignored
	fmt.Println(ip.Key(r))
	// Output:
	// ip:2001:db8:1:2::/64
	// ip:198.51.100.4
}

// Limiting new connections per client address, below http.Server: at 2 a minute, the third
// connection from the same address is closed before the server sees it.
func ExampleListener() {
	lim, _ := engine.New(policy.SlidingCounter{Limit: 2, Window: time.Minute})
	defer lim.Close()
	inner := newListener()
	ln := &httplimit.Listener{Listener: inner, Limiter: httplimit.Local(lim), IPv6Prefix: 64}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go srv.Serve(ln)
	defer srv.Close()
	for range 3 {
		// A new connection each time, as a client without keep-alive makes.
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		res, err := c.Get("http://" + inner.Addr().String() + "/")
		if err != nil {
			fmt.Println("connection refused by the limiter")
			continue
		}
		res.Body.Close()
		fmt.Println(res.StatusCode)
	}
	// Output:
	// 404
	// 404
	// connection refused by the limiter
}

// Per-connection request limits for a proxy: each connection is its own key. At 2 requests a
// minute per connection, the third request on one connection is refused, and a new connection
// starts afresh.
func ExampleKeyByConn() {
	lim, _ := engine.New(policy.SlidingCounter{Limit: 2, Window: time.Minute})
	defer lim.Close()
	mw := &httplimit.Middleware{Limiter: httplimit.Local(lim), KeyFunc: httplimit.KeyByConn}
	srv := &http.Server{Handler: mw.Wrap(http.NotFoundHandler()), ConnContext: httplimit.ConnContext}

	ln := newListener()
	go srv.Serve(ln)
	defer srv.Close()
	get := func(c *http.Client) int {
		res, err := c.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, res.Body) // so that the connection is used again
		res.Body.Close()
		return res.StatusCode
	}
	one := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	fmt.Println(get(one), get(one), get(one))
	other := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	fmt.Println(get(other))
	// Output:
	// 404 404 429
	// 404
}

func newListener() net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	return ln
}

// Two limits at once, 10 per second and 1,000 per hour, all or nothing: a request the
// per-second limit refuses costs nothing of the hourly one. Health checks skip the limiter.
func ExampleMiddleware_limits() {
	clk := clock.NewManual(1_699_999_980_000)
	perSecond, _ := engine.New(policy.FixedWindow{Limit: 10, Window: time.Second}, engine.WithClock(clk))
	defer perSecond.Close()
	perHour, _ := engine.New(policy.FixedWindow{Limit: 1000, Window: time.Hour}, engine.WithClock(clk))
	defer perHour.Close()
	mw := &httplimit.Middleware{
		Limiter: httplimit.Local(perSecond), Quota: httplimit.Quota{Name: "second"},
		Limits: []httplimit.Limit{{Limiter: httplimit.Local(perHour), Quota: httplimit.Quota{Name: "hour"}}},
		Skip:   func(r *http.Request) bool { return r.URL.Path == "/healthz" },
		Now:    func() time.Time { return time.UnixMilli(clk.Now()) },
	}
	ts := httptest.NewServer(mw.Wrap(http.NotFoundHandler()))
	defer ts.Close()

	res, err := ts.Client().Get(ts.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	res.Body.Close()
	fmt.Println(res.Header.Get("RateLimit-Policy"))
	// The clock is 780 s into an hour (1_699_999_980_000 mod 3_600_000 = 780_000 ms): 2820 s left.
	fmt.Println(res.Header.Get("RateLimit"))
	// Output:
	// "second";q=10;w=1, "hour";q=1000;w=3600
	// "second";r=9;t=1, "hour";r=999;t=2820
}
