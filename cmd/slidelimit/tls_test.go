package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  []byte
}

var serial int64

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	der, key := newCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// newCert makes a certificate from tmpl, valid for the hour around now unless tmpl says
// otherwise, with a new key: signed by ca, or by itself when ca is nil.
func newCert(t *testing.T, tmpl *x509.Certificate, ca *testCA) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial++
	tmpl.SerialNumber = big.NewInt(serial)
	if tmpl.NotAfter.IsZero() {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	require.NoError(t, err)
	return der, key
}

// issue returns a PEM certificate and key for name, signed by ca: for 127.0.0.1 as a server, or
// as a client.
func (ca *testCA) issue(t *testing.T, name string, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: name}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	if client {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil
	}
	return ca.sign(t, tmpl)
}

// expired is issue for a server certificate that expired an hour ago.
func (ca *testCA) expired(t *testing.T, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	return ca.sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
}

// sign makes tmpl's certificate, signed by ca, with a new key, both in PEM.
func (ca *testCA) sign(t *testing.T, tmpl *x509.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	der, key := newCert(t, tmpl, ca)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// tlsCall makes one ShouldRateLimit call on a new connection with creds, and returns its error.
func tlsCall(addr string, creds credentials.TransportCredentials) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}})
	return err
}

// servedName is the common name of the certificate the server at addr presents to a new
// connection.
func servedName(t *testing.T, addr string, roots *x509.CertPool) string {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: failsafe}, "tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
	require.NoError(t, err)
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}

func edgeConfig(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 100}\n"), 0o644))
	return file
}

