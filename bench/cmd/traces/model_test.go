package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/bench/internal/trace"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

// counterModel is a sliding window counter written from the contract alone (docs/policies.md
// ("Sliding window counter")), with a plain map and no packing, as the reference the engine's
// replay must match event for event.
type counterModel struct {
	limit, windowMs int64
	keys            map[uint64]*modelKey
}

type modelKey struct{ window, current, previous int64 }

func (m *counterModel) allow(key uint64, now int64) bool {
	start := now - now%m.windowMs
	k, ok := m.keys[key]
	if !ok {
		k = &modelKey{window: start}
		m.keys[key] = k
	}
	if start != k.window {
		if start == k.window+m.windowMs {
			k.previous = k.current
		} else {
			k.previous = 0
		}
		k.current, k.window = 0, start
	}
	carried := k.previous * (m.windowMs - (now - start)) / m.windowMs
	if carried+k.current+1 > m.limit {
		return false
	}
	k.current++
	return true
}

func TestSlidingCounterMatchesModel(t *testing.T) {
	p := policy.SlidingCounter{Limit: 100, Window: time.Second}
	for _, tr := range trace.All() {
		t.Run(tr.Name, func(t *testing.T) {
			model := &counterModel{limit: 100, windowMs: 1000, keys: map[uint64]*modelKey{}}
			want, err := trace.Replay(tr, func(t int64, key uint64) bool { return model.allow(key, t) },
				func() int { return len(model.keys) })
			if err != nil {
				t.Fatal(err)
			}

			// Event for event first, so that a divergence is reported where it happens.
			l, c, err := newLimiter(p, engine.WithEviction(false))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			check := &counterModel{limit: 100, windowMs: 1000, keys: map[uint64]*modelKey{}}
			for i, e := range tr.Events {
				c.Set(e.T)
				if got, exp := l.TakeKey(e.Key, 1).Allowed, check.allow(e.Key, e.T); got != exp {
					t.Fatalf("event %d (t=%d key=%d): engine allowed=%v, model %v", i, e.T, e.Key, got, exp)
				}
			}

			// Then the command's own path, metrics and all.
			got, err := replayMetrics(p, tr)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("engine metrics %+v, model %+v", got, want)
			}
		})
	}
}

// The model itself, on a step table worked by hand (limit 2, window 10 ms), so that agreement
// with the engine cannot come from a shared mistake in a trivially permissive model.
func TestCounterModelByHand(t *testing.T) {
	m := &counterModel{limit: 2, windowMs: 10, keys: map[uint64]*modelKey{}}
	for i, s := range []struct {
		t    int64
		key  uint64
		want bool
	}{
		{0, 1, true}, {1, 1, true}, {2, 1, false}, // window [0,10): 2 admitted, the third refused
		{3, 2, true},   // another key has its own count
		{10, 1, false}, // previous 2, carried floor(2*10/10) = 2: full
		{14, 1, true},  // carried floor(2*6/10) = 1, 1+0+1 = 2: a tie admits
		{15, 1, false}, // carried floor(2*5/10) = 1, 1+1+1 = 3
		{16, 1, true},  // carried floor(2*4/10) = 0 (0.8 exactly would refuse), 0+1+1 = 2
		{35, 1, true},  // window 30 is two after 10: both counts cleared
		{36, 2, true},  // key 2, last seen in window 0: cleared as well
		{40, 1, true},  // previous 1, carried floor(1*10/10) = 1, 1+0+1 = 2
		{41, 1, true},  // carried floor(1*9/10) = 0, 0+1+1 = 2
		{42, 1, false}, // 0+2+1 = 3
	} {
		if got := m.allow(s.key, s.t); got != s.want {
			t.Fatalf("step %d (t=%d key=%d): allow = %v, want %v", i, s.t, s.key, got, s.want)
		}
	}
}

// The whole command, end to end: its JSON for the sliding counter carries the model's figures.
func TestRunJSONMatchesModel(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"-json", "-perftime", "1ms"}, &out, &errs); code != 0 {
		t.Fatalf("exit status %d, stderr %q", code, errs.String())
	}
	var got benchJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v in\n%s", err, out.String())
	}
	if got.Policy != "rate-limiter/sliding-counter" {
		t.Fatalf("policy = %q", got.Policy)
	}
	byName := map[string]*traceJSON{
		trace.Steady: got.Traces.Steady, trace.Bursty: got.Traces.Bursty,
		trace.ManyKeys: got.Traces.ManyKeys, trace.Overload: got.Traces.Overload,
	}
	for _, tr := range trace.All() {
		model := &counterModel{limit: 100, windowMs: 1000, keys: map[uint64]*modelKey{}}
		want, err := trace.Replay(tr, func(t int64, key uint64) bool { return model.allow(key, t) },
			func() int { return len(model.keys) })
		if err != nil {
			t.Fatal(err)
		}
		g := byName[tr.Name]
		if g == nil {
			t.Fatalf("%s missing from\n%s", tr.Name, out.String())
		}
		m := g.Metrics
		if m.AcceptRate != want.AcceptRate || m.MaxBurst100ms != want.MaxBurst100ms || m.EntriesTracked != want.EntriesTracked {
			t.Errorf("%s: metrics %+v, model %+v", tr.Name, m, want)
		}
		if (m.JainFairness != nil) != want.HasJain || (m.JainFairness != nil && *m.JainFairness != want.JainFairness) {
			t.Errorf("%s: jainFairness %v, model %v (defined: %v)", tr.Name, m.JainFairness, want.JainFairness, want.HasJain)
		}
		if g.Perf.OpsPerSec <= 0 {
			t.Errorf("%s: opsPerSec %d", tr.Name, g.Perf.OpsPerSec)
		}
		if p := g.Slidelimit.PeakLiveKeys; p < 1 || p > want.EntriesTracked {
			t.Errorf("%s: peakLiveKeys %d outside [1, %d]", tr.Name, p, want.EntriesTracked)
		}
	}
}
