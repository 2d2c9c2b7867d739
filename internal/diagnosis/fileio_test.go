package diagnosis

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// kernelProfile is an eBPF CPU profile: for each span, samples of tid
// worth 10 ms each from its start, one a millisecond, the first fileN
// of them in a file write's kernel stack and userN more in user code.
func kernelProfile(t *testing.T, tid int64, spans []*model.Span, fileN, userN int) []byte {
	t.Helper()
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}}}
	loc := func(name string) *profile.Location {
		fn := &profile.Function{ID: uint64(len(p.Function) + 1), Name: name}
		l := &profile.Location{ID: fn.ID, Line: []profile.Line{{Function: fn}}}
		p.Function, p.Location = append(p.Function, fn), append(p.Location, l)
		return l
	}
	write := []*profile.Location{loc("copy_folio_from_iter_atomic"), loc("generic_perform_write"), loc("ext4_buffered_write_iter"),
		loc("vfs_write"), loc("ksys_write"), loc("write"), loc("Cart.save")}
	user := []*profile.Location{loc("Cart.price"), loc("Cart.add")}
	for _, s := range spans {
		for i := range fileN + userN {
			stack := write
			if i >= fileN {
				stack = user
			}
			p.Sample = append(p.Sample, &profile.Sample{Location: stack, Value: []int64{1, 10e6},
				NumLabel: map[string][]int64{"tid": {tid}, "time_ns": {s.Start + int64(i)*1e6}}})
		}
	}
	return pprofBytes(t, p)
}

// TestDiagnoseFileIOOnCPU: a thread writing a file runs in the kernel
// (copying into the page cache, allocating blocks) for much of the time it
// does not block on the disk, and the kernel's states say only "running".
// Without CPU profiles that is cpu; with the eBPF CPU profiles captured for
// the slow spans, whose kernel stacks are in file-system code for 70 % of
// the samples, that share of the running time is disk.
func TestDiagnoseFileIOOnCPU(t *testing.T) {
	for _, withProfile := range []bool{false, true} {
		ctx := context.Background()
		st := openStore(t)
		byTrace, slowCart, end := shopIncident(t, st, 70, 3, true)
		onset := t0.Add(60 * time.Second)
		if withProfile {
			var refs []store.SpanRef
			for _, s := range slowCart {
				refs = append(refs, store.SpanRef{TraceID: s.TraceID, SpanID: s.SpanID})
			}
			if _, err := st.PutArtifact(ctx, store.Artifact{Kind: "cpu", MediaType: "application/vnd.google.protobuf+gzip", Service: "cart",
				CaptureID: "c1", Start: onset.UnixNano() - 1e9, End: end + 1e9, Spans: refs}, bytes.NewReader(kernelProfile(t, 4001, slowCart, 7, 3))); err != nil {
				t.Fatal(err)
			}
		}
		v := diagnoseShop(t, st, byTrace, end, func(s *model.Span) *critpath.SpanPath {
			// Running (its work and the writes' kernel time), an
			// fsync, then the database call.
			return segmentsPath(s, critpath.Running, "", 50.0, critpath.Disk, "", 20.0, critpath.Network, "", 3.0)
		})
		t.Logf("profile %v: %s/%s waits %v\n  %s", withProfile, v.Service, v.Cause, v.Waits, strings.Join(v.Evidence, "\n  "))
		want := CauseCPU
		if withProfile {
			want = CauseDisk
		}
		if v.Service != "cart" || v.Cause != want {
			t.Errorf("profile %v: verdict %s/%s, want cart/%s", withProfile, v.Service, v.Cause, want)
		}
		if withProfile {
			if ev := strings.Join(v.Evidence, "\n"); !strings.Contains(ev, "70% of their 3000 ms on CPU was in file-system code") {
				t.Errorf("evidence does not say what the profiles measured: %q", v.Evidence)
			}
			// 20 spans' paths (MaxPaths), 35 of each one's 50 ms running moved.
			if n := float64(v.PathSpans); v.Waits[critpath.Running] != round2(15*n) || v.Waits[critpath.Disk] != round2(55*n) {
				t.Errorf("waits %v over %d spans, want running 15 and disk 55 per span", v.Waits, v.PathSpans)
			}
		}
	}
}
