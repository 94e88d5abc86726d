package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/policy"
)

// nullWriter is a ResponseWriter that keeps one header map and discards the rest, so that the
// benchmarks measure the middleware rather than a recorder.
type nullWriter struct{ h http.Header }

func (w *nullWriter) Header() http.Header         { return w.h }
func (w *nullWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nullWriter) WriteHeader(int)             {}

const benchClients = 10_000

// benchRequests are requests from benchClients distinct peers, each also carrying a forwarded
// client address for the trusted-proxy case.
var benchRequests = func() []*http.Request {
	rs := make([]*http.Request, benchClients)
	for i := range rs {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String() + ":40000"
		r.Header.Set("X-Forwarded-For", "203.0.113.9, "+netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}).String())
		rs[i] = r
	}
	return rs
}()

// BenchmarkMiddleware is the middleware's cost per request over benchClients clients, against
// the bare handler: what limiting adds to a request, before any network.
func BenchmarkMiddleware(b *testing.B) {
	lim, err := engine.New(policy.SlidingCounter{Limit: 1 << 30, Window: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lim.Close() })
	noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	trusted := &httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{
		{"handler=bare", noop},
		{"handler=limited;key=ip", (&httplimit.Middleware{Limiter: httplimit.Local(lim)}).Wrap(noop)},
		{"handler=limited;key=xff-trusted", (&httplimit.Middleware{Limiter: httplimit.Local(lim), KeyFunc: trusted.Key}).Wrap(noop)},
		{"handler=limited;key=conn-shadow", (&httplimit.Middleware{Limiter: httplimit.Local(lim), KeyFunc: httplimit.KeyByConn, Shadow: true}).Wrap(noop)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var seq atomic.Uint64
			b.RunParallel(func(pb *testing.PB) {
				w := &nullWriter{h: http.Header{}}
				i := int(seq.Add(1) * 7919)
				for pb.Next() {
					i++
					bc.h.ServeHTTP(w, benchRequests[i%benchClients])
				}
			})
		})
	}
}

// BenchmarkClientIPKeyLongChain: a client behind a trusted proxy sends a Forwarded field of
// 30,000 elements (about 900 KB); only the proxy's hop and the client's last one are read.
func BenchmarkClientIPKeyLongChain(b *testing.B) {
	ip := &httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Header: httplimit.Forwarded}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.1:1"
	r.Header.Set("Forwarded", strings.Repeat("for=198.51.100.1;proto=http, ", 30000)+"for=203.0.113.9")
	b.ReportAllocs()
	for b.Loop() {
		ip.Key(r)
	}
}

func BenchmarkClientIPKey(b *testing.B) {
	ip := &httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, IPv6Prefix: 64}
	b.ReportAllocs()
	var sink int
	for i := 0; b.Loop(); i++ {
		sink += len(ip.Key(benchRequests[i%benchClients]))
	}
	b.ReportMetric(float64(sink)/float64(b.N), "bytes/key")
}
