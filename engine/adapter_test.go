package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

func TestAsLimiter(t *testing.T) {
	clk := clock.NewManual(1_000_000)
	l, err := engine.New(policy.SlidingCounter{Limit: 2, Window: time.Second}, engine.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	lim := l.AsLimiter()
	ctx := context.Background()
	for i, want := range []bool{true, true, false} {
		d, err := lim.Take(ctx, "k", 1)
		if err != nil || d.Allowed != want {
			t.Fatalf("take %d: %+v, %v; want allowed=%v", i, d, err, want)
		}
	}
	if d := l.Peek("k"); d.Remaining != 0 {
		t.Fatalf("the adapter and the engine disagree: engine sees %+v", d)
	}
	l.Close()
	d, err := lim.Take(ctx, "k", 1)
	if !errors.Is(err, slidelimit.ErrClosed) || d.Reason != slidelimit.ReasonClosed {
		t.Fatalf("after Close: %+v, %v", d, err)
	}
	var nilEngine *engine.Limiter
	if nilEngine.AsLimiter() != nil {
		t.Fatal("a nil engine gave a non-nil Limiter")
	}
}
