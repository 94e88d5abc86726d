package httplimit

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/slidelimit/slidelimit/internal/forwarded"
)

// ForwardedHeader names the request header that trusted proxies write the client chain into. It
// is a plain value, safe to copy and to share between goroutines.
type ForwardedHeader uint8

const (
	// XForwardedFor reads "X-Forwarded-For: client, proxy1, proxy2". The default.
	XForwardedFor ForwardedHeader = iota
	// Forwarded reads the RFC 7239 field, "Forwarded: for=client, for=proxy1;proto=https".
	Forwarded
)

// String returns the header's canonical name. A pure function of h: safe for concurrent use.
func (h ForwardedHeader) String() string {
	if h == Forwarded {
		return "Forwarded"
	}
	return "X-Forwarded-For"
}

// DefaultIPv6Prefix is the prefix length by which ClientIP and Listener group IPv6 clients
// unless told otherwise: one key per /64.
const DefaultIPv6Prefix = 64

// ClientIP finds the address of the client that sent a request.
//
// The address is the TCP peer (Request.RemoteAddr) unless that peer lies in TrustedProxies. Only
// then is the forwarding header read, walked from right to left: each hop that is itself a
// trusted proxy is skipped, and the first one that is not is the client. Everything left of that
// hop was written by the client or by proxies nobody vouches for, so a client cannot choose its
// own key by sending a forged X-Forwarded-For: from an untrusted peer the header is ignored, and
// behind a trusted proxy only what the proxy appended counts. If every hop is trusted the leftmost
// one is the client; if a trusted proxy reports a hop that is not an address ("unknown", an
// obfuscated identifier, garbage), that proxy is taken as the client. An address whose port is
// obfuscated (RFC 7239's for="192.0.2.43:_hidden") is an address, and so is an IPv6 address with
// a zone of letters, digits and "-._~" (fe80::1%eth0), whose zone is dropped; any other zone makes
// the hop garbage.
//
// Configure a ClientIP before use and do not change it afterwards; its methods may then be called
// from any number of goroutines at once. A nil *ClientIP is the zero one: no trusted proxies, IPv6
// grouped by /64.
type ClientIP struct {
	// TrustedProxies are the address ranges of the proxies in front of this server. Empty means
	// none: the forwarding header is never read. ParsePrefixes builds the list from a flag value.
	TrustedProxies []netip.Prefix
	// Header is the header the trusted proxies write (default XForwardedFor). Only that one is
	// read: a proxy that appends to X-Forwarded-For passes a client's forged Forwarded through
	// untouched, so reading both would let the client pick.
	Header ForwardedHeader
	// IPv6Prefix groups IPv6 clients by network: every address of one /IPv6Prefix shares one
	// key. 0 means 64, the default: a single subscriber is usually given a whole /64, so keying
	// each address alone would give one client 2^64 allowances. 128 keys each IPv6 address on
	// its own; values outside 1…128 behave like 0. IPv4 addresses, and IPv4 mapped into IPv6, are
	// never grouped.
	IPv6Prefix int
}

// Addr returns the client's address, unmapped from IPv6 when it is an IPv4 address and without
// zone. It returns the zero Addr when RemoteAddr is not an IP address (a Unix socket, a test
// request without a peer). It only reads c and r, so it is safe for concurrent use once c is
// configured (see ClientIP).
func (c *ClientIP) Addr(r *http.Request) netip.Addr {
	peer := parsePeer(r.RemoteAddr)
	if !peer.IsValid() || !c.trusted(peer) {
		return peer
	}
	client := peer
	for hop := range c.hopsRightToLeft(r) {
		a := parseHop(hop)
		if !a.IsValid() {
			// A trusted proxy reported something that is not an address: take that proxy.
			return client
		}
		client = a
		if !c.trusted(a) {
			return a
		}
	}
	return client
}