// With -tls-cert and -tls-key the service speaks gRPC over TLS only, and a certificate renewed on
// disk is what new connections get, within a second or so; files that do not load leave the last
// good ones in use.
func TestRLSTLS(t *testing.T) {
	// The files are laid out as Kubernetes mounts a secret: each path a symbolic link through
	// data, itself a link to the directory of one version, swapped for a link to the next.
	dir := t.TempDir()
	ca := newTestCA(t, "test CA")
	version := func(v string, c, k []byte) {
		require.NoError(t, os.Mkdir(filepath.Join(dir, v), 0o700))
		writeFile(t, filepath.Join(dir, v, "tls.crt"), string(c))
		writeFile(t, filepath.Join(dir, v, "tls.key"), string(k))
		require.NoError(t, os.Symlink(v, filepath.Join(dir, "data.new")))
		require.NoError(t, os.Rename(filepath.Join(dir, "data.new"), filepath.Join(dir, "data")))
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c, k := ca.issue(t, "rls-1", false)
	version("v1", c, k)
	require.NoError(t, os.Symlink(filepath.Join("data", "tls.crt"), certFile))
	require.NoError(t, os.Symlink(filepath.Join("data", "tls.key"), keyFile))
	p := startRLS(t, "-config", edgeConfig(t), "-tls-cert", certFile, "-tls-key", keyFile)
	assert.Contains(t, p.stderr(), `; gRPC over TLS, the certificate for "rls-1", valid until `)

	tlsCreds := credentials.NewTLS(&tls.Config{RootCAs: ca.pool})
	require.NoError(t, tlsCall(p.addr, tlsCreds))
	assert.Error(t, tlsCall(p.addr, insecure.NewCredentials()), "a plaintext call")
	// A client that offers no protocol by ALPN is refused: Envoy must be told to offer h2
	// (examples/envoy/rls-cluster-tls.yaml).
	raw, err := tls.DialWithDialer(&net.Dialer{Timeout: failsafe}, "tcp", p.addr, &tls.Config{RootCAs: ca.pool})
	if err == nil {
		require.NoError(t, raw.SetDeadline(time.Now().Add(failsafe)))
		_, err = raw.Read(make([]byte, 1))
		raw.Close()
	}
	assert.ErrorIs(t, err, io.EOF, "a TLS client without ALPN")
	// TLS 1.2 at least.
	_, err = tls.DialWithDialer(&net.Dialer{Timeout: failsafe}, "tcp", p.addr, &tls.Config{RootCAs: ca.pool,
		NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
	assert.ErrorContains(t, err, "protocol version", "a TLS 1.1 client")
	other := newTestCA(t, "another CA")
	assert.Error(t, tlsCall(p.addr, credentials.NewTLS(&tls.Config{RootCAs: other.pool})), "a client that trusts another CA")

	// Renewed: the new pair is served to new connections, and a connection made before goes on.
	before, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(tlsCreds))
	require.NoError(t, err)
	defer before.Close()
	client := rlsv3.NewRateLimitServiceClient(before)
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), failsafe)
		defer cancel()
		_, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.2"}}}}})
		return err
	}
	require.NoError(t, call())
	c, k = ca.issue(t, "rls-2", false)
	version("v2", c, k)
	require.Eventually(t, func() bool { return servedName(t, p.addr, ca.pool) == "rls-2" }, failsafe, 100*time.Millisecond)
	require.NoError(t, tlsCall(p.addr, tlsCreds))
	require.NoError(t, call(), "the connection made before the renewal")
	assert.Contains(t, p.stderr(), `TLS files reloaded: new connections get the certificate for "rls-2"`)

	// A key that does not match its certificate (written first, in a renewal) keeps the last pair.
	_, k = ca.issue(t, "rls-3", false)
	writeFile(t, filepath.Join(dir, "v2", "tls.key"), string(k))
	require.Eventually(t, func() bool {
		servedName(t, p.addr, ca.pool) // a handshake looks at the files
		return strings.Contains(p.stderr(), "TLS files changed but do not load")
	}, failsafe, 100*time.Millisecond)
	assert.Equal(t, "rls-2", servedName(t, p.addr, ca.pool))
	require.NoError(t, tlsCall(p.addr, tlsCreds))

	// An expired certificate is not swapped in either.
	c, k = ca.expired(t, "rls-old")
	version("v3", c, k)
	warnings := func() int { return strings.Count(p.stderr(), "TLS files changed but do not load") }
	require.Eventually(t, func() bool {
		servedName(t, p.addr, ca.pool)
		return warnings() == 2
	}, failsafe, 100*time.Millisecond)
	assert.Contains(t, p.stderr(), `the certificate for "rls-old" expired at `)
	assert.Equal(t, "rls-2", servedName(t, p.addr, ca.pool))

	// A certificate that goes missing is said once while it stays missing, and again if it goes
	// missing again after the files were good.
	require.NoError(t, os.Rename(filepath.Join(dir, "data"), filepath.Join(dir, "data.v3")))
	require.NoError(t, os.Symlink("v2", filepath.Join(dir, "data")))
	require.Eventually(t, func() bool {
		servedName(t, p.addr, ca.pool)
		return warnings() == 2 && strings.Count(p.stderr(), "TLS files reloaded") == 1
	}, failsafe, 100*time.Millisecond)
	gone := func() int { return strings.Count(p.stderr(), "-tls-cert: stat "+certFile) }
	for round := 1; round <= 2; round++ {
		require.NoError(t, os.Rename(filepath.Join(dir, "v2", "tls.crt"), filepath.Join(dir, "v2", "tls.crt.away")))
		require.Eventually(t, func() bool { servedName(t, p.addr, ca.pool); return gone() == round }, failsafe, 100*time.Millisecond)
		time.Sleep(1500 * time.Millisecond) // another look, or more, while it is missing
		servedName(t, p.addr, ca.pool)
		assert.Equal(t, round, gone(), "round %d: said once while missing", round)
		require.NoError(t, os.Rename(filepath.Join(dir, "v2", "tls.crt.away"), filepath.Join(dir, "v2", "tls.crt")))
		time.Sleep(1500 * time.Millisecond)
		assert.Equal(t, "rls-2", servedName(t, p.addr, ca.pool), "round %d", round) // a look finds the files good
	}
}

