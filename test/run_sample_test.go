package test

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/anomaly"
)

// TestRunSampling: `rootline run --sample 0.5` on a real service ships the
// spans of exactly the traces the consistent sample keeps (the trace id's
// last 56 bits against the threshold), each with the threshold attribute,
// and of the other traces only spans its detector found anomalous, which
// carry none.
func TestRunSampling(t *testing.T) {
	requireTracing(t)
	dir := t.TempDir()
	col := newCollector(t)
	runMode = []string{"--sample", "0.5"}
	leaf := startSvc(t, col, "leaf", nil, cSvc(t, dir)...)
	runMode = nil
	th := anomaly.ThresholdFor(0.5)
	client := keepAliveClient()
	var kept, dropped []string
	for range 60 {
		trace := randHex(16)
		if _, _, err := get(client, leaf.url(), "00-"+trace+"-"+randHex(8)+"-01"); err != nil {
			t.Fatal(err)
		}
		id, _ := hex.DecodeString(trace)
		if anomaly.KeepTrace(id[9:], th) {
			kept = append(kept, trace)
		} else {
			dropped = append(dropped, trace)
		}
	}
	if len(kept) == 0 || len(dropped) == 0 {
		t.Skipf("60 random trace ids all fell on one side of the sample (%d kept)", len(kept))
	}
	want := anomaly.FormatThreshold(th)
	marked := 0
	for id, spans := range col.traces(t, kept, 1) {
		for _, s := range spans {
			got, ok := s.Attrs[anomaly.AttrSamplingThreshold]
			if ok && got != want {
				t.Errorf("trace %s: %s = %v, want %q", id, anomaly.AttrSamplingThreshold, got, want)
			}
			if ok {
				marked++
			}
		}
	}
	// Those the detector found anomalous carry no threshold: on a loaded
	// machine a few, never most, of one service's uniform requests.
	if marked < len(kept)/2 {
		t.Errorf("%d spans of %d kept traces carry the threshold: the sampled ones must", marked, len(kept))
	}
	// The held traces are decided within the hold (2 s) and shipped within
	// the next second: past that, whatever of the others came is all.
	time.Sleep(4 * time.Second)
	shipped := 0
	for _, s := range col.strays(kept) {
		shipped++
		if _, ok := s.Attrs[anomaly.AttrSamplingThreshold]; ok {
			t.Errorf("a span of trace %s, outside the sample, was shipped as a sampled one: %s", s.Trace, describe([]otlpSpan{s}))
		}
	}
	if shipped >= len(dropped) {
		t.Errorf("%d spans of the %d traces outside the sample were shipped: nothing was sampled out", shipped, len(dropped))
	}
	t.Logf("%d traces kept by the sample (%d spans marked), %d outside it, %d spans of those shipped as anomalous", len(kept), marked, len(dropped), shipped)
}
