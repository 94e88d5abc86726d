package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/slidelimit/slidelimit/engine"
)

// Listener wraps a net.Listener so that each client address may open only as many connections as
// Limiter admits. A refused connection is closed by Accept itself, which then waits for the next
// one: Accept never returns an error on account of the limit, so http.Server (which backs off and
// logs on Accept errors) keeps serving everyone else at full speed.
//
// Connections are keyed by the peer's address ("ip:" and the address, IPv6 grouped by
// IPv6Prefix, /64 by default), the only address known before any byte is read; forwarding headers are not
// available at this level. Accept calls Limiter.Take on the accepting goroutine, so a Limiter that
// waits on the network (Redis) slows every accept; the in-process engine never waits.
//
// Set the fields before the first Accept and leave them alone afterwards. Accept may be called
// from several goroutines at once if the wrapped listener allows it; Close and Addr are the
// wrapped listener's (with none to wrap, Close does nothing and Addr is an empty TCP address, so
// that http.Server.Serve returns Validate's error rather than panicking as it closes).
type Listener struct {
	// Listener is the wrapped listener: Accept takes connections from it, and Close and Addr
	// are its own.
	net.Listener

	// Limiter decides each new connection, one unit per connection. Required.
	Limiter Limiter

	// IPv6Prefix groups IPv6 peers as ClientIP.IPv6Prefix does: 0 means one key per /64, 128
	// one per address.
	IPv6Prefix int

	// Key returns the key of a new connection. nil means the peer's IP address as described
	// above; a peer that is not an IP address (a Unix socket) is keyed "addr:" and its address.
	// An empty key is a key like any other: every connection keyed "" shares one allowance.
	Key func(c net.Conn) string

	// OnRefused is called with each refused connection before Accept closes it: it may write a
	// short message to the peer, but must not keep the connection. A connection refused because
	// the Limiter failed under FailClosed is passed too, after OnError, with the Decision that
	// came with the error and its Allowed set to false (its other fields, Reason included, are as
	// the Limiter returned them). Under Shadow it is called for each connection that would have
	// been refused, which Accept then returns (so it must write nothing to the peer there). It runs
	// on the goroutine that called Accept (on several at once if Accept is called from several),
	// which it holds up. nil means none.
	OnRefused func(c net.Conn, d engine.Decision)

	// OnError observes every error from the Limiter. The connection is then accepted (fail open)
	// unless ErrorMode is FailClosed, which refuses it, or TrustDecision, which follows the
	// Decision returned with the error. nil means none.
	OnError func(c net.Conn, err error)

	// ErrorMode is what happens to a connection when the Limiter fails (default FailOpen).
	ErrorMode ErrorMode

	// Skip, when it returns true for a new connection, admits it without asking the Limiter, so
	// that it is neither counted nor refused (a peer in an exempt range, say), as Middleware.Skip
	// does for requests. It runs on the goroutine that called Accept. nil means none.
	Skip func(c net.Conn) bool

	// Shadow makes the Listener decide and count every connection as usual, OnRefused included,
	// but keep each one it would have refused, as Middleware.Shadow does for requests: a way to
	// see what a limit would do before enforcing it.
	Shadow bool
}

// Validate reports a configuration Accept cannot serve: a nil *Listener, a nil Listener to wrap,
// a nil Limiter (ErrNoLimiter, as from Local(nil)) or an unknown ErrorMode. It only reads l, and may run
// concurrently with Accept, not with a change to l.
func (l *Listener) Validate() error {
	if l == nil {
		return errors.New("httplimit: the *Listener is nil")
	}
	if l.Listener == nil {
		return errors.New("httplimit: Listener.Listener is nil: set the net.Listener to wrap")
	}
	if l.Limiter == nil {
		return fmt.Errorf("%w: Listener.Limiter is nil (httplimit.Local(nil) is nil: check engine.New's error)", ErrNoLimiter)
	}
	if l.ErrorMode > FailLocal {
		return fmt.Errorf("httplimit: Listener.ErrorMode = %d: unknown mode", l.ErrorMode)
	}
	return nil
}

// Accept returns the next connection that the Limiter admits, closing refused ones. It returns
// the wrapped listener's own errors, and Validate's error without accepting anything when the
// configuration is refused (http.Server.Serve then returns it). It may be called from several
// goroutines at once if the wrapped listener allows it, as long as l's fields are not changed
// meanwhile.
func (l *Listener) Accept() (net.Conn, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.admit(c) {
			return c, nil
		}
		c.Close()
	}
}

// Close closes the wrapped listener, and does nothing when there is none. Safe for concurrent use
// as the wrapped listener's Close is.
func (l *Listener) Close() error {
	if l == nil || l.Listener == nil {
		return nil
	}
	return l.Listener.Close()
}

// Addr returns the wrapped listener's address, or an empty TCP address when there is none.
// Safe for concurrent use as the wrapped listener's Addr is.
func (l *Listener) Addr() net.Addr {
	if l == nil || l.Listener == nil {
		return &net.TCPAddr{}
	}
	return l.Listener.Addr()
}

func (l *Listener) admit(c net.Conn) bool {
	if l.Skip != nil && l.Skip(c) {
		return true
	}
	var key string
	if l.Key != nil {
		key = l.Key(c)
	} else {
		key = l.peerKey(c.RemoteAddr())
	}
	d, err := l.Limiter.Take(context.Background(), key, 1)
	if err != nil {
		if l.OnError != nil {
			l.OnError(c, err)
		}
		switch l.ErrorMode {
		case FailClosed:
			d.Allowed = false // refused here, whatever the Decision that came with the error said
		case TrustDecision:
		default:
			return true
		}
	}
	if !d.Allowed && l.OnRefused != nil {
		l.OnRefused(c, d)
	}
	return d.Allowed || l.Shadow
}

func (l *Listener) peerKey(a net.Addr) string {
	var ip netip.Addr
	switch a := a.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.UDPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		if a != nil {
			ip = parsePeer(a.String())
		}
	}
	if !ip.IsValid() {
		if a == nil {
			return "addr:"
		}
		return "addr:" + a.String()
	}
	c := ClientIP{IPv6Prefix: l.IPv6Prefix}
	return c.keyOf(canon(ip))
}
