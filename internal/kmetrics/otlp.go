package kmetrics

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"

	"github.com/rootline/rootline/internal/export"
)

// ScopeName is the instrumentation scope of the pushed metrics.
const ScopeName = "github.com/rootline/rootline/internal/kmetrics"

// ToOTLP converts series to OTLP metrics: one resource per (container,
// service) with service.name (the container's service, else "unknown"),
// host.name, container (the cgroup) and, when its members' environment
// names it, container.name (and k8s.container.name) attributes; histograms as explicit-bucket
// histograms with the log2 bounds (seconds or bytes), counters as monotonic
// sums, all cumulative since start.
func ToOTLP(series []Series, host string, start, now time.Time) pmetric.Metrics {
	md := pmetric.NewMetrics()
	type resKey struct{ container, service string }
	res := map[resKey]pmetric.MetricSlice{}
	metrics := map[resKey]map[Metric]pmetric.Metric{}
	for _, s := range series {
		rk := resKey{s.Container, s.Service}
		ms, ok := res[rk]
		if !ok {
			rm := md.ResourceMetrics().AppendEmpty()
			attrs := rm.Resource().Attributes()
			svc := s.Service
			if svc == "" {
				svc = "unknown"
			}
			attrs.PutStr("service.name", svc)
			if host != "" {
				attrs.PutStr("host.name", host)
			}
			attrs.PutStr("container", s.Container)
			attrs.PutInt("cgroup.id", int64(s.CgroupID))
			// The container's name (app, a sidecar) within its pod or
			// service, by the semantic conventions.
			if s.ContainerName != "" {
				attrs.PutStr("container.name", s.ContainerName)
				if s.K8s {
					attrs.PutStr("k8s.container.name", s.ContainerName)
				}
			}
			sm := rm.ScopeMetrics().AppendEmpty()
			sm.Scope().SetName(ScopeName)
			ms = sm.Metrics()
			res[rk] = ms
			metrics[rk] = map[Metric]pmetric.Metric{}
		}
		mt, ok := metrics[rk][s.Metric]
		if !ok {
			mt = ms.AppendEmpty()
			mt.SetName(s.Metric.ExportName())
			mt.SetDescription(s.Metric.Help())
			switch {
			case s.Metric.Kind() == Counter:
				mt.SetUnit("1")
				if s.Metric.Unit() == Nanoseconds {
					mt.SetUnit("s")
				}
				sum := mt.SetEmptySum()
				sum.SetIsMonotonic(true)
				sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
			default:
				if s.Metric.Unit() == Nanoseconds {
					mt.SetUnit("s")
				} else {
					mt.SetUnit("By")
				}
				mt.SetEmptyHistogram().SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
			}
			metrics[rk][s.Metric] = mt
		}
		ts, st := pcommon.NewTimestampFromTime(now), pcommon.NewTimestampFromTime(start)
		if s.Metric.Kind() == Counter {
			dp := mt.Sum().DataPoints().AppendEmpty()
			dp.SetStartTimestamp(st)
			dp.SetTimestamp(ts)
			if s.Metric.Unit() == Nanoseconds {
				dp.SetDoubleValue(s.counterValue())
			} else {
				dp.SetIntValue(int64(s.Count))
			}
			if s.Reason != "" {
				dp.Attributes().PutStr("reason", s.Reason)
			}
			continue
		}
		dp := mt.Histogram().DataPoints().AppendEmpty()
		dp.SetStartTimestamp(st)
		dp.SetTimestamp(ts)
		dp.SetCount(s.Count)
		dp.SetSum(float64(s.Sum) * scale(s.Metric))
		upper, cum := Bounds(s.Metric, s.Buckets)
		// OTLP buckets are per-bucket counts with one more bucket than
		// bounds; the last (overflow) bucket is empty by construction.
		counts := make([]uint64, len(cum)+1)
		var prev uint64
		for i, c := range cum {
			counts[i] = c - prev
			prev = c
		}
		dp.ExplicitBounds().FromRaw(upper)
		dp.BucketCounts().FromRaw(counts)
	}
	return md
}