// With -tls-client-ca each client must present a certificate signed by one of its CAs.
func TestRLSMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, clients, other := newTestCA(t, "server CA"), newTestCA(t, "client CA"), newTestCA(t, "another CA")
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	c, k := ca.issue(t, "rls", false)
	writeFile(t, certFile, string(c))
	writeFile(t, keyFile, string(k))
	writeFile(t, caFile, string(clients.pem))
	p := startRLS(t, "-config", edgeConfig(t), "-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", caFile)
	assert.Contains(t, p.stderr(), ", client certificates required")

	with := func(signer *testCA) credentials.TransportCredentials {
		cfg := &tls.Config{RootCAs: ca.pool}
		if signer != nil {
			c, k := signer.issue(t, "envoy", true)
			pair, err := tls.X509KeyPair(c, k)
			require.NoError(t, err)
			cfg.Certificates = []tls.Certificate{pair}
		}
		return credentials.NewTLS(cfg)
	}
	require.NoError(t, tlsCall(p.addr, with(clients)))
	assert.Error(t, tlsCall(p.addr, with(nil)), "no client certificate")
	assert.Error(t, tlsCall(p.addr, with(other)), "a client certificate of another CA")
}

// Bad TLS flags and files are a bad command line (exit 2), named.
func TestRLSBadTLSFlags(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "test CA")
	c, k := ca.issue(t, "rls", false)
	certFile, keyFile, junk := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "junk.pem")
	writeFile(t, certFile, string(c))
	writeFile(t, keyFile, string(k))
	writeFile(t, junk, "not a certificate\n")
	missing := filepath.Join(dir, "missing.pem")
	// Client CA files: none in it; a good CA then junk; a good CA then a key; a certificate block
	// that is not DER.
	empty, caJunk, caKey, caBad := filepath.Join(dir, "empty.pem"), filepath.Join(dir, "ca-junk.pem"), filepath.Join(dir, "ca-key.pem"), filepath.Join(dir, "ca-bad.pem")
	writeFile(t, empty, "\n")
	writeFile(t, caJunk, string(ca.pem)+"trailing junk\n")
	writeFile(t, caKey, string(ca.pem)+string(k))
	writeFile(t, caBad, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")})))
	oldCert, oldKey := filepath.Join(dir, "old.crt"), filepath.Join(dir, "old.key")
	c, k = ca.expired(t, "rls-old")
	writeFile(t, oldCert, string(c))
	writeFile(t, oldKey, string(k))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-tls-cert", certFile}, "-tls-cert and -tls-key go together"},
		{[]string{"-tls-key", keyFile}, "-tls-cert and -tls-key go together"},
		{[]string{"-tls-client-ca", junk}, "-tls-client-ca " + junk + ": needs -tls-cert and -tls-key"},
		{[]string{"-tls-cert", missing, "-tls-key", keyFile}, "-tls-cert: stat " + missing + ": no such file or directory"},
		{[]string{"-tls-cert", keyFile, "-tls-key", certFile}, "-tls-cert " + keyFile + ", -tls-key " + certFile + ": tls: "},
		{[]string{"-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", junk}, "-tls-client-ca " + junk + ": certificate 1: not a PEM block (at line 1)"},
		{[]string{"-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", empty}, "-tls-client-ca " + empty + ": no certificate in it"},
		{[]string{"-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", caJunk}, "-tls-client-ca " + caJunk + fmt.Sprintf(": certificate 2: not a PEM block (at line %d)", strings.Count(string(ca.pem), "\n")+1)},
		{[]string{"-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", caKey}, "-tls-client-ca " + caKey + `: certificate 2: a PEM block of type "EC PRIVATE KEY", not CERTIFICATE`},
		{[]string{"-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", caBad}, "-tls-client-ca " + caBad + ": certificate 1: x509: "},
		{[]string{"-tls-cert", oldCert, "-tls-key", oldKey}, "-tls-cert " + oldCert + `: the certificate for "rls-old" expired at `},
		{[]string{"-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", missing}, "-tls-client-ca: stat " + missing + ": no such file or directory"},
	} {
		out, code := runRLS(t, append([]string{"-config", edgeConfig(t), "-listen", "127.0.0.1:0"}, tc.args...)...)
		assert.Equal(t, exitUsage, code, "%v: %s", tc.args, out)
		assert.Contains(t, out, tc.want, "%v", tc.args)
		// Where, not what: a file named by mistake (an env file) would have a secret quoted.
		assert.NotContains(t, out, "not a certificate", "%v: the file's text is quoted", tc.args)
		assert.NotContains(t, out, "trailing junk", "%v: the file's text is quoted", tc.args)
	}
}

