package bound

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestSocketFollowsContext(t *testing.T) {
	on := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer on.Close()
	off := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer off.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	if !SocketFollowsContext(on) || SocketFollowsContext(off) || SocketFollowsContext(cluster) {
		t.Fatalf("ContextTimeoutEnabled true: %v; false: %v; a cluster client with it false: %v",
			SocketFollowsContext(on), SocketFollowsContext(off), SocketFollowsContext(cluster))
	}
}

// TestCall: where the client does not follow the deadline, Call returns at it while f still
// runs; where it does, or where there is no deadline, Call is f.
func TestCall(t *testing.T) {
	release := make(chan struct{})
	finished := make(chan struct{})
	stuck := func(context.Context) (int, error) {
		defer close(finished)
		<-release
		return 1, nil
	}
	off := &Calls{}
	off.idle = sync.NewCond(&off.mu)
	on := &Calls{follows: true}
	on.idle = sync.NewCond(&on.mu)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	v, err := Call(ctx, off, stuck)
	if !errors.Is(err, context.DeadlineExceeded) || v != 0 {
		t.Fatalf("f past the deadline: %d, %v; want 0 and context.DeadlineExceeded", v, err)
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Fatalf("returned after %v, before the deadline", took)
	}
	// Wait waits for f's goroutine, which goes on past Call.
	waited := make(chan struct{})
	go func() {
		off.Wait()
		close(waited)
	}()
	select {
	case <-waited:
		t.Fatal("Wait returned while f was still running")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-finished // f's goroutine ends, its result dropped
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return once f had ended")
	}

	long, cancelLong := context.WithTimeout(context.Background(), time.Minute)
	defer cancelLong()
	quick := func(context.Context) (int, error) { return 2, errors.New("reply") }
	if v, err := Call(long, off, quick); v != 2 || err == nil || err.Error() != "reply" {
		t.Fatalf("f within the deadline: %d, %v; want its own result", v, err)
	}
	// A client that follows the deadline, or a ctx without one: f on the caller's goroutine,
	// waited for whatever the time.
	late := func(context.Context) (int, error) {
		time.Sleep(30 * time.Millisecond)
		return 3, nil
	}
	short, cancelShort := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancelShort()
	if v, err := Call(short, on, late); v != 3 || err != nil {
		t.Fatalf("follows: %d, %v; want f's result", v, err)
	}
	if v, err := Call(context.Background(), off, late); v != 3 || err != nil {
		t.Fatalf("no deadline: %d, %v; want f's result", v, err)
	}
}

// TestCallAfterWait: a Call that begins once Wait has (a call that passed its limiter's closed
// check before Close) starts no goroutine that could outlive the Close: it runs f on the caller's
// goroutine, so it returns f's own result even past its deadline, and Wait has nothing to wait for.
func TestCallAfterWait(t *testing.T) {
	cs := &Calls{}
	cs.idle = sync.NewCond(&cs.mu)
	cs.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	slow := func(context.Context) (int, error) {
		time.Sleep(30 * time.Millisecond)
		return 4, nil
	}
	if v, err := Call(ctx, cs, slow); v != 4 || err != nil {
		t.Fatalf("after Wait: %d, %v; want f's own result, run on the caller's goroutine", v, err)
	}
	if cs.running != 0 {
		t.Fatalf("%d goroutines counted after Wait", cs.running)
	}
}
