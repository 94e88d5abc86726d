package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"sync/atomic"
)

// clientBody is a request's body as the client sends it, remembering whether reading it failed.
// A client that goes away partway through its body reaches the reverse proxy's ErrorHandler as
// the transport's error in writing to the upstream ("unexpected EOF"), which reads like an
// upstream failure; this tells the two apart, so that such a request is logged 499, not 502 with
// an ERROR line any client could write at will.
type clientBody struct {
	io.ReadCloser
	// failed and malformed are set from the transport's goroutine that copies the body, and read
	// from the handler's.
	failed, malformed atomic.Bool
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	// ErrBodyReadAfterClose is the transport's own doing (it closes the body once the upstream
	// failed), not the client's.
	if err != nil && err != io.EOF && !errors.Is(err, http.ErrBodyReadAfterClose) {
		b.malformed.Store(isMalformed(err))
		b.failed.Store(true)
	}
	return n, err
}

// isMalformed reports whether err, from reading a client's body, says the body broke its own
// framing (a chunked encoding gone wrong, an HTTP/2 body that ends before its Content-Length),
// where the client may still be there to read a 400, rather than that the connection ended.
func isMalformed(err error) bool {
	msg := err.Error()
	// net/http exports none of its chunked reader's errors; a chunk line over 4 KB is its "header
	// line too long", a malformed trailer textproto's ProtocolError.
	var pe textproto.ProtocolError
	return strings.Contains(msg, "chunk") || strings.Contains(msg, "Content-Length") || strings.Contains(msg, "line too long") ||
		errors.As(err, &pe)
}

type clientBodyKey struct{}

// watchClientBody hands h each request with a body wrapped in a clientBody, found again through
// the request's context: the reverse proxy gives its ErrorHandler the outgoing request, whose
// body it has wrapped in turn, but whose context derives from the incoming one.
func watchClientBody(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			b := &clientBody{ReadCloser: r.Body}
			r = r.WithContext(context.WithValue(r.Context(), clientBodyKey{}, b))
			r.Body = b
		}
		h.ServeHTTP(w, r)
	})
}

// clientBodyFailed reports whether reading the body of r (or of the request r was made from)
// from the client failed, and whether because the body was malformed (see isMalformed).
func clientBodyFailed(r *http.Request) (failed, malformed bool) {
	b, ok := r.Context().Value(clientBodyKey{}).(*clientBody)
	if !ok {
		return false, false
	}
	return b.failed.Load(), b.malformed.Load()
}