// serverCertFiles writes a certificate for 127.0.0.1 named name, and its key, to tls.crt and
// tls.key in a new directory, signed by a new CA, which it returns.
func serverCertFiles(t *testing.T, name string) (ca *testCA, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	ca = newTestCA(t, "test CA")
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c, k := ca.issue(t, name, false)
	writeFile(t, certFile, string(c))
	writeFile(t, keyFile, string(k))
	return ca, certFile, keyFile
}

// tlsProxyClient is an HTTPS client that trusts roots, presents cert when it is not nil, and
// offers HTTP/2 by ALPN only when h2.
func tlsProxyClient(t *testing.T, roots *x509.CertPool, cert *tls.Certificate, h2 bool) *http.Client {
	cfg := &tls.Config{RootCAs: roots}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: h2}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: failsafe}
}

// With -tls-cert and -tls-key the proxy serves HTTPS on -listen, HTTP/1.1 and HTTP/2 alike,
// limits both as one, and tells the upstream the request came over https.
func TestProxyTLS(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "proto=%s forwarded=%s", r.Header.Get("X-Forwarded-Proto"), r.Header.Get("Forwarded"))
	}))
	t.Cleanup(up.Close)
	ca, certFile, keyFile := serverCertFiles(t, "proxy-1")
	p := startProxy(t, "-upstream", up.URL, "-limit", "2", "-window", "1h", "-tls-cert", certFile, "-tls-key", keyFile)
	assert.Contains(t, p.stderr(), `; HTTPS, the certificate for \"proxy-1\", valid until `)

	get := func(c *http.Client) (*http.Response, string) {
		t.Helper()
		res, err := c.Get("https://" + p.addr + "/")
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, string(b)
	}
	res, body := get(tlsProxyClient(t, ca.pool, nil, false))
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "HTTP/1.1", res.Proto)
	assert.Equal(t, `proto=https forwarded=for=127.0.0.1;host="`+p.addr+`";proto=https`, body)
	res, body = get(tlsProxyClient(t, ca.pool, nil, true))
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "HTTP/2.0", res.Proto)
	assert.Contains(t, body, "proto=https ")
	res, _ = get(tlsProxyClient(t, ca.pool, nil, true))
	assert.Equal(t, http.StatusTooManyRequests, res.StatusCode, "the third request of the client's two, whichever protocol")

	// Plain HTTP on the TLS port is answered 400 by the server itself, and a client that does not
	// trust the certificate is refused in the handshake.
	plain, err := http.Get("http://" + p.addr + "/")
	require.NoError(t, err)
	b, err := io.ReadAll(plain.Body)
	plain.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusBadRequest, plain.StatusCode)
	assert.Contains(t, string(b), "HTTP request to an HTTPS server")
	_, err = tlsProxyClient(t, newTestCA(t, "another CA").pool, nil, false).Get("https://" + p.addr + "/")
	assert.ErrorContains(t, err, "certificate signed by unknown authority")

	// A renewed certificate is what new connections get.
	c, k := ca.issue(t, "proxy-2", false)
	writeFile(t, keyFile, string(k))
	writeFile(t, certFile, string(c))
	require.Eventually(t, func() bool { return servedName(t, p.addr, ca.pool) == "proxy-2" }, failsafe, 100*time.Millisecond)
	require.Eventually(t, func() bool {
		return strings.Contains(p.stderr(), `TLS files reloaded: new connections get the certificate for \"proxy-2\"`)
	}, failsafe, 10*time.Millisecond)
}

