package main

import (
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/bench/internal/trace"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

// result is what the command reports for one policy on one trace.
type result struct {
	trace trace.Metrics // eviction off: entriesTracked counts every key ever seen
	// peakLive is the most keys tracked at once with eviction on (see peakLiveKeys).
	peakLive int
	// opsPerSec is decisions per second through the engine; 0 when not measured.
	opsPerSec float64
}

// newLimiter builds a limiter for p on a manual clock. A policy the engine cannot build yet comes
// back as an error naming it, and so does a panic from a constructor still being written, so that
// -policy all reports every policy instead of dying on the first.
func newLimiter(p policy.Policy, opts ...engine.Option) (l *engine.Limiter, c *clock.Clock, err error) {
	defer func() {
		if r := recover(); r != nil {
			l, err = nil, fmt.Errorf("policy %s: the engine does not support it yet (engine.New panicked: %v)", p.ID(), r)
		}
	}()
	c = clock.NewManual(0)
	l, err = engine.New(p, append([]engine.Option{engine.WithClock(c)}, opts...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("policy %s: %w", p.ID(), err)
	}
	return l, c, nil
}

// replayMetrics replays tr through a fresh limiter with eviction off, so that Len counts every key
// ever seen, as the registry's stateSize does.
func replayMetrics(p policy.Policy, tr trace.Trace) (trace.Metrics, error) {
	l, c, err := newLimiter(p, engine.WithEviction(false))
	if err != nil {
		return trace.Metrics{}, err
	}
	defer l.Close()
	return trace.Replay(tr, func(t int64, key uint64) bool {
		c.Set(t)
		return l.TakeKey(key, 1).Allowed
	}, l.Len)
}

// peakLiveKeys replays tr with eviction on and returns the most keys tracked at once, sampling Len
// after every event.
//
// The figure depends on timing, not only on the trace: the engine evicts from a background
// sweeper that ticks on the wall clock (every 100ms by default), while the replay runs the trace's
// simulated minutes in milliseconds, so how many sweeps fall inside the replay varies from run to
// run. The engine exposes no way to step its sweeper from outside, and no request-driven sweep
// fires at these window sizes (a shard sweeps itself only when its horizon, millions of windows,
// has passed), so this is the only measurement of eviction the public API allows.
func peakLiveKeys(p policy.Policy, tr trace.Trace) (int, error) {
	l, c, err := newLimiter(p, engine.WithEviction(true))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	peak := 0
	for _, e := range tr.Events {
		c.Set(e.T)
		l.TakeKey(e.Key, 1)
		peak = max(peak, l.Len())
	}
	return peak, nil
}

// throughput replays tr through fresh limiters (eviction off, as in replayMetrics) until at least
// minTime has been spent deciding, and returns decisions per second. Only the replay loop is
// timed: building a limiter is not a decision.
func throughput(p policy.Policy, tr trace.Trace, minTime time.Duration) (float64, error) {
	if len(tr.Events) == 0 {
		return 0, nil
	}
	var spent time.Duration
	decisions := 0
	for spent < minTime || decisions == 0 {
		l, c, err := newLimiter(p, engine.WithEviction(false))
		if err != nil {
			return 0, err
		}
		start := time.Now()
		for _, e := range tr.Events {
			c.Set(e.T)
			l.TakeKey(e.Key, 1)
		}
		spent += time.Since(start)
		decisions += len(tr.Events)
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("policy %s: Close: %w", p.ID(), err)
		}
	}
	return float64(decisions) / spent.Seconds(), nil
}

// measure computes every figure for p over the four traces; with minTime 0 it skips throughput.
func measure(p policy.Policy, traces []trace.Trace, minTime time.Duration) ([]result, error) {
	out := make([]result, 0, len(traces))
	for _, tr := range traces {
		m, err := replayMetrics(p, tr)
		if err != nil {
			return nil, err
		}
		r := result{trace: m}
		if r.peakLive, err = peakLiveKeys(p, tr); err != nil {
			return nil, err
		}
		if minTime > 0 {
			if r.opsPerSec, err = throughput(p, tr, minTime); err != nil {
				return nil, err
			}
		}
		out = append(out, r)
	}
	return out, nil
}
