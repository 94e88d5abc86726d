package testvectors_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/reference"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/testvectors"
)

// TestEngineAgreesAtTopOfRange drives every policy, with its smallest and largest parameters,
// through random calls in the last seconds of the time range (up to 2^62-1 ms), and requires the
// engine to agree with the reference model on every step; each case runs under a deadline, so
// that a decision that never returns fails instead of hanging the suite.
func TestEngineAgreesAtTopOfRange(t *testing.T) {
	const top = testvectors.MaxNow
	extremes := []int64{1, 3, 1000, 1 << 21, reference.MaxCount}
	for _, id := range reference.IDs() {
		names := reference.Params(id)
		for _, a := range extremes {
			for _, b := range extremes {
				params := map[string]int64{names[0]: a, names[1]: b}
				if names[1] == "windowMs" {
					params[names[1]] = min(b, reference.MaxWindowMs)
				}
				if id == reference.SlidingLog && a > policy.MaxLogLimit {
					if a != extremes[3] {
						continue // one case at the log's own largest limit is enough
					}
					params[names[0]] = policy.MaxLogLimit
				}
				c := topCase(t, id, params, top, rand.New(rand.NewPCG(uint64(a), uint64(b))))
				f := &testvectors.File{Policy: testvectors.PolicyPrefix + id, Version: testvectors.Version, Cases: []testvectors.Case{c}}
				var out bytes.Buffer
				done := make(chan struct{})
				var passed, failed int
				var err error
				go func() {
					defer close(done)
					passed, failed, err = testvectors.Run(f, &out)
				}()
				select {
				case <-done:
				case <-time.After(20 * time.Second):
					t.Fatalf("%s %v: the engine did not return", id, params)
				}
				if err != nil || failed != 0 || passed != len(c.Steps) {
					t.Errorf("%s %v: passed %d, failed %d, err %v\n%s", id, params, passed, failed, err, out.String())
				}
			}
		}
	}
}

// topCase is a random walk of calls on two keys at times rising to top, each step's expectation
// taken from the reference model.
func topCase(t *testing.T, id string, params map[string]int64, top int64, r *rand.Rand) testvectors.Case {
	t.Helper()
	m, err := reference.New(id, params)
	if err != nil {
		t.Fatal(err)
	}
	c := testvectors.Case{Name: fmt.Sprint(params), Params: params, Seed: 1}
	now := top - 60_000
	probes := reference.Probes(id)
	for i := 0; i < 200 && now <= top; i++ {
		key := int64(r.IntN(2))
		switch r.IntN(4) {
		case 0, 1:
			cost := []int64{0, 1, 2, params[reference.Params(id)[0]], 1 << 40}[r.IntN(5)]
			c.Steps = append(c.Steps, testvectors.Step{Call: testvectors.CallAllow, Args: []int64{key, cost, now}, Expect: testvectors.Bool(m.Allow(key, cost, now))})
		case 2:
			c.Steps = append(c.Steps, testvectors.Step{Call: testvectors.CallRetryAfter, Args: []int64{key, now}, Expect: testvectors.Int(m.RetryAfter(key, now))})
		default:
			call := probes[r.IntN(len(probes))]
			v, err := m.Probe(call, key, now)
			if err != nil {
				t.Fatal(err)
			}
			c.Steps = append(c.Steps, testvectors.Step{Call: call, Args: []int64{key, now}, Expect: testvectors.Int(v)})
		}
		now += []int64{0, 1, 7, 100, 999}[r.IntN(5)]
	}
	c.Steps = append(c.Steps, testvectors.Step{Call: testvectors.CallAllow, Args: []int64{0, 1, top}, Expect: testvectors.Bool(m.Allow(0, 1, top))})
	return c
}
