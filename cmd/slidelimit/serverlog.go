package main

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"time"
)

// serverErrLog is the proxy's http.Server ErrorLog. net/http writes a line there for every
// connection whose TLS handshake fails, and anyone who can reach the port can open such
// connections: a load balancer's TCP health check or a port scan (which close before the
// handshake, "EOF"), a client without the certificate -tls-client-ca asks for, and at shutdown
// each idle connection not yet past its handshake ("use of closed network connection"). At
// ERROR, one a connection, that floods a log and its alerts. So a handshake that the peer
// abandoned, or that shutdown cut, is not logged; any other failed handshake is logged at WARN,
// at most one a second, with the count dropped since the previous line. The HTTP/2 server's lines
// about what a client sent on its connection (a bad preface, a protocol error) come one a
// connection too, once the handshake is past, or with -h2c on plain TCP, and go the same way.
// Every other line stays at ERROR.
func serverErrLog(logger *slog.Logger) *log.Logger {
	tls := &redisLogger{
		emit:     func(msg string, suppressed int) { logger.Warn(msg, "suppressed", suppressed) },
		interval: time.Second,
		now:      time.Now,
	}
	return log.New(serverErrWriter{logger: logger, tls: tls}, "", 0)
}

// proxyErrLog is the reverse proxy's ErrorLog: what it says beside its ErrorHandler, such as a
// response body it could not copy, at ERROR, except a copy that failed on a connection this
// process had closed ("use of closed network connection"): the transport closes its connection
// to the upstream when the client's request body fails (the client went away partway through
// it), and the response's copy then fails on it. Such a line is the client's doing, logged at
// DEBUG as its ErrorHandler logs the request's own end; at ERROR any client could write one at
// will.
func proxyErrLog(logger *slog.Logger) *log.Logger {
	return log.New(proxyErrWriter{logger}, "", 0)
}

type proxyErrWriter struct{ logger *slog.Logger }

// Write is called by log.Logger, which serialises its writes.
func (w proxyErrWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.Contains(msg, "use of closed network connection") {
		w.logger.Debug(msg)
	} else {
		w.logger.Error(msg)
	}
	return len(p), nil
}

type serverErrWriter struct {
	logger *slog.Logger
	tls    *redisLogger // the once-a-second throttle of what peers cause, with no password to hide
}

// Write is called by log.Logger, which serialises its writes.
func (w serverErrWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.HasPrefix(msg, "http2: server") || strings.HasPrefix(msg, "timeout waiting for SETTINGS frames from ") {
		// "http2: server: error reading preface from client ADDR: …", "http2: server connection
		// error from ADDR: …", and a client that sent the preface but no SETTINGS: the peer's
		// doing, and any peer can repeat it. ("http2: panic serving …" stays at ERROR.)
		w.tls.Printf(context.Background(), "%s", msg)
		return len(p), nil
	}
	if !strings.Contains(msg, "TLS handshake error") {
		w.logger.Error(msg)
		return len(p), nil
	}
	if strings.HasSuffix(msg, ": EOF") || strings.Contains(msg, "use of closed network connection") || strings.Contains(msg, "connection reset by peer") {
		return len(p), nil
	}
	w.tls.Printf(context.Background(), "%s", msg)
	return len(p), nil
}
