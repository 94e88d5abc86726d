package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/httplimit"
)

func TestClientIPAddr(t *testing.T) {
	trusted, err := httplimit.ParsePrefixes("10.0.0.0/8, 192.0.2.10, 2001:db8:ffff::/48")
	require.NoError(t, err)
	xff := &httplimit.ClientIP{TrustedProxies: trusted}
	fwd := &httplimit.ClientIP{TrustedProxies: trusted, Header: httplimit.Forwarded}

	for _, tc := range []struct {
		name   string
		ip     *httplimit.ClientIP
		remote string
		header map[string][]string
		want   string // "" means the zero Addr
	}{
		{"untrusted peer, header ignored", xff, "198.51.100.9:1234", map[string][]string{"X-Forwarded-For": {"1.2.3.4"}}, "198.51.100.9"},
		{"no proxies configured", &httplimit.ClientIP{}, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"1.2.3.4"}}, "10.0.0.1"},
		{"trusted peer, one hop", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"203.0.113.5"}}, "203.0.113.5"},
		{"trusted chain skipped", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"203.0.113.5, 192.0.2.10, 10.9.9.9"}}, "203.0.113.5"},
		{"forged left part ignored", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"6.6.6.6, 203.0.113.5"}}, "203.0.113.5"},
		{"several header lines in order", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"6.6.6.6, 203.0.113.5", "10.2.2.2"}}, "203.0.113.5"},
		{"every hop trusted: leftmost", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"10.3.3.3, 10.2.2.2"}}, "10.3.3.3"},
		{"trusted peer, no header", xff, "10.0.0.1:1", nil, "10.0.0.1"},
		{"garbage from a trusted hop: that hop", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"203.0.113.5, garbage, 10.2.2.2"}}, "10.2.2.2"},
		{"ports and brackets", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"[2001:db8::7]:443, 10.2.2.2:80"}}, "2001:db8::7"},
		{"IPv4-mapped peer", xff, "[::ffff:10.0.0.1]:1", map[string][]string{"X-Forwarded-For": {"::ffff:203.0.113.5"}}, "203.0.113.5"},
		{"IPv6 trusted range", xff, "[2001:db8:ffff:1::1]:1", map[string][]string{"X-Forwarded-For": {"2001:db8:1::5"}}, "2001:db8:1::5"},
		{"zone dropped", &httplimit.ClientIP{}, "[fe80::1%eth0]:1", nil, "fe80::1"},
		{"zone with a space is garbage", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"::% 0, 10.2.2.2"}}, "10.2.2.2"},
		{"zone with a quote is garbage", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {`::%", 10.2.2.2`}}, "10.2.2.2"},
		{"zone of unreserved characters dropped", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"fe80::1%eth0.1_a-b~"}}, "fe80::1"},
		// The peer's zone is the kernel's name of its interface, whatever its bytes: refused, it
		// would key each of the peer's connections apart.
		{"peer zone of any bytes dropped", &httplimit.ClientIP{}, "[fe80::1%br+lan]:1", nil, "fe80::1"},
		{"not an IP peer", xff, "@", nil, ""},
		{"Forwarded ignored when XFF configured", xff, "10.0.0.1:1", map[string][]string{"Forwarded": {"for=203.0.113.5"}}, "10.0.0.1"},
		{"XFF ignored when Forwarded configured", fwd, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"203.0.113.5"}}, "10.0.0.1"},
		{"Forwarded chain", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {`for=6.6.6.6, for=203.0.113.5;proto=https, for="10.2.2.2:80"`}}, "203.0.113.5"},
		{"Forwarded quoted IPv6", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {`proto=http;For="[2001:db8:cafe::17]:4711"`}}, "2001:db8:cafe::17"},
		{"Forwarded comma inside quotes", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {`for=203.0.113.5;host="a,b"`}}, "203.0.113.5"},
		{"Forwarded unknown stops at proxy", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {"for=unknown, for=10.2.2.2"}}, "10.2.2.2"},
		{"Forwarded element without for", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {"for=203.0.113.5, proto=https"}}, "10.0.0.1"},
		// A client's unbalanced quote, on the line a proxy appended its element to, cannot take
		// in that element: the client does not choose its key, nor take the proxy's.
		{"Forwarded open quote before the proxy's element", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {`for=9.9.9.9;x=", for=203.0.113.5`}}, "203.0.113.5"},
		{"Forwarded open quote in for", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {`for="9.9.9.9, for=203.0.113.5`}}, "203.0.113.5"},
		{"Forwarded escaped quote", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {`for=203.0.113.5;x="a\", b", for=10.2.2.2`}}, "203.0.113.5"},
		{"Forwarded escaped backslash", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {`for=6.6.6.6;x="a\\", for=203.0.113.5`}}, "203.0.113.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.remote
			for k, vs := range tc.header {
				for _, v := range vs {
					r.Header.Add(k, v)
				}
			}
			got := tc.ip.Addr(r)
			if tc.want == "" {
				assert.False(t, got.IsValid(), "got %v", got)
				assert.Equal(t, "addr:"+tc.remote, tc.ip.Key(r))
				return
			}
			assert.Equal(t, netip.MustParseAddr(tc.want), got)
		})
	}
}

