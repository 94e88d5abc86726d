package main

import (
	"testing"
	"time"
)

// The sliding model follows the policy's rule: a full previous window carries its whole count at
// a window's first millisecond, half of it (floored) halfway, nothing two windows on.
func TestSlidingModel(t *testing.T) {
	m := newModel("sliding", 10, 1000)
	if r := m.room(5_000); r != 10 {
		t.Fatalf("new key: room %d, want 10", r)
	}
	m.add(5_000, 7)
	if r := m.room(5_999); r != 3 {
		t.Fatalf("same window: room %d, want 3", r)
	}
	if r := m.room(6_000); r != 3 {
		t.Fatalf("next window's start: room %d, want 3 (7 carried whole)", r)
	}
	if r := m.room(6_500); r != 7 {
		t.Fatalf("halfway: room %d, want 7 (floor(7/2) = 3 carried)", r)
	}
	if r := m.room(7_000); r != 10 {
		t.Fatalf("two windows on: room %d, want 10", r)
	}
}

// The bucket model is gubernator's token bucket: the limit, renewed a duration after the hit that
// found it missing or expired.
func TestBucketModel(t *testing.T) {
	m := newModel("gubernator", 10, 1000)
	m.add(5_300, 4)
	if r := m.room(6_299); r != 6 {
		t.Fatalf("before expiry: room %d, want 6", r)
	}
	if r := m.room(6_300); r != 10 {
		t.Fatalf("at expiry: room %d, want 10", r)
	}
	m.add(6_300, 12) // over-admitted: replaying what really happened
	if r := m.room(6_301); r != 0 {
		t.Fatalf("after over-admission: room %d, want 0", r)
	}
}

// A short run of the in-process mode, which needs no server: its accounting must see the limit
// bind (some requests refused) and never find more admitted than requested.
func TestEngineRun(t *testing.T) {
	cfg := config{duration: 300 * time.Millisecond, keys: 2, limit: 30, window: time.Second, goroutines: 2}
	r, err := runMode(cfg, "engine")
	if err != nil {
		t.Fatal(err)
	}
	if r.decisions == 0 || r.admitted == 0 || r.admitted >= r.decisions {
		t.Fatalf("decisions %d, admitted %d: the limit did not bind", r.decisions, r.admitted)
	}
	// Split three ways, each process floors its own carried count: the fleet's estimate can exceed
	// the limit by up to two units at a time, never by whole shares.
	if r.over > 2*int64(cfg.keys)*3 {
		t.Fatalf("the engine with the limit split three ways over-admitted %d units against the fleet-wide count", r.over)
	}
	if r.exact < r.admitted-r.over {
		t.Fatalf("exact %d < admitted within the limit %d", r.exact, r.admitted-r.over)
	}
}
