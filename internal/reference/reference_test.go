package reference

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// op is one call in a hand-worked script; want is the expected result (1/0 for allow).
type op struct {
	call      string // "allow", "retryAfter", "stateSize" or a probe name
	key, cost int64  // cost only for allow
	now       int64
	want      int64
}

func allowOp(key, cost, now int64, ok bool) op {
	w := int64(0)
	if ok {
		w = 1
	}
	return op{call: "allow", key: key, cost: cost, now: now, want: w}
}
func retryOp(key, now, want int64) op { return op{call: "retryAfter", key: key, now: now, want: want} }
func probeOp(call string, key, now, want int64) op {
	return op{call: call, key: key, now: now, want: want}
}
func sizeOp(want int64) op { return op{call: "stateSize", want: want} }

func runScript(t *testing.T, id string, params map[string]int64, script []op) {
	t.Helper()
	m, err := New(id, params)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range script {
		var got int64
		switch o.call {
		case "allow":
			if m.Allow(o.key, o.cost, o.now) {
				got = 1
			}
		case "retryAfter":
			got = m.RetryAfter(o.key, o.now)
		case "stateSize":
			got = int64(m.StateSize())
		default:
			got, err = m.Probe(o.call, o.key, o.now)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		if got != o.want {
			t.Fatalf("step %d: %s(key=%d cost=%d now=%d) = %d, want %d", i, o.call, o.key, o.cost, o.now, got, o.want)
		}
	}
}

const (
	maxL = 1<<32 - 1
	maxW = 1 << 32
)

func TestSlidingCounter(t *testing.T) {
	p := func(l, w int64) map[string]int64 { return map[string]int64{"limit": l, "windowMs": w} }
	cases := []struct {
		name   string
		params map[string]int64
		script []op
	}{
		{"floor admits what an exact estimate refuses", p(5, 1000), []op{
			allowOp(1, 5, 0, true),              // window 0: 0+0+5 <= 5
			allowOp(1, 1, 1000, false),          // window 1000, elapsed 0: carried = 5*1000/1000 = 5; 5+0+1 > 5
			allowOp(1, 1, 1001, true),           // elapsed 1: carried = floor(5*999/1000) = floor(4.995) = 4; 4+0+1 <= 5
			probeOp(CallEstimateOf, 1, 1001, 5), // 4 + current 1
			allowOp(1, 1, 1001, false),          // 4+1+1 > 5
			probeOp(CallEstimateOf, 1, 1500, 3), // floor(5*500/1000) = 2, + 1
			probeOp(CallEstimateOf, 1, 2000, 1), // window 2000: previous = 1, carried = 1*1000/1000 = 1, current 0
			probeOp(CallEstimateOf, 1, 4000, 0), // window 4000 is two windows past 2000: both cleared
		}},
		{"retry-after at the window edge plus 1 ms", p(5, 1000), []op{
			allowOp(1, 5, 0, true),
			retryOp(1, 0, 1001),        // need = 5-5-1 < 0: 0 + 1000 - 0 + 1
			retryOp(1, 400, 601),       // 0 + 1000 - 400 + 1
			allowOp(1, 1, 1000, false), // carried 5*1000/1000 = 5
			retryOp(1, 1000, 1),        // need = 5-0-1 = 4, excess = 5-4-1 = 0, target = 0+1, wait 1-0
			allowOp(1, 1, 1001, true),  // carried floor(4.995) = 4
		}},
		{"retry-after solved inside the window", p(3, 1000), []op{
			allowOp(1, 3, 0, true),     // window 0 current 3
			allowOp(1, 1, 1100, true),  // carried = floor(3*900/1000) = floor(2.7) = 2; 2+0+1 <= 3
			retryOp(1, 1100, 234),      // need = 3-1-1 = 1, excess = 3-1-1 = 1, target = floor(1000/3)+1 = 334, 334-100
			allowOp(1, 1, 1333, false), // elapsed 333: floor(3*667/1000) = floor(2.001) = 2; 2+1+1 > 3
			allowOp(1, 1, 1334, true),  // elapsed 334: floor(3*666/1000) = floor(1.998) = 1; 1+1+1 <= 3
		}},
		{"ties admit, cost 0 admits, a cost above the limit is refused but tracked", p(4, 100), []op{
			allowOp(1, 3, 10, true),
			allowOp(1, 1, 10, true),  // 3+1 = 4 <= 4
			allowOp(1, 1, 10, false), // 4+1 > 4
			allowOp(1, 0, 10, true),  // cost 0: 4+0 <= 4
			allowOp(2, 5, 10, false), // 5 > 4
			sizeOp(2),
			probeOp(CallEstimateOf, 2, 10, 0),
			allowOp(3, 0, 10, true), // cost 0 creates the key
			sizeOp(3),
			retryOp(4, 10, 0), // unknown key: 0, not created
			probeOp(CallEstimateOf, 5, 10, 0),
			sizeOp(3),
		}},
		{"a gap of two windows clears previous", p(5, 1000), []op{
			allowOp(1, 5, 999, true),
			allowOp(1, 5, 2000, true), // window 2000 != 0+1000: previous = 0 (shifting would refuse)
			allowOp(2, 5, 999, true),
			allowOp(2, 1, 1000, false), // the adjacent window does carry: 5*1000/1000 = 5
			allowOp(2, 5, 1999, true),  // elapsed 999: carried = floor(5*1/1000) = 0; 0+0+5 <= 5
		}},
		{"extremes: limit 2^32-1, window 2^32 ms", p(maxL, maxW), []op{
			allowOp(1, maxL, maxW-1, true), // window 0
			// elapsed 1 in window 2^32: floor((2^32-1)(2^32-1)/2^32) = floor(2^32 - 2 + 2^-32) = 2^32-2
			probeOp(CallEstimateOf, 1, maxW+1, maxL-1),
			allowOp(1, 1, maxW+1, true),
			allowOp(1, 1, maxW+1, false),
			// need = L-1-1, excess = L-(L-2)-1 = 1, target = floor(2^32/(2^32-1))+1 = 2, wait 2-1
			retryOp(1, maxW+1, 1),
			// elapsed 2: floor((2^32-1)(2^32-2)/2^32) = floor(2^32 - 3 + 2^-31) = L-2; L-2+1+1 <= L
			allowOp(1, 1, maxW+2, true),
		}},
		{"window of 1 ms", p(2, 1), []op{
			allowOp(1, 2, 7, true),
			retryOp(1, 7, 2),        // need < 0: 7 + 1 - 7 + 1
			allowOp(1, 1, 8, false), // window 8, elapsed 0: carried 2*1/1 = 2
			allowOp(1, 2, 9, true),  // window 9 is two past 7: cleared
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runScript(t, SlidingCounter, c.params, c.script) })
	}
}

func TestSlidingLog(t *testing.T) {
	p := map[string]int64{"limit": 3, "windowMs": 1000}
	runScript(t, SlidingLog, p, []op{
		allowOp(1, 1, 0, true),
		allowOp(1, 1, 100, true),
		allowOp(1, 1, 200, true),
		allowOp(1, 1, 500, false),
		retryOp(1, 500, 500),      // oldest 0 + 1000 - 500, no extra ms
		allowOp(1, 1, 999, false), // 0 > 999-1000: still inside (now-W, now]
		allowOp(1, 1, 1000, true), // 0 <= 1000-1000: expired, count 2
		probeOp(CallCountOf, 1, 1000, 3),
		retryOp(1, 1000, 100),            // oldest is now 100: 100 + 1000 - 1000
		probeOp(CallCountOf, 1, 1150, 2), // 100 expired
		allowOp(1, 0, 1150, true),        // cost 0 stores nothing
		probeOp(CallCountOf, 1, 1150, 2),
		allowOp(2, 4, 0, false), // 4 > 3, key still tracked
		sizeOp(2),
	})
	runScript(t, SlidingLog, p, []op{
		allowOp(1, 2, 0, true), // two copies of 0
		allowOp(1, 2, 1, false),
		allowOp(1, 1, 1, true),
		retryOp(1, 1, 999),        // 0 + 1000 - 1
		allowOp(1, 2, 1000, true), // both copies of 0 leave together
		probeOp(CallCountOf, 1, 1000, 3),
	})
}

func TestFixedWindow(t *testing.T) {
	runScript(t, FixedWindow, map[string]int64{"limit": 2, "windowMs": 1000}, []op{
		allowOp(1, 1, 10, true),
		allowOp(1, 1, 20, true),
		allowOp(1, 1, 30, false),
		retryOp(1, 30, 970), // 0 + 1000 - 30, no extra ms
		probeOp(CallCountOf, 1, 999, 2),
		probeOp(CallCountOf, 1, 1000, 0), // another window: 0, and nothing is rolled
		retryOp(1, 1000, 0),
		probeOp(CallCountOf, 1, 999, 2), // read-only: the window-0 count is still there
		allowOp(1, 2, 1000, true),       // now the window rolls
		probeOp(CallCountOf, 1, 1000, 2),
		allowOp(2, 3, 5, false),
		sizeOp(2),
		retryOp(3, 5, 0),
		sizeOp(2),
	})
}

func TestTokenBucket(t *testing.T) {
	// rate 10/s, burst 5: fillMs = ceilDiv(5000, 10) = 500.
	runScript(t, TokenBucket, map[string]int64{"ratePerSec": 10, "burst": 5}, []op{
		probeOp(CallTokensOf, 1, 0, 5), // unknown: burst
		allowOp(1, 5, 0, true),         // new key full: 5 >= 5
		allowOp(1, 1, 0, false),
		retryOp(1, 0, 100),       // ceilDiv(1000 - 0, 10)
		allowOp(1, 1, 99, false), // credit 10*99 = 990: 0 tokens
		retryOp(1, 99, 1),        // ceilDiv(1000 - 990, 10)
		allowOp(1, 1, 100, true), // credit 990 + 10 = 1000: 1 token, credit 0
		probeOp(CallTokensOf, 1, 100, 0),
		probeOp(CallTokensOf, 1, 10_000, 5), // dt clamped to 500: credit 5000, 5 tokens, saturated
		allowOp(2, 6, 0, false),             // 6 > burst 5, still tracked
		sizeOp(2),
	})
	// rate 3/s, burst 2: fillMs = ceilDiv(2000, 3) = 667.
	runScript(t, TokenBucket, map[string]int64{"ratePerSec": 3, "burst": 2}, []op{
		allowOp(1, 2, 0, true),
		retryOp(1, 0, 334),               // ceilDiv(1000, 3)
		probeOp(CallTokensOf, 1, 333, 0), // credit 999
		probeOp(CallTokensOf, 1, 334, 1), // credit 999 + 3 = 1002: 1 token, credit 2
		retryOp(1, 334, 0),
		allowOp(1, 1, 334, true),
		retryOp(1, 334, 333), // ceilDiv(1000 - 2, 3) = ceil(332.67)
	})
}

func TestGCRA(t *testing.T) {
	// rate 10/s, burst 5: tolerance = 4000 units; 1 ms = 10 units.
	runScript(t, GCRA, map[string]int64{"ratePerSec": 10, "burst": 5}, []op{
		allowOp(1, 6, 0, false), // 6 > burst: refused before any lookup
		sizeOp(0),
		retryOp(1, 0, 0),
		probeOp(CallTokensOf, 1, 0, 5),
		allowOp(1, 5, 0, true),           // s = 0 >= 0 - 4000 + 4000: tat = 5000
		allowOp(1, 1, 0, false),          // 0 < 5000 - 4000 + 0
		retryOp(1, 0, 100),               // target 1000: ceilDiv(1000, 10) - 0
		probeOp(CallTokensOf, 1, 0, 0),   // avail = 0 - (5000 - 5000) = 0
		probeOp(CallTokensOf, 1, 250, 2), // avail = 2500 - 0: 2
		allowOp(1, 1, 100, true),         // s = 1000 >= 1000: tat = 5000 + 1000
		probeOp(CallTokensOf, 1, 100, 0), // avail = 1000 - (6000 - 5000) = 0
		sizeOp(1),
	})
	// rate 2^32-1 at now = 2^40: s = 2^40*(2^32-1) is far above 2^63.
	const now = 1 << 40
	runScript(t, GCRA, map[string]int64{"ratePerSec": maxL, "burst": 2}, []op{
		allowOp(1, 2, now, true),         // tat = s + 2000
		allowOp(1, 1, now, false),        // s < s + 2000 - 1000
		retryOp(1, now, 1),               // ceilDiv(s + 1000, rate) - now = ceilDiv(1000, rate) = 1
		probeOp(CallTokensOf, 1, now, 0), // avail = s - (s + 2000 - 2000) = 0
		allowOp(1, 1, now+1, true),       // s + rate >= s + 1000
	})
}

func TestLeakyBucket(t *testing.T) {
	// rate 10/s, capacity 3: drainMs = ceilDiv(3000, 10) = 300.
	runScript(t, LeakyBucket, map[string]int64{"ratePerSec": 10, "capacity": 3}, []op{
		probeOp(CallLevelOf, 1, 0, 0),
		allowOp(1, 3, 0, true),
		allowOp(1, 1, 50, false), // credit 500: drained 0, level 3
		retryOp(1, 50, 50),       // ceilDiv(1000 - 500, 10)
		allowOp(1, 1, 100, true), // credit 1000: drained 1, level 2, then 3
		probeOp(CallLevelOf, 1, 100, 3),
		probeOp(CallLevelOf, 1, 10_000, 0), // dt clamped to 300: drained 3 >= 3
		allowOp(2, 4, 0, false),            // 4 > capacity, still tracked
		sizeOp(2),
		probeOp(CallLevelOf, 2, 0, 0),
	})
}

func TestDualBucket(t *testing.T) {
	runScript(t, DualBucket, map[string]int64{"requestsPerMin": 2, "tokensPerMin": 100}, []op{
		probeOp(CallRequestsOf, 1, 0, 2),
		probeOp(CallTokensOf, 1, 0, 100),
		allowOp(1, 60, 0, true),  // requests 1, tokens 40
		allowOp(1, 50, 0, false), // 40 < 50
		allowOp(1, 0, 0, true),   // cost 0 still spends a request: requests 0
		allowOp(1, 0, 0, false),  // no request left
		retryOp(1, 0, 30_000),    // max(ceilDiv(60000, 2), 0)
		// dt 30000: requests credit 2*30000 = 60000 -> 1; tokens credit 100*30000 = 3,000,000 -> +50
		probeOp(CallRequestsOf, 1, 30_000, 1),
		probeOp(CallTokensOf, 1, 30_000, 90),
		allowOp(1, 90, 30_000, true),
		retryOp(1, 30_000, 30_000), // requests: ceilDiv(60000, 2); tokens: ceilDiv(60000, 100) = 600
		probeOp(CallTokensOf, 1, 30_600, 1),
		probeOp(CallRequestsOf, 1, 30_600, 0), // credit 2*600 = 1200
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, c := range []struct {
		id     string
		params map[string]int64
		want   string
	}{
		{"sliding-window", map[string]int64{"limit": 1, "windowMs": 1}, `unknown policy id "sliding-window"`},
		{SlidingCounter, map[string]int64{"limit": 1}, `missing param "windowMs"`},
		{SlidingCounter, map[string]int64{"limit": 0, "windowMs": 1}, "limit = 0 out of range"},
		{SlidingCounter, map[string]int64{"limit": 1, "windowMs": maxW + 1}, "windowMs = 4294967297 out of range"},
		{GCRA, map[string]int64{"ratePerSec": maxL + 1, "burst": 1}, "ratePerSec = 4294967296 out of range"},
		{LeakyBucket, map[string]int64{"ratePerSec": 1, "capacity": 1, "burst": 1}, `unknown param "burst"`},
	} {
		_, err := New(c.id, c.params)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q, %v) = %v, want an error containing %q", c.id, c.params, err, c.want)
		}
	}
}

func TestProbeRejectsForeignCall(t *testing.T) {
	m, err := New(SlidingCounter, map[string]int64{"limit": 1, "windowMs": 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Probe(CallLevelOf, 1, 0); err == nil || !strings.Contains(err.Error(), "levelOf") {
		t.Fatalf("Probe(levelOf) on a sliding counter: err = %v, want one naming levelOf", err)
	}
}

func TestNegativeCostCreatesNothing(t *testing.T) {
	for _, id := range IDs() {
		params := map[string]int64{}
		for _, name := range Params(id) {
			params[name] = 10
		}
		m, err := New(id, params)
		if err != nil {
			t.Fatal(err)
		}
		if m.Allow(1, -1, 0) || m.StateSize() != 0 {
			t.Errorf("%s: Allow(cost -1) admitted or created a key (size %d)", id, m.StateSize())
		}
	}
}

// TestTokenBucketEqualsGCRA checks docs/policies.md's claim on seeded random walks: the two make
// the same decision on every request.
func TestTokenBucketEqualsGCRA(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for walk := range 200 {
		params := map[string]int64{"ratePerSec": 1 + r.Int64N(50), "burst": 1 + r.Int64N(8)}
		tb, _ := New(TokenBucket, params)
		g, _ := New(GCRA, params)
		now := int64(1 << 41)
		for step := range 300 {
			now += r.Int64N(200)
			key, cost := r.Int64N(3), r.Int64N(params["burst"]+2)
			a, b := tb.Allow(key, cost, now), g.Allow(key, cost, now)
			if a != b {
				t.Fatalf("walk %d step %d %v: allow(key %d, cost %d, now %d): token bucket %v, gcra %v",
					walk, step, params, key, cost, now, a, b)
			}
		}
	}
}

// TestSlidingCounterRetryAfterIsHonoured checks docs/policies.md ("Sliding window counter")'s
// property on seeded random walks: with one key and no other traffic, a unit request made exactly
// RetryAfter later is admitted, and (where the wait is positive) one made 1 ms earlier is refused.
func TestSlidingCounterRetryAfterIsHonoured(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for walk := range 300 {
		params := map[string]int64{"limit": 1 + r.Int64N(20), "windowMs": 1 + r.Int64N(2000)}
		type call struct{ cost, now int64 }
		var hist []call
		replay := func() *Model {
			m, _ := New(SlidingCounter, params)
			for _, c := range hist {
				m.Allow(1, c.cost, c.now)
			}
			return m
		}
		now := int64(1<<31) + r.Int64N(1<<20)
		for range 40 {
			now += r.Int64N(params["windowMs"]/2 + 1)
			hist = append(hist, call{1 + r.Int64N(params["limit"]), now})
			ra := replay().RetryAfter(1, now)
			if !replay().Allow(1, 1, now+ra) {
				t.Fatalf("walk %d %v: retryAfter = %d at %d, but allow at +%d refused", walk, params, ra, now, ra)
			}
			if ra > 0 && replay().Allow(1, 1, now+ra-1) {
				t.Fatalf("walk %d %v: retryAfter = %d at %d, but allow at +%d admitted", walk, params, ra, now, ra-1)
			}
		}
	}
}

// TestTimeRange: the model decides at every time in [0, MaxNow] and at none past it, naming the
// time, as the engine's clock can read no later time.
func TestTimeRange(t *testing.T) {
	for _, id := range IDs() {
		params := map[string]int64{}
		for _, p := range Params(id) {
			params[p] = MaxCount
		}
		params[Params(id)[1]] = min(params[Params(id)[1]], MaxWindowMs)
		m, err := New(id, params)
		if err != nil {
			t.Fatal(err)
		}
		if !m.Allow(1, 1, MaxNow) {
			t.Errorf("%s: a first unit at MaxNow refused", id)
		}
		for _, now := range []int64{MaxNow + 1, -1} {
			want := "out of range [0, 4611686018427387903]"
			if _, err := m.Probe(Probes(id)[0], 1, now); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: Probe at %d: err %v, want %q", id, now, err, want)
			}
			for name, f := range map[string]func(){
				"Allow":      func() { m.Allow(1, 1, now) },
				"RetryAfter": func() { m.RetryAfter(1, now) },
			} {
				func() {
					defer func() {
						if r := recover(); r == nil || !strings.Contains(r.(error).Error(), want) {
							t.Errorf("%s: %s at %d: recovered %v, want a panic naming the range", id, name, now, r)
						}
					}()
					f()
				}()
			}
		}
	}
}
