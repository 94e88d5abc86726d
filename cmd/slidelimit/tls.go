package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log"
	"os"
	"sync"
	"time"
)

// tlsFiles serves a TLS configuration read from PEM files, read again when they change: a
// certificate renewed on disk (by cert-manager, say) is served to new connections without a
// restart. Connections made before keep the certificate they were made with.
//
// The files are looked at once a second at most, during a handshake, which long-lived gRPC
// connections make rarely. Files that change but do not load (a key written before its
// certificate, in the moment between the two) leave the last good configuration in use, and are
// tried again at the next look; the log says so once per change.
//
// Safe for concurrent use: handshakes on many connections call configForClient at once.
type tlsFiles struct {
	cert, key, clientCA string
	logger              *log.Logger

	mu      sync.Mutex
	cfg     *tls.Config // the last configuration that loaded
	loaded  [3]string   // the files' contents it was made from
	failed  [3]string   // the contents of the last change that failed to load, logged once
	checked time.Time
}

// tlsCheckEvery is how often, at most, a handshake looks at the files.
const tlsCheckEvery = time.Second

// newTLSFiles loads the certificate, its key and, when clientCA is not empty, the CAs whose
// client certificates are required. Its errors name the flag and the file at fault.
func newTLSFiles(cert, key, clientCA string, logger *log.Logger) (*tlsFiles, error) {
	f := &tlsFiles{cert: cert, key: key, clientCA: clientCA, logger: logger}
	files, err := f.read()
	if err != nil {
		return nil, err
	}
	if f.cfg, err = f.load(files); err != nil {
		return nil, err
	}
	f.loaded, f.checked = files, time.Now()
	return f, nil
}

// read returns the files' contents. The contents, not the files' times, tell a change: a renewal
// that swaps a directory of symbolic links (as Kubernetes mounts a secret) changes no time of the
// paths given.
func (f *tlsFiles) read() (files [3]string, err error) {
	for i, file := range []struct{ flag, path string }{{"-tls-cert", f.cert}, {"-tls-key", f.key}, {"-tls-client-ca", f.clientCA}} {
		if file.path == "" {
			continue
		}
		b, err := os.ReadFile(file.path)
		if err != nil {
			return files, fmt.Errorf("%s: %w", file.flag, err)
		}
		files[i] = string(b)
	}
	return files, nil
}

// load makes a server configuration of the files' contents.
func (f *tlsFiles) load(files [3]string) (*tls.Config, error) {
	pair, err := tls.X509KeyPair([]byte(files[0]), []byte(files[1]))
	if err != nil {
		return nil, fmt.Errorf("-tls-cert %s, -tls-key %s: %w", f.cert, f.key, err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
		// gRPC clients require the server to choose HTTP/2 by ALPN.
		NextProtos: []string{"h2"},
	}
	if f.clientCA != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(files[2])) {
			return nil, fmt.Errorf("-tls-client-ca %s: no PEM certificate in it", f.clientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// serverConfig is the configuration to listen with: each handshake takes the files' current one.
func (f *tlsFiles) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"h2"},
		GetConfigForClient: f.configForClient,
	}
}

func (f *tlsFiles) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := time.Now(); now.Sub(f.checked) >= tlsCheckEvery {
		f.checked = now
		files, err := f.read()
		if err == nil && f.loaded == files {
			return f.cfg, nil
		}
		var cfg *tls.Config
		if err == nil {
			cfg, err = f.load(files)
		}
		switch {
		case err == nil:
			f.cfg, f.loaded = cfg, files
			f.logger.Printf("TLS files reloaded: new connections get %s", describeCert(cfg))
		case f.failed != files:
			f.failed = files
			f.logger.Printf("warning: TLS files changed but do not load, keeping the last good ones (tried again each second while they differ): %v", err)
		}
	}
	return f.cfg, nil
}

// describeCert names a configuration's certificate for the log: its subject and expiry.
func describeCert(cfg *tls.Config) string {
	if len(cfg.Certificates) == 0 || cfg.Certificates[0].Leaf == nil {
		return "a certificate"
	}
	leaf := cfg.Certificates[0].Leaf
	return fmt.Sprintf("the certificate for %q, valid until %s", leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.RFC3339))
}
