package httplimit_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"unicode"

	"github.com/slidelimit/slidelimit/httplimit"
)

// FuzzClientIP offers ClientIP any peer address, forwarding headers and trusted ranges. Beyond
// not panicking, it checks what the documentation promises without re-deriving the walk: an
// untrusted peer's headers change nothing, the address is unmapped and zoneless, it is the peer
// or an address some hop wrote, and the key is the address (or its IPv6 prefix) as documented.
func FuzzClientIP(f *testing.F) {
	for _, s := range []struct {
		remote, xff, fwd, trusted string
		v6                        int
		forwarded                 bool
	}{
		{"198.51.100.9:1234", "1.2.3.4", "", "10.0.0.0/8", 0, false},
		{"10.0.0.1:1", "203.0.113.5, 10.0.0.2", "", "10.0.0.0/8", 0, false},
		{"10.0.0.1:1", "", `for="[2001:db8::1]:4711";proto=https, for=10.0.0.3`, "10.0.0.0/8", 48, true},
		{"[::ffff:10.0.0.1]:80", "garbage, ::ffff:192.0.2.1", "", "::ffff:10.0.0.0/104", 128, false},
		{"[fe80::1%eth0]:1", "fe80::2%eth1", `for=unknown`, "fe80::/10", 64, true},
		{"10.0.0.1:1", "192.0.2.1:_p", `for="\1\92.0.2.1"`, "10.0.0.1", 200, true},
		{"@", "", "", "", -1, false},
	} {
		f.Add(s.remote, s.xff, s.fwd, s.trusted, s.v6, s.forwarded)
	}
	f.Fuzz(func(t *testing.T, remote, xff, fwd, trusted string, v6 int, forwarded bool) {
		prefixes, err := httplimit.ParsePrefixes(trusted)
		if err != nil {
			prefixes = nil
		}
		ip := &httplimit.ClientIP{TrustedProxies: prefixes, IPv6Prefix: v6}
		if forwarded {
			ip.Header = httplimit.Forwarded
		}
		bare := &http.Request{RemoteAddr: remote, Header: http.Header{}}
		r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
		for _, v := range strings.Split(xff, "\n") {
			r.Header.Add("X-Forwarded-For", v)
		}
		for _, v := range strings.Split(fwd, "\n") {
			r.Header.Add("Forwarded", v)
		}

		peer, a := ip.Addr(bare), ip.Addr(r)
		trustedPeer := false
		for _, p := range prefixes {
			trustedPeer = trustedPeer || p.Contains(peer)
		}
		if !trustedPeer && a != peer {
			t.Fatalf("peer %v is not trusted (%q), yet the headers moved the client to %v", peer, trusted, a)
		}
		if a.IsValid() != peer.IsValid() {
			t.Fatalf("peer %q gives %v, with headers %v", remote, peer, a)
		}
		if a.IsValid() && (a.Is4In6() || a.Zone() != "") {
			t.Fatalf("address %v is mapped or zoned", a)
		}
		if a != peer && !written(a, xff+"\n"+fwd) {
			t.Fatalf("client %v is neither the peer %v nor an address in the headers %q / %q", a, peer, xff, fwd)
		}

		key := ip.Key(r)
		switch {
		case !a.IsValid():
			if key != "addr:"+remote {
				t.Fatalf("peer %q that is no address keyed %q", remote, key)
			}
		case a.Is4() || v6 == 128:
			if key != "ip:"+a.String() {
				t.Fatalf("address %v keyed %q", a, key)
			}
		default:
			bits := v6
			if bits < 1 || bits > 128 {
				bits = httplimit.DefaultIPv6Prefix
			}
			p, err := netip.ParsePrefix(strings.TrimPrefix(key, "ip:"))
			if err != nil || p.Bits() != bits || !p.Contains(a) || p != p.Masked() {
				t.Fatalf("IPv6 address %v with IPv6Prefix %d keyed %q", a, v6, key)
			}
		}
	})
}

// written reports whether a appears as an address token somewhere in the header text: split at
// every separator the two headers use and at white space (which parseHop trims, as
// strings.TrimSpace does), with quoting escapes and ports dropped.
func written(a netip.Addr, text string) bool {
	text = strings.ReplaceAll(text, `\`, "")
	for _, tok := range strings.FieldsFunc(text, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune(",;=\"[]", r) }) {
		if i := strings.LastIndexByte(tok, ':'); i > 0 && strings.IndexByte(tok, ':') == i {
			tok = tok[:i] // IPv4 with a port, plain or obfuscated
		}
		if b, err := netip.ParseAddr(tok); err == nil && b.Unmap().WithZone("") == a {
			return true
		}
	}
	return false
}

// FuzzParsePrefixes checks that what ParsePrefixes accepts is a list of masked, unmapped,
// zoneless ranges that reads back as itself, and that what it refuses is named.
func FuzzParsePrefixes(f *testing.F) {
	for _, s := range []string{
		"10.0.0.0/8, 192.0.2.7, 2001:db8::/32", "", " , ", "::ffff:10.0.0.0/104", "::ffff:0:0/95",
		"fe80::1%eth0", "10.0.0.1/33", "1.2.3.4/0", "::/0", "not-an-address",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := httplimit.ParsePrefixes(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "httplimit: ") {
				t.Fatalf("%q: error %q does not name the package", s, err)
			}
			return
		}
		texts := make([]string, len(ps))
		for i, p := range ps {
			if !p.IsValid() || p != p.Masked() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
				t.Fatalf("%q gave %v", s, p)
			}
			texts[i] = p.String()
		}
		again, err := httplimit.ParsePrefixes(strings.Join(texts, ","))
		if err != nil || len(again) != len(ps) {
			t.Fatalf("%q gave %v, which reads back as %v, %v", s, ps, again, err)
		}
		for i := range ps {
			if again[i] != ps[i] {
				t.Fatalf("%q gave %v, which reads back as %v", s, ps, again)
			}
		}
	})
}
