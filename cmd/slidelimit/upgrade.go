package main

import (
	"bufio"
	"net"
	"net/http"
)

// keepPipelined serves rp so that bytes a client sends right behind an Upgrade request, before
// the 101 comes back, reach the upstream. The server has already read them into the
// connection's buffer with the request; the reverse proxy hijacks the connection and copies from
// the bare net.Conn, so without this they were lost and the upgraded protocol started with a
// hole in it. Requests without an Upgrade header go to rp untouched.
func keepPipelined(rp http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			rp.ServeHTTP(w, r)
			return
		}
		rp.ServeHTTP(&upgradeWriter{ResponseWriter: w}, r)
	})
}

// upgradeWriter hands the reverse proxy a hijacked connection whose reads drain the server's
// buffer first.
type upgradeWriter struct {
	http.ResponseWriter
}

func (w *upgradeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil || brw.Reader.Buffered() == 0 {
		return conn, brw, err
	}
	return &bufferedConn{Conn: conn, r: brw.Reader}, brw, nil
}

// Unwrap lets http.ResponseController reach the connection's writer for Flush and deadlines.
func (w *upgradeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// bufferedConn reads what r holds before reading conn. One goroutine reads an upgraded
// connection (the proxy's copy to the upstream), so r needs no lock.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p) // copies from the buffer only: it never reads conn while bytes wait
		}
		c.r = nil
	}
	return c.Conn.Read(p)
}