// NodeStealMetric is the node's steal time: how long its CPUs waited
// for the physical CPUs the hypervisor gave to other guests (the steal
// column of /proc/stat); NodeBusyMetric is the time they ran (user,
// nice, system, irq and softirq). Both are cumulative counters in seconds
// summed over CPUs, pushed on a resource with host.name and container
// "node" and no service.name: steal over busy + steal is the share of
// what the node asked of its CPUs that the host did not give.
const (
	NodeStealMetric = "rootline_node_cpu_steal_seconds_total"
	NodeBusyMetric  = "rootline_node_cpu_busy_seconds_total"
)

// NodeCPU is the node's CPU time since boot, summed over CPUs.
type NodeCPU struct {
	Steal, Busy time.Duration
}

// appendNodeCPU adds the node's CPU time to md.
func appendNodeCPU(md pmetric.Metrics, host string, start, now time.Time, c NodeCPU) {
	rm := md.ResourceMetrics().AppendEmpty()
	attrs := rm.Resource().Attributes()
	if host != "" {
		attrs.PutStr("host.name", host)
	}
	attrs.PutStr("container", "node")
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName(ScopeName)
	for _, m := range []struct {
		name, help string
		v          time.Duration
	}{
		{NodeStealMetric, "Time the node's CPUs waited for a physical CPU the hypervisor gave to another guest (/proc/stat steal, summed over CPUs).", c.Steal},
		{NodeBusyMetric, "Time the node's CPUs ran (/proc/stat user, nice, system, irq and softirq, summed over CPUs).", c.Busy},
	} {
		mt := sm.Metrics().AppendEmpty()
		mt.SetName(m.name)
		mt.SetDescription(m.help)
		mt.SetUnit("s")
		sum := mt.SetEmptySum()
		sum.SetIsMonotonic(true)
		sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		dp := sum.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		dp.SetTimestamp(pcommon.NewTimestampFromTime(now))
		dp.SetDoubleValue(m.v.Seconds())
	}
}

// Pusher pushes the series as OTLP/HTTP protobuf to a server's /v1/metrics.
type Pusher struct {
	// URL is the full endpoint (http://server:4318/v1/metrics).
	URL string
	// Token, when set, is sent as a bearer token.
	Token  string
	Host   string
	Client *http.Client
	// Node, when set, reads the node's CPU time since boot; each push
	// then carries it (NodeStealMetric, NodeBusyMetric). A read that
	// fails leaves it out of that push.
	Node  func() (NodeCPU, error)
	start time.Time
	buf   []byte // the last push's gzipped body, reused
}

// Push sends one export request, gzipped. Calls must not overlap (the
// body's buffer is reused).
func (p *Pusher) Push(ctx context.Context, series []Series, now time.Time) error {
	if p.start.IsZero() {
		p.start = now
	}
	md := ToOTLP(series, p.Host, p.start, now)
	if p.Node != nil {
		if c, err := p.Node(); err == nil {
			appendNodeCPU(md, p.Host, p.start, now, c)
		}
	}
	if md.ResourceMetrics().Len() == 0 {
		return nil
	}
	req := pmetricotlp.NewExportRequestFromMetrics(md)
	body, err := req.MarshalProto()
	if err != nil {
		return fmt.Errorf("kmetrics: encode OTLP: %w", err)
	}
	// Gzipped, as the traced processes' batches: the series' names and
	// labels repeat in every push.
	body = export.AppendGzip(p.buf[:0], body)
	p.buf = body
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/x-protobuf")
	hr.Header.Set("Content-Encoding", "gzip")
	if p.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+p.Token)
	}
	c := p.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(hr)
	if err != nil {
		return fmt.Errorf("kmetrics: push: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("kmetrics: push: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}
