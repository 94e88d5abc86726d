package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// h2cClient speaks only HTTP/2 without TLS (prior knowledge), or only HTTP/1.1.
func h2cClient(t *testing.T, h2 bool) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	if h2 {
		tr.Protocols.SetUnencryptedHTTP2(true)
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: failsafe}
}

// -h2c accepts HTTP/2 without TLS beside HTTP/1.1, limiting both as one; -upstream-h2c forwards
// over it, so that a gRPC server can sit behind the proxy. Without -h2c an HTTP/2 client by prior
// knowledge is refused.
func TestProxyH2C(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream saw %s", r.Proto)
	}))
	up.Config.Protocols = new(http.Protocols)
	up.Config.Protocols.SetUnencryptedHTTP2(true)
	up.Start()
	t.Cleanup(up.Close)

	get := func(c *http.Client, addr string) (int, string, string) {
		t.Helper()
		res, err := c.Get("http://" + addr + "/")
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, res.Proto, string(b)
	}
	p := startProxy(t, "-upstream", up.URL, "-limit", "2", "-window", "1h", "-h2c", "-upstream-h2c")
	assert.Contains(t, p.stderr(), "; plain HTTP/1.1 and HTTP/2; ")
	code, proto, body := get(h2cClient(t, true), p.addr)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "HTTP/2.0", proto)
	assert.Equal(t, "upstream saw HTTP/2.0", body)
	code, proto, _ = get(h2cClient(t, false), p.addr)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "HTTP/1.1", proto)
	code, _, _ = get(h2cClient(t, true), p.addr)
	assert.Equal(t, http.StatusTooManyRequests, code, "the client's third request, whichever protocol")

	plain := startProxy(t, "-upstream", "http://127.0.0.1:1")
	_, err := h2cClient(t, true).Get("http://" + plain.addr + "/")
	assert.Error(t, err, "HTTP/2 by prior knowledge without -h2c")
}

// -h2c with -tls-cert and -upstream-h2c with an https:// upstream are refused, named.
func TestProxyBadH2CFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-upstream", "http://127.0.0.1:1", "-h2c", "-tls-cert", "c.pem", "-tls-key", "k.pem"}, "-h2c is HTTP/2 without TLS: with -tls-cert, HTTP/2 is offered by ALPN already"},
		{[]string{"-upstream", "https://127.0.0.1:1", "-upstream-h2c"}, `-upstream-h2c with -upstream "https://127.0.0.1:1": HTTP/2 without TLS needs an http:// upstream`},
	} {
		out, code := runProxy(t, append([]string{"-listen", "127.0.0.1:0"}, tc.args...)...)
		assert.Equal(t, exitUsage, code, "%v: %s", tc.args, out)
		assert.Contains(t, out, tc.want, "%v", tc.args)
	}
}

// A client's "Upgrade: h2c" (the HTTP/1.1 handshake to HTTP/2, which the proxy does not offer) is
// served as HTTP/1.1, and not passed on for the upstream to switch in the proxy's place.
func TestProxyServesAnH2CUpgradeAsHTTP1(t *testing.T) {
	up := newHeaderUpstream(t)
	for _, flags := range [][]string{{"-h2c"}, nil} {
		p := startProxy(t, append([]string{"-upstream", up.URL}, flags...)...)
		req, err := http.NewRequest(http.MethodGet, "http://"+p.addr+"/", nil)
		require.NoError(t, err)
		req.Header.Set("Connection", "Upgrade, HTTP2-Settings")
		req.Header.Set("Upgrade", "h2c")
		req.Header.Set("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")
		res, err := h2cClient(t, false).Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, res.StatusCode, "%v", flags)
		assert.Equal(t, "ok", string(body), "%v", flags)
		h := up.last()
		assert.Empty(t, h.Values("Upgrade"), "%v: the upstream was asked to upgrade", flags)
		assert.Empty(t, h.Values("Http2-Settings"), "%v", flags)
		assert.Empty(t, h.Values("Connection"), "%v", flags)
	}
}

// An HTTP/2 client that breaks the protocol on its connection (here a DATA frame on stream 0)
// makes the server write a line, one a connection: those are logged at WARN, at most one a
// second, with the count dropped, as failed TLS handshakes are. At ERROR, any client could write
// an ERROR line a connection.
func TestHTTP2ProtocolErrorsDoNotFloodTheLog(t *testing.T) {
	p := startProxy(t, "-upstream", "http://127.0.0.1:1", "-h2c")
	const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	settings := []byte{0, 0, 0, 4, 0, 0, 0, 0, 0}   // an empty SETTINGS frame
	dataOnZero := []byte{0, 0, 0, 0, 0, 0, 0, 0, 0} // an empty DATA frame on stream 0: a connection error
	// At once: the server lingers about a second on each connection before it closes it.
	var wg sync.WaitGroup
	// A client that sends the preface and no SETTINGS: the server gives up on it after a while
	// ("timeout waiting for SETTINGS frames from ADDR", which has no "http2:" of its own).
	for range 10 {
		c, err := net.DialTimeout("tcp", p.addr, failsafe)
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(failsafe)))
		_, err = io.WriteString(c, preface)
		require.NoError(t, err)
		wg.Go(func() {
			_, _ = io.Copy(io.Discard, c)
			_ = c.Close()
		})
	}
	for range 30 {
		c, err := net.DialTimeout("tcp", p.addr, failsafe)
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(failsafe)))
		_, err = c.Write(append(append([]byte(preface), settings...), dataOnZero...))
		require.NoError(t, err)
		wg.Go(func() {
			_, _ = io.Copy(io.Discard, c) // until the server closes the connection
			_ = c.Close()
		})
	}
	wg.Wait()
	require.Eventually(t, func() bool { return strings.Contains(p.stderr(), "http2: server") }, failsafe, 10*time.Millisecond)
	log := p.stderr()
	assert.NotContains(t, log, "level=ERROR")
	if n := strings.Count(log, "http2: server") + strings.Count(log, "timeout waiting for SETTINGS"); n > 6 {
		t.Fatalf("%d lines about HTTP/2 protocol errors, want one a second (or a few across a second's edge):\n%s", n, log)
	}
	assert.Contains(t, log, "level=WARN")
}

// A cut or garbled HTTP/2 preface, which net/http reads as an HTTP/1 request of method PRI, is
// refused with 400 rather than forwarded: the upstream got "PRI /%2A HTTP/1.1".
func TestProxyRefusesABrokenPreface(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(up.Close)
	for _, args := range [][]string{nil, {"-h2c"}} {
		p := startProxy(t, append([]string{"-upstream", up.URL}, args...)...)
		c, err := net.DialTimeout("tcp", p.addr, failsafe)
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(failsafe)))
		_, err = io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n")
		require.NoError(t, err)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "%v", args)
		res.Body.Close()
		c.Close()
		assert.Equal(t, http.StatusBadRequest, res.StatusCode, "%v", args)
	}
	assert.Zero(t, hits.Load(), "the upstream was sent the preface")
}
