package rls_test

import (
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/require"
)

const metricsConfig = `
domain: m
descriptors:
- key: a
  rate_limit: {unit: second, requests_per_unit: 1}
- key: s
  shadow_mode: true
  rate_limit: {unit: second, requests_per_unit: 1}
- key: n
  rate_limit: {unit: second, requests_per_unit: 5}
`

// takeOnly is an engine limiter behind a type with no Refund: a backend that cannot give units
// back, as the batched Redis mode is, so the server queries the descriptors after a refusal
// rather than taking and giving back.
type takeOnly struct {
	slidelimit.Limiter
	e *engine.Limiter
}

func (l takeOnly) Close() error { return l.e.Close() }

// Every descriptor of a request counts its hits in the metrics, whether the backend decides a
// refused request's other descriptors by a take it gives back (the engine) or by a query (a
// backend that cannot give back): a shadow-mode descriptor after the refusing one is over its
// limit either way. With the second, those after the refusal were left out of every metric.
func TestMetricsCountEveryDescriptorOnEveryBackend(t *testing.T) {
	for name, backend := range map[string]func(*clock.Clock) rls.Backend{
		"refundable": func(clk *clock.Clock) rls.Backend { return rls.EngineBackend(engine.WithClock(clk)) },
		"take only": func(clk *clock.Clock) rls.Backend {
			return rls.BackendFunc(func(_ string, p policy.Policy) (slidelimit.Limiter, error) {
				e, err := engine.New(p, engine.WithClock(clk))
				if err != nil {
					return nil, err
				}
				return takeOnly{e.AsLimiter(), e}, nil
			})
		},
	} {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewManual(t0)
			defer clk.Stop()
			s := serve(t, parse(t, metricsConfig), rls.WithBackend(backend(clk)))
			require.Equal(t, []string{ok, ok, ok, ok}, outcome(s.call(t, "m", 0, desc("a", "1"), desc("s", "1"), desc("n", "1"))))
			r := s.call(t, "m", 0, desc("a", "1"), desc("s", "1"), desc("n", "1"))
			require.Equal(t, []string{over, over, ok, ok}, outcome(r))
			require.Equal(t, uint32(4), r.GetStatuses()[2].GetLimitRemaining(), "nothing kept")
			m := scrape(t, s.srv)
			for _, line := range []string{
				`slidelimit_rls_hits_total{descriptor="a",domain="m"} 2`,
				`slidelimit_rls_over_limit_total{descriptor="a",domain="m"} 1`,
				`slidelimit_rls_hits_total{descriptor="s",domain="m"} 2`,
				`slidelimit_rls_over_limit_total{descriptor="s",domain="m"} 1`,
				`slidelimit_rls_shadow_mode_total{descriptor="s",domain="m"} 1`,
				`slidelimit_rls_hits_total{descriptor="n",domain="m"} 2`,
				`slidelimit_rls_over_limit_total{descriptor="n",domain="m"} 0`,
				`slidelimit_rls_near_limit_total{descriptor="n",domain="m"} 0`,
			} {
				requireSeries(t, m, line)
			}
			// Four more on n would leave none of its 5, under a fifth: near, though the request is refused.
			r = s.call(t, "m", 0, desc("a", "1"), withHits(desc("n", "1"), 4))
			require.Equal(t, []string{over, over, ok}, outcome(r))
			requireSeries(t, scrape(t, s.srv), `slidelimit_rls_near_limit_total{descriptor="n",domain="m"} 4`)
		})
	}
}

// hits_total adds each descriptor's cost: its hits_addend, clamped to the largest limit plus one
// (2^32), as the decision clamps it. Counted as sent, one hits_addend near 2^64 left the float64
// counters where adding the next hit changes nothing, for the rest of the process's life.
func TestHitsTotalCountsTheClampedCost(t *testing.T) {
	s := serve(t, parse(t, metricsConfig))
	r := s.call(t, "m", 0, withHits(desc("n", "1"), 10_000_000_000))
	require.Equal(t, []string{over, over}, outcome(r))
	m := scrape(t, s.srv)
	requireSeries(t, m, `slidelimit_rls_hits_total{descriptor="n",domain="m"} 4.294967296e+09`)
	requireSeries(t, m, `slidelimit_rls_over_limit_total{descriptor="n",domain="m"} 4.294967296e+09`)
}

// requireSeries checks that the metrics page holds line ("series value"), and on failure shows
// that series' line rather than the whole page.
func requireSeries(t *testing.T, page, line string) {
	t.Helper()
	series := line[:strings.LastIndexByte(line, ' ')+1]
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, series) {
			require.Equal(t, line, l)
			return
		}
	}
	t.Fatalf("no series %son the metrics page", series)
}

// With a backend that cannot give back, a refused request's descriptors are decided refusing
// one first (see predict), but the header items stay in the request's order, as the statuses do.
func TestHeaderItemsInRequestOrderOnEveryBackend(t *testing.T) {
	clk := clock.NewManual(t0)
	defer clk.Stop()
	s := serve(t, parse(t, metricsConfig), rls.WithHeaders(true), rls.WithBackend(rls.BackendFunc(func(_ string, p policy.Policy) (slidelimit.Limiter, error) {
		e, err := engine.New(p, engine.WithClock(clk))
		if err != nil {
			return nil, err
		}
		return takeOnly{e.AsLimiter(), e}, nil
	})))
	require.Equal(t, []string{ok, ok, ok}, outcome(s.call(t, "m", 0, desc("n", "1"), desc("a", "1"))))
	r := s.call(t, "m", 0, desc("n", "1"), desc("a", "1"))
	require.Equal(t, []string{over, ok, over}, outcome(r))
	h := fieldsOf(r)
	require.Equal(t, `"n";q=5;w=1, "a";q=1;w=1`, h["RateLimit-Policy"])
	require.Regexp(t, `^"n";r=4;t=\d+, "a";r=0;t=\d+$`, h["RateLimit"])
}
