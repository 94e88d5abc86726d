package rls_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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

// headers starts a gRPC call on stream id to path, with the extra header fields, in as many frames
// as the server's frame size needs.
func (c *h2conn) headers(id uint32, path string, extra ...hpack.HeaderField) {
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
}

// call sends a unary gRPC call on stream id to path with an empty message and the extra header
// fields.
func (c *h2conn) call(id uint32, path string, extra ...hpack.HeaderField) {
	c.headers(id, path, extra...)
	require.NoError(c.t, c.fr.WriteData(id, true, []byte{0, 0, 0, 0, 0})) // an empty message
}

// connectionEnd reads frames until the connection ends ("connection closed", a GOAWAY or the
// socket's end) or stream id is reset or answered (its outcome, as outcome says).
func (c *h2conn) connectionEnd(id uint32) string {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return "connection closed"
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			return "connection closed"
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "reset: " + f.ErrCode.String()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id && f.StreamEnded() {
				return "answered"
			}
		}
	}
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
			addr, cancel, done := serveGood(t, time.Second, c.opts...)
			defer func() { cancel(); require.NoError(t, <-done) }()

			h := dialH2(t, addr)
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
			// One field longer than the bound on its own is past what HTTP/2's decoder will hold:
			// a connection error, not a stream's (docs/rls.md, -max-header-bytes).
			h.call(5, healthCheck, hpack.HeaderField{Name: "x-pad", Value: strings.Repeat("a", int(c.headers)+1)})
			assert.Equal(t, "connection closed", h.connectionEnd(5), "one field longer than the bound")
			h.conn.Close() // or the shutdown waits its grace out for it
		})
	}
}

// open starts a call on stream id to path and sends nothing more: its handler waits for the
// request message, so the call stays in flight. It returns once the server has read the call's
// headers (it answers a ping sent after them, and reads a connection's frames in order).
func (c *h2conn) open(id uint32, path string) {
	c.headers(id, path)
	require.NoError(c.t, c.fr.WritePing(false, [8]byte{byte(id)}))
	for {
		f, err := c.fr.ReadFrame()
		require.NoError(c.t, err)
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			return
		}
	}
}

// StopServing cuts off a Serve's calls at once: one serving (its ctx live) and one in its graceful
// stop, whose grace would otherwise hold it for a minute. Each returns nil, and a Serve begun
// afterwards serves.
func TestStopServing(t *testing.T) {
	srv, err := rls.NewServer(loadGood(t))
	require.NoError(t, err)
	defer srv.Close()
	start := func(ctx context.Context) (*h2conn, chan error) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, lis, rls.Keepalive{}, time.Minute) }()
		h := dialH2(t, lis.Addr().String())
		h.open(1, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
		return h, done
	}
	serving, servingDone := start(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	draining, drainingDone := start(ctx)
	cancel()
	select {
	case err := <-drainingDone:
		t.Fatalf("Serve returned %v with a call in flight, within its grace", err)
	case <-time.After(200 * time.Millisecond):
	}

	srv.StopServing()
	for name, done := range map[string]chan error{"serving": servingDone, "draining": drainingDone} {
		select {
		case err := <-done:
			require.NoError(t, err, name)
		case <-time.After(failsafe):
			t.Fatalf("the %s Serve did not return after StopServing", name)
		}
	}
	for _, h := range []*h2conn{serving, draining} {
		// The connection ends (EOF, or a reset) once its call is cut off, not at dialH2's deadline.
		_, err := io.Copy(io.Discard, h.conn)
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "the connection outlived StopServing: %v", err)
	}

	again, againDone := start(context.Background())
	again.call(3, healthCheck)
	require.Equal(t, "grpc-status 0", again.outcome(3), "a Serve begun after StopServing")
	srv.StopServing()
	require.NoError(t, <-againDone)
}

// stuck is a Limiter whose Take blocks until release is closed, whatever its ctx says, as a call
// blocked in a store that ignores cancellation would.
type stuck struct {
	entered chan struct{}
	release chan struct{}
}

func (s stuck) Take(context.Context, string, int64) (slidelimit.Decision, error) {
	s.entered <- struct{}{}
	<-s.release
	return slidelimit.Decision{Allowed: true, Limit: 100, Remaining: 99}, nil
}

// A Serve that StopServing cuts off, its ctx live, returns only once the handler of the call it
// cut has returned, as it does after a graceful stop; so does StopServing.
func TestStopServingWaitsForHandlers(t *testing.T) {
	lim := stuck{entered: make(chan struct{}, 1), release: make(chan struct{})}
	srv := serverOn(t, oneLimit, lim)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), lis, rls.Keepalive{}, time.Minute) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	go func() {
		_, _ = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "v")}})
	}()
	select {
	case <-lim.entered:
	case <-time.After(failsafe):
		t.Fatal("the call never reached the limiter")
	}
	stopped := make(chan struct{})
	go func() { srv.StopServing(); close(stopped) }()
	select {
	case err := <-done:
		t.Fatalf("Serve returned %v while the call's handler was still running", err)
	case <-stopped:
		t.Fatal("StopServing returned while the call's handler was still running")
	case <-time.After(200 * time.Millisecond):
	}
	close(lim.release)
	for name, c := range map[string]<-chan struct{}{"Serve": waitErr(t, done), "StopServing": stopped} {
		select {
		case <-c:
		case <-time.After(failsafe):
			t.Fatalf("%s did not return once the handler had", name)
		}
	}
}

// waitErr is closed once done yields nil, failing t if it yields an error.
func waitErr(t *testing.T, done <-chan error) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		if err := <-done; err != nil {
			t.Error(err)
		}
		close(c)
	}()
	return c
}