// -tls-client-ca requires a client certificate of its CAs; -conn-limit closes a connection at
// accept, before its handshake.
func TestProxyMutualTLSAndConnLimit(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	ca, clients := newTestCA(t, "server CA"), newTestCA(t, "client CA")
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	c, k := ca.issue(t, "proxy", false)
	writeFile(t, certFile, string(c))
	writeFile(t, keyFile, string(k))
	writeFile(t, caFile, string(clients.pem))
	p := startProxy(t, "-upstream", up.URL, "-conn-limit", "2", "-window", "1h",
		"-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", caFile)
	assert.Contains(t, p.stderr(), ", client certificates required")
	c, k = clients.issue(t, "client", true)
	pair, err := tls.X509KeyPair(c, k)
	require.NoError(t, err)

	// Connection 1: no client certificate, refused in the handshake.
	_, err = tlsProxyClient(t, ca.pool, nil, false).Get("https://" + p.addr + "/")
	assert.Error(t, err, "no client certificate")
	// Connection 2: admitted, and kept alive for a second request.
	with := tlsProxyClient(t, ca.pool, &pair, false)
	for range 2 {
		res, err := with.Get("https://" + p.addr + "/")
		require.NoError(t, err)
		io.Copy(io.Discard, res.Body) // read to its end, so that the connection is used again
		res.Body.Close()
		assert.Equal(t, http.StatusOK, res.StatusCode)
	}
	// Connection 3 is over -conn-limit: closed before any TLS is spoken.
	raw, err := net.DialTimeout("tcp", p.addr, failsafe)
	require.NoError(t, err)
	defer raw.Close()
	require.NoError(t, raw.SetDeadline(time.Now().Add(failsafe)))
	_, err = raw.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "a connection over -conn-limit")
	assert.Equal(t, int64(2), up.hits.Load())
}

// Bad proxy TLS flags are a bad command line (exit 2), named.
func TestProxyBadTLSFlags(t *testing.T) {
	_, certFile, keyFile := serverCertFiles(t, "proxy")
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-tls-cert", certFile}, "-tls-cert and -tls-key go together: give both, or neither for plain HTTP"},
		{[]string{"-tls-client-ca", certFile}, "-tls-client-ca " + certFile + ": needs -tls-cert and -tls-key"},
		{[]string{"-tls-cert", certFile, "-tls-key", missing}, "-tls-key: stat " + missing + ": no such file or directory"},
		{[]string{"-tls-cert", keyFile, "-tls-key", certFile}, "-tls-cert " + keyFile + ", -tls-key " + certFile + ": tls: "},
		{[]string{"-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", keyFile}, "-tls-client-ca " + keyFile + `: certificate 1: a PEM block of type "EC PRIVATE KEY", not CERTIFICATE`},
	} {
		out, code := runProxy(t, append([]string{"-upstream", "http://127.0.0.1:1", "-listen", "127.0.0.1:0"}, tc.args...)...)
		assert.Equal(t, exitUsage, code, "%v: %s", tc.args, out)
		assert.Contains(t, out, tc.want, "%v", tc.args)
	}
}

// An upgrade (a WebSocket) works over HTTPS as over plain HTTP, on an HTTP/1.1 connection.
func TestProxyTLSUpgrade(t *testing.T) {
	up := newUpgradeUpstream(t)
	ca, certFile, keyFile := serverCertFiles(t, "proxy")
	p := startProxy(t, "-upstream", up.URL, "-tls-cert", certFile, "-tls-key", keyFile)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: failsafe}, "tcp", p.addr, &tls.Config{RootCAs: ca.pool, NextProtos: []string{"http/1.1"}})
	require.NoError(t, err)
	u := upgradeOn(t, p, conn)
	for _, msg := range []string{"one", "two"} {
		got, err := u.echo(msg)
		require.NoError(t, err)
		assert.Equal(t, msg, got)
	}
}

