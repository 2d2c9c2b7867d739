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
	"github.com/rootline/rootline/internal/store/sqlite"
)

// Kernel stacks of an eBPF CPU profile, leaf first: a file write, and a
// fault-in of a fresh heap page from a JVM's compiled code.
var (
	fileWriteStack = []string{"copy_folio_from_iter_atomic", "generic_perform_write", "ext4_buffered_write_iter",
		"vfs_write", "ksys_write", "write", "Cart.save"}
	heapFaultStack = []string{"clear_page_erms", "get_page_from_freelist", "__alloc_frozen_pages_noprof", "alloc_pages_mpol",
		"vma_alloc_folio_noprof", "do_anonymous_page", "__handle_mm_fault", "handle_mm_fault", "exc_page_fault", "asm_exc_page_fault", "Cart.save"}
	// The same fault when the cgroup's memory is short: reclaim first.
	reclaimStack = append([]string{"shrink_folio_list", "shrink_lruvec", "shrink_node", "try_to_free_mem_cgroup_pages", "try_charge_memcg",
		"__mem_cgroup_charge"}, heapFaultStack[5:]...)
)

// kernelProfile is an eBPF CPU profile of a process with file mapped: for
// each span, samples of tid worth 10 ms each from its start, one a
// millisecond, the first kernN of them in kernel's stack and userN more in
// user code.
func kernelProfile(t *testing.T, tid int64, spans []*model.Span, file string, kernel []string, kernN, userN int) []byte {
	t.Helper()
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}}}
	m := &profile.Mapping{ID: 1, Start: 0x1000, Limit: 0x2000, File: file}
	p.Mapping = []*profile.Mapping{m}
	loc := func(name string) *profile.Location {
		fn := &profile.Function{ID: uint64(len(p.Function) + 1), Name: name}
		l := &profile.Location{ID: fn.ID, Mapping: m, Line: []profile.Line{{Function: fn}}}
		p.Function, p.Location = append(p.Function, fn), append(p.Location, l)
		return l
	}
	var kern []*profile.Location
	for _, name := range kernel {
		kern = append(kern, loc(name))
	}
	user := []*profile.Location{loc("Cart.price"), loc("Cart.add")}
	for _, s := range spans {
		for i := range kernN + userN {
			stack := kern
			if i >= kernN {
				stack = user
			}
			p.Sample = append(p.Sample, &profile.Sample{Location: stack, Value: []int64{1, 10e6},
				NumLabel: map[string][]int64{"tid": {tid}, "time_ns": {s.Start + int64(i)*1e6}}})
		}
	}
	return pprofBytes(t, p)
}

// profiledShop is shopIncident's store (the cart's 20 slow spans of 70 ms,
// 3 ms of them in its database call), with an eBPF CPU profile of the
// cart's process (file mapped) linked to the slow spans, whose samples are
// 70 % in kernel's stack, when file is not "".
func profiledShop(t *testing.T, file string, kernel []string) (*sqlite.Store, map[model.TraceID][]*model.Span, int64) {
	t.Helper()
	st := openStore(t)
	byTrace, slowCart, end := shopIncident(t, st, 70, 3, true)
	if file == "" {
		return st, byTrace, end
	}
	var refs []store.SpanRef
	for _, s := range slowCart {
		refs = append(refs, store.SpanRef{TraceID: s.TraceID, SpanID: s.SpanID})
	}
	onset := t0.Add(60 * time.Second)
	if _, err := st.PutArtifact(context.Background(), store.Artifact{Kind: "cpu", MediaType: "application/vnd.google.protobuf+gzip", Service: "cart",
		CaptureID: "c1", Start: onset.UnixNano() - 1e9, End: end + 1e9, Spans: refs}, bytes.NewReader(kernelProfile(t, 4001, slowCart, file, kernel, 7, 3))); err != nil {
		t.Fatal(err)
	}
	return st, byTrace, end
}