func TestClientIPKey(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for _, tc := range []struct {
		prefix int
		remote string
		want   string
	}{
		{0, "[2001:db8:1:2:3:4:5:6]:1", "ip:2001:db8:1:2::/64"},
		{64, "[2001:db8:1:2:3:4:5:6]:1", "ip:2001:db8:1:2::/64"},
		{48, "[2001:db8:1:2:3:4:5:6]:1", "ip:2001:db8:1::/48"},
		{128, "[2001:db8:1:2:3:4:5:6]:1", "ip:2001:db8:1:2:3:4:5:6"},
		{200, "[2001:db8:1:2:3:4:5:6]:1", "ip:2001:db8:1:2::/64"},
		{-1, "[2001:db8:1:2:3:4:5:6]:1", "ip:2001:db8:1:2::/64"},
		{64, "192.0.2.1:1", "ip:192.0.2.1"},
		{64, "[::ffff:192.0.2.1]:1", "ip:192.0.2.1"},
	} {
		r.RemoteAddr = tc.remote
		ip := httplimit.ClientIP{IPv6Prefix: tc.prefix}
		assert.Equal(t, tc.want, ip.Key(r), "prefix %d, %s", tc.prefix, tc.remote)
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := httplimit.ParsePrefixes(" 10.1.2.3/8 ,192.0.2.7,, ::ffff:192.0.2.8, 2001:db8::1 ")
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("192.0.2.8/32"),
		netip.MustParsePrefix("2001:db8::1/128"),
	}, got)

	empty, err := httplimit.ParsePrefixes("")
	require.NoError(t, err)
	assert.Empty(t, empty)

	for _, bad := range []string{"10.0.0.0/33", "example.com", "10.0.0.0/8,nope"} {
		_, err := httplimit.ParsePrefixes(bad)
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), "trusted proxy")
		}
	}
	_, err = httplimit.ParsePrefixes("10.0.0.0/8,nope")
	assert.ErrorContains(t, err, `"nope"`)

	// An IPv4-mapped range is the IPv4 range it names, which a client's unmapped address is in.
	mapped, err := httplimit.ParsePrefixes("::ffff:127.0.0.0/104, ::ffff:0.0.0.0/96, ::ffff:192.0.2.9/128")
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("0.0.0.0/0"),
		netip.MustParsePrefix("192.0.2.9/32"),
	}, mapped)
	assert.True(t, mapped[0].Contains(netip.MustParseAddr("127.0.0.1")))
	_, err = httplimit.ParsePrefixes("::ffff:0:0/95")
	assert.ErrorIs(t, err, httplimit.ErrShortMappedPrefix)
	assert.ErrorContains(t, err, `"::ffff:0:0/95"`)
}

