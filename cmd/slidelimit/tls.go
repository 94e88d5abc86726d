package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
)

// tlsFiles serves a TLS configuration read from PEM files, read again when they change: a
// certificate renewed on disk (by cert-manager, say) is served to new connections without a
// restart. Connections made before keep the certificate they were made with.
//
// The files are looked at once a second at most, during a handshake, which long-lived
// connections make rarely. Files that cannot be read or do not load (a key written before its
// certificate, in the moment between the two; a certificate that has expired) leave the last good
// configuration in use, and are tried again at the next look; the log says so once for each
// failure, until the files are good again.
//
// Safe for concurrent use: handshakes on many connections call configForClient at once.
type tlsFiles struct {
	cert, key, clientCA string
	protos              []string // offered by ALPN, in order of preference
	say                 func(warning bool, msg string)

	mu      sync.Mutex
	cfg     *tls.Config // the last configuration that loaded
	loaded  [3]string   // the files' contents it was made from
	failure string      // the last failure logged, and the contents it was logged for; "": none since
	checked time.Time
}

// maxPEMBytes bounds each TLS file: a certificate chain is kilobytes.
const maxPEMBytes = 1 << 20

// tlsCheckEvery is how often, at most, a handshake looks at the files.
const tlsCheckEvery = time.Second

// newTLSFiles loads the certificate, its key and, when clientCA is not empty, the CAs whose
// client certificates are required; the server chooses among protos by ALPN. Its lines go to say,
// warnings flagged. Its errors name the flag and the file at fault.
func newTLSFiles(cert, key, clientCA string, protos []string, say func(warning bool, msg string)) (*tlsFiles, error) {
	f := &tlsFiles{cert: cert, key: key, clientCA: clientCA, protos: protos, say: say}
	files, err := f.read()
	if err != nil {
		return nil, err
	}
	if f.cfg, err = f.load(files); err != nil {
		return nil, err
	}
	f.warnNotYetValid()
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
		// A FIFO would block the read, under f.mu, and with it every handshake after it.
		b, err := readRegularFile(file.path, maxPEMBytes, "PEM file")
		if err != nil {
			return files, fmt.Errorf("%s: %w", file.flag, err)
		}
		files[i] = string(b)
	}
	return files, nil
}

// load makes a server configuration of the files' contents. A certificate that has expired is
// refused: every client would refuse it.
func (f *tlsFiles) load(files [3]string) (*tls.Config, error) {
	pair, err := tls.X509KeyPair([]byte(files[0]), []byte(files[1]))
	if err != nil {
		return nil, fmt.Errorf("-tls-cert %s, -tls-key %s: %w", f.cert, f.key, err)
	}
	if pair.Leaf == nil { // GODEBUG=x509keypairleaf=0 leaves it out
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("-tls-cert %s: %w", f.cert, err)
		}
	}
	if time.Now().After(pair.Leaf.NotAfter) {
		return nil, fmt.Errorf("-tls-cert %s: the certificate for %q expired at %s", f.cert, pair.Leaf.Subject.CommonName, pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   f.protos,
	}
	if f.clientCA != "" {
		pool, err := certPool(files[2])
		if err != nil {
			return nil, fmt.Errorf("-tls-client-ca %s: %w", f.clientCA, err)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// certPool reads a PEM file of certificates strictly: every block a certificate that parses, and
// nothing else in the file but space between them. x509.CertPool.AppendCertsFromPEM skips what it
// cannot read, so a CA cut short or pasted with junk around it would be trusted less than asked,
// with no word said.
func certPool(data string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	rest := []byte(data)
	for n := 1; ; n++ {
		if len(bytes.TrimSpace(rest)) == 0 {
			if n == 1 {
				return nil, fmt.Errorf("no certificate in it")
			}
			return pool, nil
		}
		block, after := pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("certificate %d: not a PEM block (at line %d)", n, lineOf(data, rest))
		}
		if lead := bytes.TrimSpace(rest[:len(rest)-len(after)]); !bytes.HasPrefix(lead, []byte("-----BEGIN")) {
			return nil, fmt.Errorf("certificate %d: text before its PEM block (at line %d)", n, lineOf(data, rest))
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("certificate %d: a PEM block of type %q, not CERTIFICATE", n, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n, err)
		}
		pool.AddCert(cert)
		rest = after
	}
}

// lineOf is the number of the line where rest, the end of data, has its first byte that is not
// space, for an error message. It says where, not what: a file given by mistake (an env file, a
// secret's mount) would have its first line, a password perhaps, quoted in the error and the log.
func lineOf(data string, rest []byte) int {
	off := len(data) - len(bytes.TrimLeftFunc(rest, unicode.IsSpace))
	return 1 + strings.Count(data[:off], "\n")
}

// serverConfig is the configuration to listen with: each handshake takes the files' current one,
// whose version floor and ALPN protocol are what apply (see load).
func (f *tlsFiles) serverConfig() *tls.Config {
	return &tls.Config{GetConfigForClient: f.configForClient}
}

func (f *tlsFiles) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := time.Now(); now.Sub(f.checked) >= tlsCheckEvery {
		f.checked = now
		f.look()
	}
	return f.cfg, nil
}

// look reads the files and, when they changed, loads them; under f.mu.
func (f *tlsFiles) look() {
	files, err := f.read()
	if err == nil && files == f.loaded {
		f.failure = ""
		return
	}
	var cfg *tls.Config
	if err == nil {
		cfg, err = f.load(files)
	}
	if err == nil {
		f.cfg, f.loaded, f.failure = cfg, files, ""
		f.say(false, "TLS files reloaded: new connections get "+describeCert(cfg))
		f.warnNotYetValid()
		return
	}
	// Logged once for each failure and the contents it was met with, until a look finds the files
	// good again: a file missing for a minute is one line, and missing again later is another.
	if failure := err.Error() + "\x00" + strings.Join(files[:], "\x00"); failure != f.failure {
		f.failure = failure
		f.say(true, "TLS files changed but do not load, keeping the last good ones (tried again each second while they differ): "+err.Error())
	}
}

// warnNotYetValid says when the certificate in use is not valid yet. Not refused: a certificate
// issued a moment ago on a host whose clock runs ahead is about to be good.
func (f *tlsFiles) warnNotYetValid() {
	if leaf := f.cfg.Certificates[0].Leaf; time.Now().Before(leaf.NotBefore) {
		f.say(true, fmt.Sprintf("-tls-cert %s is not valid until %s: clients refuse it until then", f.cert, leaf.NotBefore.UTC().Format(time.RFC3339)))
	}
}

// describeCert names a configuration's certificate for the log: its subject and expiry.
func describeCert(cfg *tls.Config) string {
	leaf := cfg.Certificates[0].Leaf
	return fmt.Sprintf("the certificate for %q, valid until %s", leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.RFC3339))
}