// TestDiagnoseFileIOOnCPU: a thread writing a file runs in the kernel
// (copying into the page cache, allocating blocks) for much of the time it
// does not block on the disk, and the kernel's states say only "running".
// Without CPU profiles that is cpu; with the eBPF CPU profiles captured for
// the slow spans, whose kernel stacks are in file-system code for 70 % of
// the samples, that share of the running time is disk.
func TestDiagnoseFileIOOnCPU(t *testing.T) {
	for _, withProfile := range []bool{false, true} {
		st, byTrace, end := profiledShop(t, map[bool]string{true: "/srv/cart"}[withProfile], fileWriteStack)
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

// TestDiagnoseHeapFaultsOnCPU: a JVM whose collector commits fresh heap
// pages under an allocation storm has its request threads fault them in
// and zero them, on CPU in the kernel, and the kernel's states say only
// "running". In a JVM's eBPF CPU profile (libjvm.so mapped) with 70 % of
// the samples in those faults that share is gc; the same profile of
// another runtime stays cpu (its allocation is its own work), as does the
// JVM without profiles. When the faults reclaim first (the cgroup's memory
// short), that share is memory, in any runtime.
func TestDiagnoseHeapFaultsOnCPU(t *testing.T) {
	const jvm = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
	for _, tc := range []struct {
		file   string
		kernel []string
		want   string
	}{
		{"", nil, CauseCPU},
		{"/srv/cart", heapFaultStack, CauseCPU},
		{jvm, heapFaultStack, CauseGC},
		{"/srv/cart", reclaimStack, CauseMemory},
		{jvm, reclaimStack, CauseMemory},
	} {
		st, byTrace, end := profiledShop(t, tc.file, tc.kernel)
		v := diagnoseShop(t, st, byTrace, end, func(s *model.Span) *critpath.SpanPath {
			// Running, then runnable: 20 of the 30 ms behind its own
			// process's threads, 5 of them its collector's.
			p := segmentsPath(s, critpath.Running, "", 30.0, critpath.Runqueue, "", 30.0, critpath.Network, "", 3.0)
			p.Segments[1].OwnQueueMs, p.Segments[1].GCQueueMs = 20, 5
			return p
		})
		t.Logf("profile of %q: %s/%s waits %v\n  %s", tc.file, v.Service, v.Cause, v.Waits, strings.Join(v.Evidence, "\n  "))
		if v.Service != "cart" || v.Cause != tc.want {
			t.Errorf("profile of %q: verdict %s/%s, want cart/%s", tc.file, v.Service, v.Cause, tc.want)
		}
		if moved := map[string]string{CauseGC: critpath.GC, CauseMemory: critpath.Memory}[tc.want]; moved != "" {
			what := map[string]string{CauseGC: "a JVM's page faults on fresh anonymous memory", CauseMemory: "memory reclaim, compaction or swap"}[tc.want]
			if ev := strings.Join(v.Evidence, "\n"); !strings.Contains(ev, "70% of their 3000 ms on CPU was in "+what) {
				t.Errorf("evidence does not say what the profiles measured: %q", v.Evidence)
			}
			// 20 spans' paths (MaxPaths): 70 % of each one's 30 ms running
			// and of its 15 ms behind its own threads moved.
			n := float64(v.PathSpans)
			for st, ms := range map[string]float64{critpath.Running: 9, OwnQueue: 4.5, moved: 31.5, GCQueue: 5, critpath.Runqueue: 10} {
				if v.Waits[st] != round2(ms*n) {
					t.Errorf("waits %v over %d spans, want %s %.1f per span", v.Waits, v.PathSpans, st, ms)
				}
			}
		}
	}
}

// TestFallbackKernelShares: without kernel paths the verdict reads the CPU
// profiles alone, and their kernel stacks split the on-CPU time the same
// way: file-system code is disk, a JVM's faults on fresh heap pages gc,
// reclaim memory; other time on CPU stays cpu.
func TestFallbackKernelShares(t *testing.T) {
	const jvm = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
	for _, tc := range []struct {
		file   string
		kernel []string
		want   string
	}{
		{"/srv/cart", fileWriteStack, CauseDisk},
		{jvm, heapFaultStack, CauseGC},
		{"/srv/cart", heapFaultStack, CauseCPU},
		{"/srv/cart", reclaimStack, CauseMemory},
	} {
		st, byTrace, end := profiledShop(t, tc.file, tc.kernel)
		v := diagnoseShop(t, st, byTrace, end, func(*model.Span) *critpath.SpanPath { return nil })
		t.Logf("%s under %s: %s/%s\n  %s", tc.kernel[0], tc.file, v.Service, v.Cause, strings.Join(v.Evidence, "\n  "))
		if v.Service != "cart" || v.Cause != tc.want {
			t.Errorf("%s under %s: verdict %s/%s, want cart/%s", tc.kernel[0], tc.file, v.Service, v.Cause, tc.want)
		}
	}
}
