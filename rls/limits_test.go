package rls_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
)

// h2conn is a bare HTTP/2 client connection, for what a gRPC client would refuse to send: a call
// whose headers pass the limit the server advertised.
type h2conn struct {
	t        *testing.T
	conn     net.Conn
	fr       *http2.Framer
	settings map[http2.SettingID]uint32
}

// dialH2 connects to addr, exchanges SETTINGS, and records the server's.
func dialH2(t *testing.T, addr string) *h2conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, failsafe)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(failsafe)))
	_, err = io.WriteString(conn, http2.ClientPreface)
	require.NoError(t, err)
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	require.NoError(t, fr.WriteSettings())
	c := &h2conn{t: t, conn: conn, fr: fr, settings: map[http2.SettingID]uint32{}}
	for {
		f, err := fr.ReadFrame()
		require.NoError(t, err)
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			require.NoError(t, s.ForeachSetting(func(s http2.Setting) error { c.settings[s.ID] = s.Val; return nil }))
			require.NoError(t, fr.WriteSettingsAck())
			return c
		}
	}
}

// call sends a unary gRPC call on stream id to path with an empty message and the extra header
// fields, in as many frames as the server's frame size needs.
func (c *h2conn) call(id uint32, path string, extra ...hpack.HeaderField) {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range append([]hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: path},
		{Name: ":authority", Value: "rls"}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	}, extra...) {
		require.NoError(c.t, enc.WriteField(f))
	}
	b := block.Bytes()
	const frame = 16 << 10 // HTTP/2's smallest SETTINGS_MAX_FRAME_SIZE, which every peer accepts
	first := b[:min(len(b), frame)]
	b = b[len(first):]
	require.NoError(c.t, c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(b) == 0}))
	for len(b) > 0 {
		n := min(len(b), frame)
		require.NoError(c.t, c.fr.WriteContinuation(id, n == len(b), b[:n]))
		b = b[n:]
	}
	require.NoError(c.t, c.fr.WriteData(id, true, []byte{0, 0, 0, 0, 0})) // an empty message
}

// outcome reads frames until stream id is reset (its code) or ends with a grpc-status (that).
func (c *h2conn) outcome(id uint32) string {
	for {
		f, err := c.fr.ReadFrame()
		require.NoError(c.t, err, "stream %d", id)
		if f.Header().StreamID != id {
			continue
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			return "reset: " + f.ErrCode.String()
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" && s != "200" {
				return ":status " + s
			}
			for _, h := range f.RegularFields() {
				if h.Name == "grpc-status" {
					return "grpc-status " + h.Value
				}
			}
		}
	}
}

const healthCheck = "/grpc.health.v1.Health/Check"

// Serve bounds what one connection can make the server hold: DefaultMaxStreams calls in progress,
// and DefaultMaxHeaderBytes of headers a call. A call past the header bound is reset, and the
// connection's next call is served. Options given to Serve set other bounds.
func TestServeBoundsStreamsAndHeaders(t *testing.T) {
	for _, c := range []struct {
		name             string
		opts             []grpc.ServerOption
		streams, headers uint32
	}{
		{"defaults", nil, rls.DefaultMaxStreams, rls.DefaultMaxHeaderBytes},
		{"options", []grpc.ServerOption{grpc.MaxConcurrentStreams(7), grpc.MaxHeaderListSize(8 << 10)}, 7, 8 << 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, err := rls.NewServer(loadGood(t))
			require.NoError(t, err)
			defer srv.Close()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ctx, lis, rls.Keepalive{}, time.Second, c.opts...) }()
			defer func() { cancel(); require.NoError(t, <-done) }()

			h := dialH2(t, lis.Addr().String())
			assert.Equal(t, c.streams, h.settings[http2.SettingMaxConcurrentStreams], "SETTINGS_MAX_CONCURRENT_STREAMS")
			assert.Equal(t, c.headers, h.settings[http2.SettingMaxHeaderListSize], "SETTINGS_MAX_HEADER_LIST_SIZE")

			// HTTP/2 counts a field as its name, its value and 32 bytes.
			pad := func(size uint32) hpack.HeaderField {
				return hpack.HeaderField{Name: "x-pad", Value: strings.Repeat("a", int(size))}
			}
			h.call(1, healthCheck, pad(c.headers))
			assert.Equal(t, "reset: "+http2.ErrCodeFrameSize.String(), h.outcome(1), "headers past the bound")
			h.call(3, healthCheck, pad(c.headers-1024))
			assert.Equal(t, "grpc-status 0", h.outcome(3), "the next call, within the bound, on the same connection")
			h.conn.Close() // or the shutdown waits its grace out for it
		})
	}
}
