// Package bound ends a call to Redis by its context's deadline where the client would not: a
// go-redis client with ContextTimeoutEnabled false sets only its own read and write timeouts on
// the socket, and a call to a server that stopped answering lasts until they run out, whatever
// the deadline of the caller or of the limiter. redisstore and its batched mode promise both.
// Safe for concurrent use.
package bound

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// SocketFollowsContext reports whether c sets a context's deadline on its socket reads and writes
// (a go-redis client with ContextTimeoutEnabled), so that a call ends by that deadline without
// help. A client of another type (a wrapper) is taken not to: nothing can look inside it, and a
// wrapper of a client with ContextTimeoutEnabled false held a call for that client's socket
// timeouts, past the deadline the limiters promise. Its calls then run on goroutines of their own
// (Call), for a few allocations a call.
func SocketFollowsContext(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// Calls is one limiter's calls through a client: whether the client follows deadlines (see
// SocketFollowsContext), and the calls that Call left running past their callers, so that the
// limiter's Close can wait for them (Wait). Safe for concurrent use.
type Calls struct {
	follows bool
	mu      sync.Mutex
	idle    *sync.Cond // signalled when running falls to 0
	running int
	shut    bool // set by Wait: Call starts no goroutine after it
}

// New returns the Calls of a limiter using client c.
func New(c redis.UniversalClient) *Calls {
	cs := &Calls{follows: SocketFollowsContext(c)}
	cs.idle = sync.NewCond(&cs.mu)
	return cs
}

// Follows reports whether the client sets a context's deadline on its socket, so that a call
// needs no Call. A caller on a path taken per decision calls the client directly then: the
// closure it would hand Call, and whatever that reads, escape to the heap (Call may leave them to
// a goroutine), which cost a Take three allocations.
func (cs *Calls) Follows() bool { return cs.follows }

// Wait returns once no goroutine that Call started is running: at most the client's socket
// timeouts after the last such call began. A Close calls it, so that no goroutine of the limiter
// outlives it. Unlike a sync.WaitGroup's, it may run while calls start. Once Wait has begun, Call
// starts no goroutine: such a call (one whose caller passed the limiter's closed check just
// before Close) runs f on the caller's goroutine, bounded by the client's socket timeouts rather
// than by ctx's deadline.
func (cs *Calls) Wait() {
	cs.mu.Lock()
	cs.shut = true
	for cs.running > 0 {
		cs.idle.Wait()
	}
	cs.mu.Unlock()
}

// start counts a goroutine about to start, so that Wait waits for it; after Wait has begun it
// refuses, since Wait may have returned already.
func (cs *Calls) start() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.shut {
		return false
	}
	cs.running++
	return true
}

func (cs *Calls) done() {
	cs.mu.Lock()
	if cs.running--; cs.running == 0 {
		cs.idle.Broadcast()
	}
	cs.mu.Unlock()
}

// errPast is Call's error at the deadline: it wraps context.DeadlineExceeded, as a socket deadline
// set from ctx would fail, and says which deadline passed, since logs show it.
var errPast = fmt.Errorf("no reply by the call's deadline: %w", context.DeadlineExceeded)

// Call returns f(ctx). Where cs's client does not follow deadlines (see SocketFollowsContext) and
// ctx has a deadline, f runs on a goroutine of its own, and Call returns an error wrapping
// context.DeadlineExceeded once the deadline passes, without waiting for f: the client would end
// f only at its socket timeouts. f then goes on until those end it (the constructors refuse such
// a client whose timeouts are longer than the limiter's, which bounds how long it lingers and how
// many connections it holds; cs.Wait waits for it), and its result is dropped, so f must not
// write anything the caller reads once Call has returned. As with a client that follows the
// deadline, the command may still run on the server after Call returns.
//
// A ctx cancelled without its deadline passing does not end the wait, as it does not cut short a
// call through a client that follows deadlines: go-redis sets only deadlines on the socket.
func Call[T any](ctx context.Context, cs *Calls, f func(context.Context) (T, error)) (T, error) {
	dl, ok := ctx.Deadline()
	if cs.follows || !ok || !cs.start() {
		return f(ctx)
	}
	type result struct {
		v   T
		err error
	}
	// Buffered, so that f's goroutine ends even when nobody reads its result.
	done := make(chan result, 1)
	go func() {
		defer cs.done()
		v, err := f(ctx)
		done <- result{v, err}
	}()
	t := time.NewTimer(time.Until(dl))
	defer t.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-t.C:
		var zero T
		return zero, errPast
	}
}