// Key returns the rate-limiting key of the request's client: "ip:" and the IPv4 address, or "ip:"
// and the masked IPv6 prefix such as "ip:2001:db8:1:2::/64" (the address itself with IPv6Prefix
// 128). A request whose peer is not an IP address is keyed by its raw RemoteAddr ("addr:" and the
// value). Safe for concurrent use once c is configured, as Addr is.
func (c *ClientIP) Key(r *http.Request) string {
	a := c.Addr(r)
	if !a.IsValid() {
		return "addr:" + r.RemoteAddr
	}
	return c.keyOf(a)
}

func (c *ClientIP) keyOf(a netip.Addr) string {
	var buf [64]byte // "ip:" and the longest IPv6 prefix text fit
	b := append(buf[:0], "ip:"...)
	bits := 0
	if c != nil {
		bits = c.IPv6Prefix
	}
	if bits <= 0 || bits > 128 {
		bits = DefaultIPv6Prefix
	}
	if a.Is6() && bits < 128 {
		if p, err := a.Prefix(bits); err == nil {
			return string(p.AppendTo(b))
		}
	}
	return string(a.AppendTo(b))
}

func (c *ClientIP) trusted(a netip.Addr) bool {
	if c == nil {
		return false
	}
	for _, p := range c.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// hopsRightToLeft yields the forwarding chain from the newest hop (rightmost in the last header
// line) to the oldest, over every instance of the header. Either header is walked in place,
// without building a list, and only as far as the caller reads: what a client wrote before the
// hops its trusted proxies appended, however long, costs nothing.
func (c *ClientIP) hopsRightToLeft(r *http.Request) iter.Seq[string] {
	return func(yield func(string) bool) {
		if c.Header == Forwarded {
			vs := r.Header.Values("Forwarded")
			for vi := len(vs) - 1; vi >= 0; vi-- {
				for elem := range forwarded.RightToLeft(vs[vi]) {
					if !yield(forOf(elem)) {
						return
					}
				}
			}
			return
		}
		vs := r.Header.Values("X-Forwarded-For")
		for vi := len(vs) - 1; vi >= 0; vi-- {
			v := vs[vi]
			end := len(v)
			for i := end - 1; i >= -1; i-- {
				if i >= 0 && v[i] != ',' {
					continue
				}
				if !yield(v[i+1 : end]) {
					return
				}
				end = i
			}
		}
	}
}

// forOf returns the for= value of one element of a Forwarded field value. An element without
// for= gives an empty hop, which is not an address and so stops the walk: the proxy that wrote it
// did not say who its client was.
func forOf(elem string) string {
	hop := ""
	for _, pair := range splitQuoted(elem, ';') {
		name, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(strings.TrimSpace(name), "for") {
			hop = unquote(strings.TrimSpace(val))
		}
	}
	return hop
}

// splitQuoted splits s at sep outside double-quoted strings (RFC 7230 quoted-string, with
// backslash escapes).
func splitQuoted(s string, sep byte) []string {
	var parts []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch == '\\' && quoted:
			i++
		case ch == '"':
			quoted = !quoted
		case ch == sep && !quoted:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	s = s[1 : len(s)-1]
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseHop parses one address as proxies write it: "192.0.2.1", "192.0.2.1:4711", "2001:db8::1",
// "[2001:db8::1]" or "[2001:db8::1]:4711", the port possibly obfuscated as RFC 7239 allows
// ("192.0.2.1:_p"). It returns the zero Addr for anything else, an IPv6 zone that is not
// plainZone's included.
func parseHop(s string) netip.Addr {
	a, ok := parseAddr(s)
	if !ok || !plainZone(a.Zone()) {
		return netip.Addr{}
	}
	return canon(a)
}

// parsePeer is parseHop for the connection's own peer, whose zone is whatever the kernel names
// its interface (any byte but '/', ':' and white space on Linux): the address is the kernel's,
// not a header's, and refused it would key each connection apart.
func parsePeer(s string) netip.Addr {
	a, ok := parseAddr(s)
	if !ok {
		return netip.Addr{}
	}
	return canon(a)
}

// parseAddr is parseHop's parsing, zone kept. The form is told apart before parsing, so that the
// common cases build no error value.
func parseAddr(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	// A hidden port hides nothing of the address, which still tells clients apart: without it
	// every client behind a proxy that hides ports would share that proxy's key.
	if i := strings.LastIndexByte(s, ':'); i > 0 && len(s) > i+2 && s[i+1] == '_' &&
		(s[0] == '[' && s[i-1] == ']' || s[0] != '[' && strings.IndexByte(s, ':') == i) {
		s = s[:i]
	}
	var a netip.Addr
	var err error
	switch {
	case s == "":
		return netip.Addr{}, false
	case s[0] == '[':
		if s[len(s)-1] == ']' {
			a, err = netip.ParseAddr(s[1 : len(s)-1])
		} else {
			var ap netip.AddrPort
			ap, err = netip.ParseAddrPort(s)
			a = ap.Addr()
		}
	case strings.Count(s, ":") == 1:
		var ap netip.AddrPort
		ap, err = netip.ParseAddrPort(s)
		a = ap.Addr()
	default:
		a, err = netip.ParseAddr(s)
	}
	return a, err == nil
}

// plainZone reports whether an IPv6 zone is one a URI could carry: RFC 6874's unreserved
// characters (letters, digits, "-", ".", "_", "~"), as interface names and scope numbers are.
// netip takes any bytes after '%', so "::% 0" or `::%"` would parse as "::": a hop no proxy
// writes, whose address appears in the header as no token of its own.
func plainZone(z string) bool {
	for i := 0; i < len(z); i++ {
		switch c := z[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '.', c == '_', c == '~':
		default:
			return false
		}
	}
	return true
}

func canon(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// ErrShortMappedPrefix is wrapped by ParsePrefixes's error for an IPv4-mapped range shorter than
// /96: it reaches past the mapped addresses into plain IPv6 ones, so it has no IPv4 form to be
// compared as. A sentinel, compared with errors.Is from any goroutine; never reassigned.
var ErrShortMappedPrefix = errors.New("an IPv4-mapped IPv6 range must be /96 or longer")

// ParsePrefixes parses a comma-separated list of CIDR ranges or single addresses ("10.0.0.0/8,
// 192.0.2.7, 2001:db8::/32"); a single address stands for itself alone (/32 or /128). A range
// written with an IPv4-mapped address (::ffff:10.0.0.0/104) is read as the IPv4 range it names
// (10.0.0.0/8), since clients are compared by their unmapped address, which a mapped range kept
// as IPv6 would never contain; one of those shorter than /96 is an error wrapping
// ErrShortMappedPrefix. Any other IPv6 range, ::/0 included, holds no IPv4 client. A range
// written with bits set past its mask is the range that holds that address, as net.ParseCIDR
// reads it: 10.0.0.1/8 is 10.0.0.0/8, all of it, not 10.0.0.1 alone. Spaces around an entry and
// empty entries (a trailing comma) are skipped, and the empty string gives an empty list. An entry
// that is neither an address nor a range is an error that names it. ParsePrefixes is a pure
// function, safe to call from any goroutine.
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if strings.Contains(part, "/") {
			p, err := netip.ParsePrefix(part)
			if err != nil {
				return nil, fmt.Errorf("httplimit: trusted proxy %q is not a CIDR range: %v", part, err)
			}
			// Checked before masking: a short mask would turn ::ffff:0:0/95 into ::fffe:0:0/95,
			// no longer mapped, and so let it through.
			if p.Addr().Is4In6() {
				if p.Bits() < 96 {
					return nil, fmt.Errorf("httplimit: %q: %w", part, ErrShortMappedPrefix)
				}
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(part)
		if err != nil {
			return nil, fmt.Errorf("httplimit: trusted proxy %q is neither an address nor a CIDR range", part)
		}
		a = canon(a)
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// KeyByHeader returns a key function that keys each request by the value of header name (for
// example an API key checked earlier in the chain), as "h:" and the value of its first field line
// (as Header.Get reads it; later lines of that name are not read). A request without the
// header, or whose first line is empty, is keyed by fallback; a nil fallback keys it by its peer
// address (ClientIP with no trusted proxies). Host is read from Request.Host, where Go's server
// moves it out of the header map, and written one way per virtual host (lower case, without
// trailing dots or its port, and an address in one form: "[0::1]" is "[::1]"), so that a client
// cannot take a fresh quota by spelling its host another way; a Host that is nothing but dots is
// keyed by fallback. Clients choose their own header
// values: key by a header only where something upstream of the limiter has authenticated it.
// Safe for concurrent use.
func KeyByHeader(name string, fallback func(*http.Request) string) func(*http.Request) string {
	name = http.CanonicalHeaderKey(name)
	if fallback == nil {
		fallback = new(ClientIP).Key
	}
	if name == "Host" {
		return func(r *http.Request) string {
			if v := virtualHost(r); v != "" {
				return "h:" + v
			}
			return fallback(r)
		}
	}
	return func(r *http.Request) string {
		if v := r.Header.Get(name); v != "" {
			return "h:" + v
		}
		return fallback(r)
	}
}

// virtualHost returns r.Host's name spelt one way: lower case, without trailing dots, an address
// in its canonical form, and without the port, which a client may spell any number of ways (080, +80) and which does not tell
// virtual hosts apart (nginx's server names and Go's ServeMux patterns ignore it too).
func virtualHost(r *http.Request) string {
	name := r.Host
	if i := strings.LastIndexByte(name, ':'); i >= 0 && strings.IndexByte(name[i:], ']') < 0 {
		name = name[:i]
	}
	// Go's server takes any number of trailing dots ("example.com.."), and an address in any of
	// its spellings ("[0::1]", "[::0:1]"): each would be a host of its own.
	name = strings.TrimRight(strings.ToLower(name), ".")
	if inner, ok := strings.CutPrefix(name, "["); ok {
		if a, err := netip.ParseAddr(strings.TrimSuffix(inner, "]")); err == nil {
			if a = a.Unmap(); a.Is4() {
				return a.String() // "[1.2.3.4]" and "[::ffff:1.2.3.4]" are 1.2.3.4
			}
			return "[" + a.String() + "]"
		}
	}
	return name // an unbracketed IPv4 address has one spelling netip takes: itself
}

// KeyByPathAndIP returns a key function that keys each request by its URL path together with the
// key that ip gives it (a nil ip means the peer address), so that each client has its own
// allowance per endpoint: "path:/search ip:192.0.2.1". The path is taken as received, not
// cleaned; route first if "/a/../b" and "/b" must share a key. Safe for concurrent use.
func KeyByPathAndIP(ip func(*http.Request) string) func(*http.Request) string {
	if ip == nil {
		ip = new(ClientIP).Key
	}
	return func(r *http.Request) string {
		return "path:" + r.URL.Path + " " + ip(r)
	}
}

type connKeyCtx struct{}

var connSeq atomic.Uint64

// ConnContext is a function for http.Server.ConnContext that gives every accepted connection its
// own identity, which KeyByConn turns into a key: a proxy can then limit the requests of each
// connection (each HTTP/1.1 keep-alive connection, each HTTP/2 connection and its streams) apart
// from the others. Identities are never reused within a process. Safe for concurrent use.
func ConnContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connKeyCtx{}, "conn:"+strconv.FormatUint(connSeq.Add(1), 10))
}

// KeyByConn keys a request by the connection it came on, as tagged by ConnContext. On a server
// without ConnContext it falls back to the peer's address and port, which also identifies a live
// connection but may be reused by a later one. Safe for concurrent use.
func KeyByConn(r *http.Request) string {
	if k, ok := r.Context().Value(connKeyCtx{}).(string); ok {
		return k
	}
	return "conn:" + r.RemoteAddr
}
