package agent

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	dumps        *prometheus.CounterVec
	coalesced    prometheus.Counter
	uploadBytes  prometheus.Counter
	serverErrors prometheus.Counter
	refused      *prometheus.CounterVec
}

func (a *Agent) registerMetrics() error {
	a.metrics = metrics{
		dumps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_agent_dumps_total",
			Help: "Dump requests by outcome: complete, partial, failed (capture completions) or rejected (answered 4xx/5xx)."}, []string{"outcome"}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_agent_dumps_coalesced_total",
			Help: "Dump requests answered with the artifacts of an earlier dump covering their window."}),
		uploadBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_agent_upload_bytes_total",
			Help: "Artifact bytes the server accepted."}),
		serverErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_agent_server_errors_total",
			Help: "Failed registrations and heartbeats."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_agent_refused_total",
			Help: "API requests refused for their caller or target: a local user acting on a process it does not own (register, forget, dump), a dump request for another registration or service (dump)."},
			[]string{"request"}),
	}
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rootline_agent_dump_held_bytes",
		Help: "Memory of the recorders' windows copied when their dump request was accepted, not yet encoded (bounded by max_held_bytes)."},
		func() float64 { return float64(a.heldBytes.Load()) })
	targets := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rootline_agent_targets", Help: "Processes being recorded."}, func() float64 {
		a.mu.Lock()
		defer a.mu.Unlock()
		return float64(len(a.targets))
	})
	cs := []prometheus.Collector{a.metrics.dumps, a.metrics.coalesced, a.metrics.uploadBytes, a.metrics.serverErrors, a.metrics.refused, held, targets, profilerStats{a}}
	if a.relay != nil {
		cs = append(cs, a.relay.collectors()...)
	}
	for _, c := range cs {
		if err := a.reg.Register(c); err != nil {
			return fmt.Errorf("agent: register metrics: %w", err)
		}
	}
	return nil
}

var profilerStatDesc = prometheus.NewDesc("rootline_profiler_stat",
	"A profiler's own counters (Profiler.Stats): samples, bytes buffered, CPU seconds, dumps, errors…",
	[]string{"profiler", "stat"}, nil)

// profilerStats exports every profiler's Stats at scrape time.
type profilerStats struct{ a *Agent }

func (c profilerStats) Describe(ch chan<- *prometheus.Desc) { ch <- profilerStatDesc }

func (c profilerStats) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.a.profilers {
		for k, v := range p.Stats() {
			ch <- prometheus.MustNewConstMetric(profilerStatDesc, prometheus.GaugeValue, v, p.Name(), k)
		}
	}
}
