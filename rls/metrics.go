package rls

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus series, in a registry of its own so that two servers in one
// process never collide.
type metrics struct {
	reg                                *prometheus.Registry
	hits, overLimit, nearLimit, shadow *prometheus.CounterVec
	latency                            prometheus.Histogram
	backendErrors                      prometheus.Counter
	reloads                            *prometheus.CounterVec

	// detailed holds the series made for detailed_metric descriptors' request values, at most
	// maxDetailed of them, by domain and descriptor label.
	detailedMu  sync.RWMutex
	detailed    map[[2]string]*series
	maxDetailed int
}

func newMetrics(maxDetailed int) *metrics {
	labels := []string{"domain", "descriptor"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &metrics{
		maxDetailed: maxDetailed,
		detailed:    make(map[[2]string]*series),
		reg:         prometheus.NewRegistry(),
		hits:        counter("slidelimit_rls_hits_total", "Hits (the sum of hits_addend) decided per descriptor of the config."),
		overLimit:   counter("slidelimit_rls_over_limit_total", "Hits refused per descriptor, shadow mode included."),
		nearLimit:   counter("slidelimit_rls_near_limit_total", "Hits admitted that left less than a fifth of the limit."),
		shadow:      counter("slidelimit_rls_shadow_mode_total", "Hits over the limit of a descriptor in shadow mode, reported OK to the caller."),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "slidelimit_rls_decision_seconds",
			Help:    "Time to decide one ShouldRateLimit call, backend round trips included.",
			Buckets: []float64{1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25},
		}),
		backendErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slidelimit_rls_backend_errors_total",
			Help: "Decisions the backend could not make through its store (decided by its failure mode), and refunds of a refused request it failed (those units stay charged).",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slidelimit_rls_config_reloads_total",
			Help: "Config reloads, by the watcher (Watch) or on demand (ReloadFile, the command's SIGHUP), by result (ok, error).",
		}, []string{"result"}),
	}
	for _, r := range []string{"ok", "error"} {
		m.reloads.WithLabelValues(r) // at 0 from the start, so that a rate over it has a first point
	}
	m.reg.MustRegister(m.hits, m.overLimit, m.nearLimit, m.shadow, m.latency, m.backendErrors, m.reloads,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// MetricsHandler serves the server's metrics in the Prometheus text format. Safe for concurrent
// use.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
}

// Registry returns the registry the server's metrics live in, for a caller that adds its own
// (the Redis client's, say) or serves them elsewhere. A Registry is safe for concurrent use.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }

// series are one descriptor's counters, resolved once rather than looked up by label per call.
type series struct {
	hits, overLimit, nearLimit, shadow prometheus.Counter
}

func (m *metrics) seriesFor(domain, descriptor string) *series {
	return &series{
		hits:      m.hits.WithLabelValues(domain, descriptor),
		overLimit: m.overLimit.WithLabelValues(domain, descriptor),
		nearLimit: m.nearLimit.WithLabelValues(domain, descriptor),
		shadow:    m.shadow.WithLabelValues(domain, descriptor),
	}
}

// detailedFor returns the series of a detailed_metric descriptor's request values, made on first
// use, or nil once maxDetailed of them exist and descriptor is not among them. Safe for concurrent
// use.
//
// Why a cap: the values are the client's (a path, a header), and every distinct one would
// otherwise add four series, held and written on every scrape for the life of the process.
func (m *metrics) detailedFor(domain, descriptor string) *series {
	k := [2]string{domain, descriptor}
	m.detailedMu.RLock()
	sr, ok := m.detailed[k]
	m.detailedMu.RUnlock()
	if ok {
		return sr
	}
	m.detailedMu.Lock()
	defer m.detailedMu.Unlock()
	if sr, ok := m.detailed[k]; ok { // made by a racing call
		return sr
	}
	if len(m.detailed) >= m.maxDetailed {
		return nil
	}
	sr = m.seriesFor(domain, descriptor)
	m.detailed[k] = sr
	return sr
}