// What a client writes before the hops its trusted proxies append costs nothing to read, in
// either header: the walk from the right stops at the first hop not trusted, and neither scans
// nor allocates for the rest. A client behind a trusted load balancer sent a Forwarded field of
// 30,000 elements (about 900 KB), which was split and parsed whole on every request: 90,000
// allocations. The count of allocations is the test (timings are for BenchmarkClientIPKeyLongChain).
func TestLongForwardingChainCostsOnlyTheHopsRead(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	for _, tc := range []struct {
		header httplimit.ForwardedHeader
		name   string
		value  string
	}{
		{httplimit.Forwarded, "Forwarded", strings.Repeat("for=198.51.100.1;proto=http, ", 30000) + "for=203.0.113.9"},
		{httplimit.XForwardedFor, "X-Forwarded-For", strings.Repeat("198.51.100.1, ", 30000) + "203.0.113.9"},
	} {
		ip := &httplimit.ClientIP{TrustedProxies: trusted, Header: tc.header}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "127.0.0.1:1"
		r.Header.Set(tc.name, tc.value)
		require.Equal(t, "ip:203.0.113.9", ip.Key(r), tc.name)
		allocs := testing.AllocsPerRun(20, func() { ip.Key(r) })
		assert.LessOrEqual(t, allocs, 4.0, "%s: allocations grow with what the client wrote", tc.name)
	}
}

// KeyByHeader("Host") gives each virtual host one key however the client spells it, its port
// included, and keeps hosts that are not the same apart.
func TestKeyByHeaderHostIsOneKeyPerVirtualHost(t *testing.T) {
	key := httplimit.KeyByHeader("host", nil)
	req := func(host string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = host
		return r
	}
	for _, spelling := range []string{"a.example", "A.Example", "a.example.", "a.example:80", "A.EXAMPLE.:80",
		"a.example:", "a.example:080", "a.example:+80", "a.example:443", "a.example:8080"} {
		assert.Equal(t, "h:a.example", key(req(spelling)), spelling)
	}
	assert.Equal(t, "h:b.example", key(req("b.example")))
	assert.Equal(t, "h:[2001:db8::1]", key(req("[2001:DB8::1]:80")))
	assert.Equal(t, "h:[2001:db8::1]", key(req("[2001:db8::1]")))
	// Trailing dots, however many, and an address's other spellings, which Go's server serves.
	for _, spelling := range []string{"a.example..", "a.example...:80"} {
		assert.Equal(t, "h:a.example", key(req(spelling)), spelling)
	}
	for _, spelling := range []string{"[0::1]", "[::0:1]", "[0:0:0:0:0:0:0:1]:8080"} {
		assert.Equal(t, "h:[::1]", key(req(spelling)), spelling)
	}
	assert.Equal(t, "h:192.0.2.1", key(req("192.0.2.1.:80")))
	for _, spelling := range []string{"[192.0.2.1]", "[::ffff:192.0.2.1]:80"} {
		assert.Equal(t, "h:192.0.2.1", key(req(spelling)), spelling)
	}
	// A Host of dots names no host: keyed as a request without one.
	assert.Equal(t, "ip:192.0.2.1", key(req("..")))
}

// KeyByHeader reads the header's first field line only, as its doc says: an empty first line is
// keyed by the fallback even when a later line has a value.
func TestKeyByHeaderReadsTheFirstLine(t *testing.T) {
	key := httplimit.KeyByHeader("X-Api-Key", func(*http.Request) string { return "fallback" })
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{"a", "b"}, "h:a"},
		{[]string{"", "k2"}, "fallback"},
		{nil, "fallback"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for _, v := range tc.lines {
			r.Header.Add("X-Api-Key", v)
		}
		assert.Equal(t, tc.want, key(r), "%q", tc.lines)
	}
}
