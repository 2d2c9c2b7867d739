package run

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/model"
)

func sampledSpan(trace uint64, name string, d time.Duration) *model.Span {
	sp := &model.Span{Service: "svc", Name: name, Start: 1, Duration: int64(d)}
	binary.BigEndian.PutUint64(sp.TraceID[8:], trace*0x9e3779b97f4a7c15) // spread over R's range
	sp.TraceID[0] = 1
	sp.SpanID[0] = byte(trace)
	return sp
}

// Every span of a trace the process finds anomalous is shipped, with no
// weight; of the normal traces, exactly those the trace id's randomness
// keeps, each span with the threshold; two processes keep the same ones.
func TestSampler(t *testing.T) {
	const p = 0.25
	a, b := newSampler(p, time.Second), newSampler(p, time.Second)
	now := time.Unix(1000, 0)
	th := anomaly.ThresholdFor(p)
	kept := map[model.TraceID]bool{}
	wantKept := 0
	const n = 400
	for i := uint64(1); i <= n; i++ {
		d := 10 * time.Millisecond
		slow := i > 300 && i%10 == 0 // after the baseline, one in ten is 10× slower
		if slow {
			d *= 10
		}
		for _, s := range []*sampler{a, b} {
			if out := s.add(sampledSpan(i, "GET /", d), now); len(out) != 0 {
				t.Fatalf("a span of an undecided trace was shipped at once")
			}
			s.add(sampledSpan(i, "call", time.Millisecond), now)
		}
		id := sampledSpan(i, "", 0).TraceID
		if slow || anomaly.KeepTrace(id[9:], th) {
			wantKept++
		}
	}
	if out := a.release(now.Add(500*time.Millisecond), false, nil); len(out) != 0 {
		t.Fatalf("%d spans released before the hold", len(out))
	}
	later := now.Add(time.Second)
	outA, outB := a.release(later, false, nil), b.release(later, false, nil)
	if len(outA) != len(outB) {
		t.Fatalf("two processes kept %d and %d spans of the same traces", len(outA), len(outB))
	}
	for i, sp := range outA {
		if outB[i].TraceID != sp.TraceID && !containsTrace(outB, sp.TraceID) {
			t.Fatalf("trace %x kept by one process only", sp.TraceID)
		}
		kept[sp.TraceID] = true
		v, weighted := sp.Attr(anomaly.AttrSamplingThreshold)
		slow := false
		for _, x := range outA {
			if x.TraceID == sp.TraceID && x.Duration == int64(100*time.Millisecond) {
				slow = true
			}
		}
		if slow == weighted {
			t.Fatalf("trace %x: slow %v, threshold attribute %v (%q)", sp.TraceID, slow, weighted, v.Str)
		}
		if weighted && v.Str != anomaly.FormatThreshold(th) {
			t.Fatalf("threshold %q, want %q", v.Str, anomaly.FormatThreshold(th))
		}
	}
	if len(kept) != wantKept || len(outA) != 2*wantKept {
		t.Fatalf("kept %d traces (%d spans), want %d (both spans of each)", len(kept), len(outA), wantKept)
	}
	out, anomalous := a.counts()
	if out != int64(2*(n-wantKept)) || anomalous != 10 {
		t.Fatalf("sampled out %d spans, %d anomalous traces; want %d, 10", out, anomalous, 2*(n-wantKept))
	}
	// A late span of a kept trace goes at once, with its trace's weight.
	if got := a.add(outA[0], later); len(got) != 1 {
		t.Fatalf("a late span of a kept trace: %d shipped", len(got))
	}
}

func containsTrace(spans []*model.Span, id model.TraceID) bool {
	for _, sp := range spans {
		if sp.TraceID == id {
			return true
		}
	}
	return false
}

// With sampling, the shipper sends the kept traces after the hold and what
// is held at exit.
func TestShipperSampling(t *testing.T) {
	o := newOTLPServer(t)
	s := NewShipper(ShipperConfig{Endpoint: o.URL + "/v1/traces", Every: 50 * time.Millisecond, Sample: 0.5, SampleHold: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	go s.Run(ctx)
	th := anomaly.ThresholdFor(0.5)
	want := 0
	for i := uint64(1); i <= 40; i++ {
		sp := sampledSpan(i, "GET /", time.Millisecond)
		s.Emit(sp)
		if anomaly.KeepTrace(sp.TraceID[9:], th) {
			want++
		}
	}
	waitFor(t, "the kept traces", 5*time.Second, func() bool { return o.spans.Load() == int64(want) })
	cancel()
	s.Wait()
	if out, _ := s.SampledOut(); o.spans.Load() != int64(want) || out != int64(40-want) {
		t.Fatalf("received %d, sampled out %d; want %d and %d", o.spans.Load(), out, want, 40-want)
	}
}