// At SIGTERM a connection that has sent no request (a bare TCP connect, a TLS preconnect) is
// closed at once rather than waited for, and no request is said to be cut off; an HTTP/2 request
// in flight on a connection of its own still finishes.
func TestProxyShutdownClosesSilentConnections(t *testing.T) {
	up, entered, release := heldUpstream(t)
	ca, certFile, keyFile := serverCertFiles(t, "proxy")
	// Shorter than the 5s for which http.Server.Shutdown waits on a connection with no request:
	// without the close at shutdown, the request in flight would be cut off at this deadline
	// while the silent connections were waited for.
	p := startProxy(t, "-upstream", up.URL, "-shutdown-timeout", "4s", "-tls-cert", certFile, "-tls-key", keyFile)

	bare, err := net.DialTimeout("tcp", p.addr, failsafe)
	require.NoError(t, err)
	defer bare.Close()
	pre, err := tls.DialWithDialer(&net.Dialer{Timeout: failsafe}, "tcp", p.addr, &tls.Config{RootCAs: ca.pool, NextProtos: []string{"http/1.1"}})
	require.NoError(t, err)
	defer pre.Close()
	type result struct {
		code int
		body string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		res, err := tlsProxyClient(t, ca.pool, nil, true).Get("https://" + p.addr + "/slow")
		if err != nil {
			done <- result{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		done <- result{res.StatusCode, string(b), err}
	}()
	select {
	case <-entered:
	case <-time.After(failsafe):
		t.Fatal("the request never reached the upstream")
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	for _, conn := range []net.Conn{bare, pre} {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(failsafe)))
		_, err := conn.Read(make([]byte, 1))
		assert.ErrorIs(t, err, io.EOF, "a connection with no request is closed at shutdown")
	}
	close(release)
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, result{code: 200, body: "finished"}, r, "the HTTP/2 request in flight finished")
	p.exitedOK(t)
	assert.NotContains(t, p.stderr(), "cut off")
}

// A certificate not valid yet is served, at start and when read again, with a warning: clients
// refuse it until then.
func TestTLSNotYetValidIsWarned(t *testing.T) {
	ca, certFile, keyFile := serverCertFiles(t, "proxy-1")
	p := startProxy(t, "-upstream", "http://127.0.0.1:1", "-tls-cert", certFile, "-tls-key", keyFile)
	assert.NotContains(t, p.stderr(), "is not valid until")
	c, k := ca.sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: "proxy-2"}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(2 * time.Hour)})
	writeFile(t, keyFile, string(k))
	writeFile(t, certFile, string(c))
	require.Eventually(t, func() bool {
		if conn, err := tls.DialWithDialer(&net.Dialer{Timeout: failsafe}, "tcp", p.addr, &tls.Config{InsecureSkipVerify: true}); err == nil {
			conn.Close() // a handshake looks at the files
		}
		return strings.Contains(p.stderr(), "-tls-cert "+certFile+" is not valid until ")
	}, failsafe, 100*time.Millisecond)
}

// Connections that close before a TLS handshake (a load balancer's TCP health check, a port scan),
// and idle ones that shutdown closes, log nothing; other failed handshakes are logged at WARN, at
// most one a second, with the count dropped. net/http logged each at ERROR, one line a connection,
// which anyone who can reach the port could use to flood the log.
func TestFailedHandshakesDoNotFloodTheLog(t *testing.T) {
	_, certFile, keyFile := serverCertFiles(t, "proxy")
	p := startProxy(t, "-upstream", "http://127.0.0.1:1", "-tls-cert", certFile, "-tls-key", keyFile)
	for range 50 {
		c, err := net.DialTimeout("tcp", p.addr, failsafe)
		require.NoError(t, err)
		require.NoError(t, c.Close())
	}
	// Handshakes that fail on what the peer sent: not TLS at all.
	for range 20 {
		c, err := net.DialTimeout("tcp", p.addr, failsafe)
		require.NoError(t, err)
		_, err = c.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5})
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, c)
		require.NoError(t, c.Close())
	}
	idle, err := net.DialTimeout("tcp", p.addr, failsafe)
	require.NoError(t, err)
	defer idle.Close()
	// The last of the failed handshakes' lines is written as its connection closes: wait for one.
	require.Eventually(t, func() bool { return strings.Contains(p.stderr(), "TLS handshake error") }, failsafe, 10*time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.exitedOK(t)
	log := p.stderr()
	assert.NotContains(t, log, "level=ERROR")
	assert.NotContains(t, log, "EOF")
	assert.NotContains(t, log, "use of closed network connection")
	if n := strings.Count(log, "TLS handshake error"); n < 1 || n > 3 {
		t.Fatalf("%d lines about failed handshakes in a second, want one (or a few across a second's edge):\n%s", n, log)
	}
	assert.Contains(t, log, "level=WARN")
}
