package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/policy"
)

// The listener refuses connections over the limit by closing them, and http.Server goes on
// serving: Accept never fails on their account.
func TestListenerWithHTTPServer(t *testing.T) {
	lim, clk := newEngine(t, 3, time.Minute, w0)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := 0
	ln := &httplimit.Listener{
		Listener: inner, Limiter: httplimit.Local(lim),
		OnRefused: func(net.Conn, engine.Decision) { refused++ }, // Accept runs on one goroutine
	}
	srv := &http.Server{Handler: ok}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		assert.ErrorIs(t, <-served, http.ErrServerClosed)
	})

	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	url := "http://" + inner.Addr().String()
	try := func() bool {
		res, err := c.Get(url)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return err == nil && res.StatusCode == 200 && string(b) == "ok"
	}
	var got []bool
	for range 5 {
		got = append(got, try())
	}
	assert.Equal(t, []bool{true, true, true, false, false}, got)

	clk.Advance(2 * time.Minute) // two windows later the address starts afresh
	assert.True(t, try(), "the server still serves after refusing connections")
	assert.Equal(t, 2, refused)
}

// A refused peer reads what OnRefused wrote, then end of file.
func TestListenerOnRefusedRawTCP(t *testing.T) {
	lim, _ := newEngine(t, 1, time.Minute, w0)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := &httplimit.Listener{
		Listener: inner, Limiter: httplimit.Local(lim),
		OnRefused: func(c net.Conn, d engine.Decision) { io.WriteString(c, "busy: "+d.Reason.String()+"\n") },
	}
	accepted := make(chan net.Conn)
	done := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				done <- err
				return
			}
			accepted <- c
		}
	}()

	first, err := net.Dial("tcp", inner.Addr().String())
	require.NoError(t, err)
	defer first.Close()
	srvSide := <-accepted
	srvSide.Close()

	second, err := net.Dial("tcp", inner.Addr().String())
	require.NoError(t, err)
	defer second.Close()
	b, err := io.ReadAll(second)
	require.NoError(t, err)
	assert.Equal(t, "busy: limited\n", string(b))

	require.NoError(t, ln.Close())
	assert.True(t, errors.Is(<-done, net.ErrClosed), "only the wrapped listener's errors come out of Accept")
}

func TestListenerErrorModes(t *testing.T) {
	down := errors.New("store down")
	for _, tc := range []struct {
		mode httplimit.ErrorMode
		d    engine.Decision
		want bool
	}{
		{httplimit.FailOpen, engine.Decision{}, true},
		{httplimit.FailClosed, engine.Decision{Allowed: true}, false},
		{httplimit.TrustDecision, engine.Decision{Allowed: false}, false},
		{httplimit.TrustDecision, engine.Decision{Allowed: true}, true},
	} {
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		var seen error
		var calls []string // OnError, then OnRefused for a refused connection, FailClosed's too
		var refusedWith engine.Decision
		ln := &httplimit.Listener{
			Listener: inner, Limiter: failing{tc.d, down}, ErrorMode: tc.mode,
			OnError: func(_ net.Conn, err error) { seen = err; calls = append(calls, "error") },
			OnRefused: func(_ net.Conn, d engine.Decision) {
				refusedWith = d
				calls = append(calls, "refused")
			},
		}
		got := make(chan bool, 1)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				c.Close()
			}
			got <- err == nil
		}()
		conn, err := net.Dial("tcp", inner.Addr().String())
		require.NoError(t, err)
		if !tc.want {
			// The refused connection is closed by Accept, which waits for the next: close the
			// listener to end it.
			_, rerr := conn.Read(make([]byte, 1))
			assert.ErrorIs(t, rerr, io.EOF)
		}
		conn.Close()
		if !tc.want {
			ln.Close()
		}
		assert.Equal(t, tc.want, <-got, "mode %v", tc.mode)
		assert.Equal(t, down, seen)
		if tc.want {
			assert.Equal(t, []string{"error"}, calls, "mode %v", tc.mode)
		} else {
			assert.Equal(t, []string{"error", "refused"}, calls, "mode %v", tc.mode)
			assert.False(t, refusedWith.Allowed, "mode %v: OnRefused is given a refusal", tc.mode)
		}
		ln.Close()
	}
}

