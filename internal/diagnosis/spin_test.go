package diagnosis

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// monitorProfile is a JFR recording's pprof conversion: a "monitor_enter"
// sample of tid worth ns at each of ats.
func monitorProfile(t *testing.T, tid, ns int64, ats ...int64) []byte {
	t.Helper()
	fn := &profile.Function{ID: 1, Name: "Cart.add"}
	loc := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn}}}
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}, {Type: "monitor_enter", Unit: "nanoseconds"}},
		Function: []*profile.Function{fn}, Location: []*profile.Location{loc}}
	for _, at := range ats {
		p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{loc}, Value: []int64{0, ns},
			NumLabel: map[string][]int64{"tid": {tid}, "time_ns": {at}}})
	}
	return pprofBytes(t, p)
}

// TestDiagnoseMonitorSpin: a JVM spins on a contended monitor before it
// parks, so the kernel sees cart's threads running for most of their slow
// time. Without JFR that is cpu; with the JFR recordings of the slow spans,
// whose monitor-enter events cover most of that time, it is lock.
func TestDiagnoseMonitorSpin(t *testing.T) {
	for _, withJFR := range []bool{false, true} {
		ctx := context.Background()
		st := openStore(t)
		byTrace, slowCart, end := shopIncident(t, st, 70, 3, true)
		if withJFR {
			// 60 of each slow span's 73 ms entering a monitor, one
			// recording for all of them.
			var refs []store.SpanRef
			var ats []int64
			for _, s := range slowCart {
				refs = append(refs, store.SpanRef{TraceID: s.TraceID, SpanID: s.SpanID})
				ats = append(ats, s.Start+40e6)
			}
			if _, err := st.PutArtifact(ctx, store.Artifact{Kind: analysis.KindJFR, MediaType: "application/vnd.google.protobuf+gzip", Service: "cart",
				CaptureID: "c1", Spans: refs}, bytes.NewReader(monitorProfile(t, 4001, 60e6, ats...))); err != nil {
				t.Fatal(err)
			}
		}
		v := diagnoseShop(t, st, byTrace, end, func(s *model.Span) *critpath.SpanPath {
			// Its own work, spinning on the monitor (running), a park
			// ended by the holder, then the database call.
			return segmentsPath(s, critpath.Running, "", 8.0, critpath.Running, "", 52.0, critpath.Running, critpath.Lock, 10.0, critpath.Network, "", 3.0)
		})
		t.Logf("JFR %v: %s/%s waits %v\n  %s", withJFR, v.Service, v.Cause, v.Waits, strings.Join(v.Evidence, "\n  "))
		want := CauseCPU
		if withJFR {
			want = CauseLock
		}
		if v.Service != "cart" || v.Cause != want {
			t.Errorf("JFR %v: verdict %s/%s, want cart/%s", withJFR, v.Service, v.Cause, want)
		}
		if withJFR && !strings.Contains(strings.Join(v.Evidence, "\n"), "entering contended Java monitors for 82% of their time") {
			t.Errorf("evidence does not say what JFR measured: %q", v.Evidence)
		}
	}
}
