package run

import (
	"sync"
	"time"

	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/model"
)

// sampler is the shipper's node-side tail sampling (ShipperConfig.Sample):
// it holds each trace's spans for a while, runs the server's anomaly
// detector (anomaly.Median, keyed by service and operation as the server
// keys it) on every span of the process, and then ships every span of a
// trace the process found anomalous, and of the others those whose trace
// id falls in a consistent sample (OpenTelemetry's consistent probability
// sampling: every process keeps the same normal traces). Spans of a normal
// trace carry the sampling threshold (anomaly.AttrSamplingThreshold), so
// that the server's detector weights their durations by their adjusted
// count and its baselines stay those of all the traffic.
//
// The local detector sees every span, sampled or not, so its baselines are
// the process's whole traffic. A trace is anomalous here when one of this
// process's spans is; its other processes decide by their own spans, so a
// process whose part of a slow trace was normal keeps it only when the
// sample does.
type sampler struct {
	det  *anomaly.Median
	th   uint64
	attr model.KeyValue // the threshold attribute of kept normal spans
	hold time.Duration  // how long a trace's spans wait for its verdict

	mu      sync.Mutex
	pending map[model.TraceID]*heldTrace
	decided map[model.TraceID]decision

	// SampledOut counts spans not shipped (normal, outside the sample);
	// Anomalous counts the traces shipped for being anomalous here.
	sampledOut, anomalous int64
}

type heldTrace struct {
	spans     []*model.Span
	first     time.Time
	anomalous bool
}

type decision struct {
	keep, anomalous bool
	until           time.Time
}

// maxHeld bounds the traces held at once: past it the oldest are decided
// early, so that a burst cannot grow the process's memory.
const maxHeld = 8192

// decidedFor is how long a trace's decision is kept for its late spans.
const decidedFor = 30 * time.Second

func newSampler(p float64, hold time.Duration) *sampler {
	cfg := anomaly.DefaultConfig()
	cfg.MaxKeys = 4096
	det, _ := anomaly.NewMedian(cfg, nil)
	th := anomaly.ThresholdFor(p)
	return &sampler{det: det, th: th, hold: hold,
		attr:    model.String(anomaly.AttrSamplingThreshold, anomaly.FormatThreshold(th)),
		pending: map[model.TraceID]*heldTrace{}, decided: map[model.TraceID]decision{}}
}

// add takes a span at now; it returns the spans to ship at once (a late
// span of a trace already decided, or nothing).
func (s *sampler) add(sp *model.Span, now time.Time) []*model.Span {
	v := s.det.ObserveAt(sp.Service+"/"+sp.Name, sp.Duration, sp.End())
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.decided[sp.TraceID]; ok {
		switch {
		case v.Anomalous && !d.anomalous:
			// Anomalous after its trace was decided: this span goes, and
			// the trace's later spans with it.
			s.decided[sp.TraceID] = decision{keep: true, anomalous: true, until: now.Add(decidedFor)}
			s.anomalous++
			return []*model.Span{sp}
		case d.keep:
			if !d.anomalous {
				sp.SetAttr(s.attr)
			}
			return []*model.Span{sp}
		}
		s.sampledOut++
		return nil
	}
	h := s.pending[sp.TraceID]
	if h == nil {
		h = &heldTrace{first: now}
		s.pending[sp.TraceID] = h
	}
	h.spans = append(h.spans, sp)
	h.anomalous = h.anomalous || v.Anomalous
	return nil
}

// keep decides that trace id is kept whole, as if one of its spans here
// were anomalous: a provisional span of it was shipped (Shipper.EmitNow),
// and its final copy must follow.
func (s *sampler) keep(id model.TraceID, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.pending[id]; h != nil {
		h.anomalous = true
		return
	}
	if d, ok := s.decided[id]; !ok || !d.anomalous {
		s.anomalous++
	}
	s.decided[id] = decision{keep: true, anomalous: true, until: now.Add(decidedFor)}
}

// release decides the traces held for hold by now (all of them when
// all), appends the spans to ship to out and returns it.
func (s *sampler) release(now time.Time, all bool, out []*model.Span) []*model.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	early := len(s.pending) > maxHeld
	for id, h := range s.pending {
		if !all && !early && now.Sub(h.first) < s.hold {
			continue
		}
		delete(s.pending, id)
		d := decision{anomalous: h.anomalous, until: now.Add(decidedFor)}
		d.keep = h.anomalous || anomaly.KeepTrace(id[9:], s.th)
		s.decided[id] = d
		switch {
		case h.anomalous:
			s.anomalous++
			out = append(out, h.spans...)
		case d.keep:
			for _, sp := range h.spans {
				sp.SetAttr(s.attr)
			}
			out = append(out, h.spans...)
		default:
			s.sampledOut += int64(len(h.spans))
		}
	}
	for id, d := range s.decided {
		if now.After(d.until) {
			delete(s.decided, id)
		}
	}
	return out
}

// counts returns the spans sampled out and the anomalous traces kept.
func (s *sampler) counts() (sampledOut, anomalous int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sampledOut, s.anomalous
}