func TestListenerKeys(t *testing.T) {
	lim, _ := newEngine(t, 5, time.Minute, w0)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	keys := make(chan string, 1)
	rec := recorder{httplimit.Local(lim), keys}
	ln := &httplimit.Listener{Listener: inner, Limiter: rec}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	conn, err := net.Dial("tcp", inner.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	assert.Equal(t, "ip:127.0.0.1", <-keys)
}

// recorder passes decisions through, sending each key on keys.
type recorder struct {
	httplimit.Limiter
	keys chan<- string
}

func (r recorder) Take(ctx context.Context, key string, n int64) (engine.Decision, error) {
	r.keys <- key
	return r.Limiter.Take(ctx, key, n)
}

func TestListenerValidate(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer inner.Close()
	ln := &httplimit.Listener{Listener: inner, Limiter: httplimit.Local(nil)}
	_, err = ln.Accept()
	assert.ErrorIs(t, err, httplimit.ErrNoLimiter)
	assert.ErrorContains(t, err, "Listener.Limiter is nil")
	// No listener to wrap: an error naming the field, not a nil dereference in Accept.
	lim, err := engine.New(policy.SlidingCounter{Limit: 1, Window: time.Second})
	require.NoError(t, err)
	defer lim.Close()
	ln = &httplimit.Listener{Limiter: httplimit.Local(lim)}
	require.EqualError(t, ln.Validate(), "httplimit: Listener.Listener is nil: set the net.Listener to wrap")
	_, err = ln.Accept()
	assert.EqualError(t, err, "httplimit: Listener.Listener is nil: set the net.Listener to wrap")
	// http.Server.Serve closes the listener and reads its address: neither may panic.
	require.NotPanics(t, func() {
		err = (&http.Server{Handler: http.NotFoundHandler()}).Serve(ln)
	})
	assert.EqualError(t, err, "httplimit: Listener.Listener is nil: set the net.Listener to wrap")
	assert.NotNil(t, ln.Addr())
	assert.NoError(t, ln.Close())
}

// Skip admits a connection without asking the Limiter (nothing counted), and Shadow keeps every
// connection while deciding and reporting them as usual: with a limit of 1, three connections
// from one peer are all accepted, and the Limiter counted only those not skipped.
func TestListenerSkipAndShadow(t *testing.T) {
	for _, c := range []struct {
		name           string
		skip, shadow   bool
		accepted, seen int // connections Accept returned; refusals OnRefused saw
		counted        int64
	}{
		{"enforcing", false, false, 1, 2, 1},
		{"skip", true, false, 3, 0, 0},
		{"shadow", false, true, 3, 2, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			lim, _ := newEngine(t, 1, time.Minute, w0)
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			var seen atomic.Int64
			ln := &httplimit.Listener{
				Listener: inner, Limiter: httplimit.Local(lim), Shadow: c.shadow,
				OnRefused: func(net.Conn, engine.Decision) { seen.Add(1) },
			}
			if c.skip {
				ln.Skip = func(net.Conn) bool { return true }
			}
			accepted := make(chan net.Conn, 3)
			go func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						close(accepted)
						return
					}
					accepted <- conn
				}
			}()
			for range 3 {
				conn, err := net.Dial("tcp", inner.Addr().String())
				require.NoError(t, err)
				defer conn.Close()
			}
			// Accept decides the three in turn: wait for all of them, accepted or refused.
			got := 0
			deadline := time.After(10 * time.Second)
			for got+int(seen.Load()) < 3 || got < c.accepted {
				select {
				case conn := <-accepted:
					conn.Close()
					got++
				case <-deadline:
					t.Fatalf("Accept returned %d connections and refused %d, want %d and %d", got, seen.Load(), c.accepted, c.seen)
				case <-time.After(time.Millisecond):
				}
			}
			require.NoError(t, ln.Close())
			for conn := range accepted { // none beyond those wanted
				conn.Close()
				got++
			}
			assert.Equal(t, c.accepted, got)
			assert.Equal(t, int64(c.seen), seen.Load())
			p := lim.Peek("ip:127.0.0.1")
			assert.Equal(t, 1-c.counted, p.Remaining, "units counted")
		})
	}
}
