package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/policy"
)

// faultHook injects the error inject returns (nil: pass the command through to a real server):
// replies a real server gives only in states these tests cannot switch many times a second.
type faultHook struct{ inject func(cmd redis.Cmder) error }

func (h faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.inject(cmd); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (h faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func faultClient(t *testing.T, inject func(redis.Cmder) error) *redis.Client {
	t.Helper()
	srv := startServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true, ContextTimeoutEnabled: true})
	c.AddHook(faultHook{inject: inject})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func captureLog(t *testing.T) *syncBuffer {
	logged := new(syncBuffer)
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logged, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return logged
}

const readOnlyReply = scriptReply("READONLY You can't write against a read only replica.")

// The opening log line must be written exactly once per opening, with many callers failing at
// once and across several open/close cycles.
func TestOpeningLoggedOncePerOpening(t *testing.T) {
	logged := captureLog(t)
	var failing atomic.Bool
	c := faultClient(t, func(redis.Cmder) error {
		if failing.Load() {
			return readOnlyReply
		}
		return nil
	})
	l, err := New(c, "cause", policy.SlidingCounter{Limit: 1 << 30, Window: time.Minute},
		WithBreakerRatio(BreakerRatio{Cooldown: 20 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	const cycles = 5
	for cycle := range cycles {
		failing.Store(true)
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					_, _ = l.Take(ctx, "k", 1)
				}
			}()
		}
		wg.Wait()
		if !statsOf(l).BreakerOpen {
			t.Fatalf("cycle %d: breaker not open", cycle)
		}
		failing.Store(false)
		deadline := time.Now().Add(5 * time.Second)
		for statsOf(l).BreakerOpen && time.Now().Before(deadline) {
			_, _ = l.Take(ctx, "k", 1)
			time.Sleep(time.Millisecond)
		}
	}
	n := strings.Count(logged.String(), "circuit breaker opened")
	if opens := statsOf(l).BreakerOpens; int64(n) != opens || opens != cycles {
		t.Errorf("%d opening log lines for %d openings (%d cycles)", n, opens, cycles)
	}
}

// While the breaker is open each call's error names the last failure: after an ErrMisconfigured
// opening (WRONGPASS) whose cause is fixed, a probe that meets a read-only replica reopens it, and
// the refused calls must name READONLY, not the WRONGPASS no probe meets any more.
func TestOpenErrorNamesTheLastFailureNotAStaleFatal(t *testing.T) {
	captureLog(t)
	var reply atomic.Value
	reply.Store(scriptReply("WRONGPASS invalid username-password pair or user is disabled."))
	c := faultClient(t, func(cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			return reply.Load().(scriptReply)
		}
		return nil
	})
	l, err := New(c, "cause", policy.SlidingCounter{Limit: 5, Window: time.Minute},
		WithBreakerRatio(BreakerRatio{Cooldown: 10 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	_, err = l.Take(ctx, "k", 1)
	if !errors.Is(err, ErrMisconfigured) {
		t.Fatalf("first call: %v, want ErrMisconfigured", err)
	}
	reply.Store(readOnlyReply) // password fixed; the server is now a replica
	time.Sleep(30 * time.Millisecond)
	_, err = l.Take(ctx, "k", 1) // the probe: READONLY
	if !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("probe: %v", err)
	}
	_, err = l.Take(ctx, "k", 1) // refused by the open breaker
	if !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("after the failed probe: %v, want ErrCircuitOpen", err)
	}
	if !strings.Contains(err.Error(), "READONLY") || errors.Is(err, ErrMisconfigured) {
		t.Errorf("open breaker's error after a READONLY probe: %v\nwant READONLY named (the last failure), not the WRONGPASS a probe no longer meets", err)
	}
}

// A success that lands between a failure's record of its cause and the compare-and-swap that
// opens the breaker sees the breaker still closed and clears the cause: the breaker then stayed
// open for its whole cooldown saying only "circuit breaker open" (a few openings in 2,000).
func TestOpenErrorKeepsItsCauseAgainstAConcurrentSuccess(t *testing.T) {
	captureLog(t)
	var n atomic.Int64
	c := faultClient(t, func(cmd redis.Cmder) error {
		if cmd.Name() != "evalsha" && cmd.Name() != "eval" {
			return nil
		}
		if n.Add(1)%2 == 0 {
			return readOnlyReply
		}
		return nil
	})
	bare := 0
	for trial := range 2000 {
		l, err := New(c, "cause", policy.SlidingCounter{Limit: 1 << 30, Window: time.Minute},
			WithBreakerRatio(BreakerRatio{Cooldown: time.Hour}))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !statsOf(l).BreakerOpen {
					_, _ = l.Take(context.Background(), "k", 1)
				}
			}()
		}
		wg.Wait()
		_, err = l.Take(context.Background(), "k", 1)
		if errors.Is(err, ErrCircuitOpen) && !strings.Contains(err.Error(), "after:") {
			bare++
			t.Logf("trial %d: %v", trial, err)
		}
		l.Close()
	}
	if bare > 0 {
		t.Errorf("%d of 2000 openings left the breaker's error without its cause", bare)
	}
}
