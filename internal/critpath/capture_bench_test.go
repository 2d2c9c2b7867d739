package critpath

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/sqlite"
)

// BenchmarkCaptureMesh is the server's work when a capture completes in a
// mesh: the paths of the 20 spans a kernel snapshot is linked to, from the
// real store, where every request runs through most of the snapshot's ten
// processes. The snapshot is a generated one of 10 processes × 8 threads
// over 2 s; its requests are grouped ten to a trace in time order, and 60 s
// of such traffic before the window (15 traces per second, the spans a
// snapshot's window reaches back to) fill the store. Most of the work is
// reading the processes' traces; BenchmarkEndToEnd measures the analysis.
func BenchmarkCaptureMesh(b *testing.B) {
	ctx := context.Background()
	const start = int64(1_700_000_000_000_000_000)
	snap, reqs := generate(genConfig{seed: 3, procs: 10, threads: 8, dur: 2e9, meanRun: 400_000, meanBlock: 2_000_000,
		meanReq: 20_000_000, meanReqGap: 40_000_000, start: start, foreignWakers: 0.02})
	st, err := sqlite.Open(sqlite.Config{Dir: b.TempDir()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	trace := func(n int) (id model.TraceID) {
		binary.BigEndian.PutUint64(id[8:], uint64(n)+1)
		return id
	}
	var spans []*model.Span
	for i, r := range reqs {
		r.TraceID = trace(i / 10)
		spans = append(spans, spanOf(r))
	}
	n := len(reqs)/10 + 1
	for t := range 900 { // the 60 s before the window
		at := start - 60e9 + int64(t)*int64(60e9)/900
		for p := range 10 {
			pid := uint32(1000 + 1000*p)
			var sid model.SpanID
			binary.BigEndian.PutUint64(sid[:], uint64(n+t)<<8|uint64(p))
			spans = append(spans, spanOf(Request{TraceID: trace(n + t), SpanID: sid, Service: "svc", Operation: "op", PID: pid,
				Start: at + int64(p)*1e6, End: at + int64(p)*1e6 + 5e6, Threads: []Activity{{TID: pid + 1, Start: at + int64(p)*1e6, End: at + int64(p)*1e6 + 5e6}}}))
		}
	}
	for i := 0; i < len(spans); i += 2000 {
		if err := st.WriteSpans(ctx, spans[i:min(i+2000, len(spans))]); err != nil {
			b.Fatal(err)
		}
	}
	var refs []store.SpanRef
	for i := 0; i < len(reqs) && len(refs) < 20; i += max(1, len(reqs)/20) {
		refs = append(refs, store.SpanRef{TraceID: trace(i / 10), SpanID: reqs[i].SpanID})
	}
	var buf bytes.Buffer
	if err := snap.Encode(&buf); err != nil {
		b.Fatal(err)
	}
	k, err := st.PutArtifact(ctx, store.Artifact{Kind: KernelKind, MediaType: MediaType, PID: 1000, Start: snap.Start, End: snap.End,
		CaptureID: "cap", Spans: refs}, &buf)
	if err != nil {
		b.Fatal(err)
	}
	// linked: the paths of the linked spans alone; window: also those of
	// the snapshot's processes' other slow spans in its window (the
	// default).
	for _, c := range []struct {
		name string
		more int
	}{{"linked", -1}, {"window", 0}} {
		b.Run(c.name, func(b *testing.B) {
			an := &Analyzer{Spans: st, Artifacts: st, MaxWindowPaths: c.more}
			b.ReportAllocs()
			c0 := cpuTime()
			for b.Loop() {
				res, err := an.Capture(ctx, k.ID)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(res.Paths)), "paths")
			}
			reportCPU(b, c0)
		})
	}
}
