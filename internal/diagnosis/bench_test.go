package diagnosis

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/sqlite"
)

// BenchmarkDiagnoseLargeStore: one verdict on a store of 50,000 spans
// (12,500 requests of the shop), 2,000 of them slow, with 10 captures that
// each stored a CPU profile, a kernel snapshot and the critical paths of
// 200 anomalous spans, linked to them: the size at which a verdict's
// evidence lookup ran out of its 30 s budget in the mesh demo. The store is
// built once; the sub-benchmarks read the anomalies' artifacts per trace
// with every link of each artifact (TraceArtifacts, "links") and with the
// span → artifact rows of the trace only (SpanArtifacts, "span-artifacts"),
// side by side; "span-artifacts+cache" keeps the decoded stored critical
// paths between verdicts (critpath.StoredCache) as the server does, and
// "span-artifacts+cache+state" also the incident's state between its
// verdicts (VerdictState), as the tracker does.
func BenchmarkDiagnoseLargeStore(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(sqlite.Config{Dir: b.TempDir()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	onset := t0.Add(10 * time.Minute)
	const normal, slow = 10500, 2000
	var batch []*model.Span
	flush := func() {
		if err := st.WriteSpans(ctx, batch); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := range normal {
		batch = append(batch, shopTrace(i, onset.Add(-10*time.Minute+time.Duration(i)*57*time.Millisecond), 2, 6, 3, false)...)
		if len(batch) > 4000 {
			flush()
		}
	}
	var cart []*model.Span
	var end int64
	for i := range slow {
		tr := shopTrace(normal+i, onset.Add(time.Duration(i)*15*time.Millisecond), 2, 70, 3, true)
		batch = append(batch, tr...)
		cart = append(cart, tr[2])
		end = tr[0].End()
		if len(batch) > 4000 {
			flush()
		}
	}
	flush()
	for c := range 10 {
		var refs []store.SpanRef
		doc := critpath.Stored{Version: critpath.StoredVersion, Snapshot: fmt.Sprint("k", c)}
		for _, s := range cart[c*200 : c*200+200] {
			refs = append(refs, store.SpanRef{TraceID: s.TraceID, SpanID: s.SpanID})
			doc.Paths = append(doc.Paths, *segmentsPath(s, critpath.Running, "", 8.0, critpath.Running, critpath.Lock, 62.0, critpath.Network, "", 3.0))
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_ = json.NewEncoder(zw).Encode(doc)
		_ = zw.Close()
		capID := fmt.Sprint("cap", c)
		for _, a := range []store.Artifact{
			{Kind: "cpu", MediaType: "application/vnd.google.protobuf+gzip", Service: "cart"},
			{Kind: critpath.KernelKind, MediaType: critpath.MediaType, Service: "cart"},
		} {
			a.CaptureID, a.Spans = capID, refs
			if _, err := st.PutArtifact(ctx, a, bytes.NewReader([]byte("x"))); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := st.PutArtifact(ctx, store.Artifact{Kind: critpath.ArtifactKind, MediaType: critpath.ArtifactMediaType, Service: "cart",
			CaptureID: capID, Spans: refs}, &buf); err != nil {
			b.Fatal(err)
		}
	}
	inc := &Incident{ID: "x", Entry: "frontend GET /checkout", EntryService: "frontend", Start: onset.UnixNano(), End: end}
	for _, bc := range []struct {
		name  string
		arts  store.ArtifactStore
		cache bool
		state bool
	}{{"links", linksOnly{st}, false, false}, {"span-artifacts", st, false, false}, {"span-artifacts+cache", st, true, false},
		{"span-artifacts+cache+state", st, true, true}} {
		b.Run(bc.name, func(b *testing.B) {
			var cache *critpath.StoredCache
			if bc.cache {
				cache = critpath.NewStoredCache(critpath.DefaultStoredCacheBytes)
			}
			d := &Diagnoser{Source: &analysis.StoreSource{Spans: st, Artifacts: bc.arts}, Config: DefaultConfig(), Cache: cache,
				Paths: StoredPaths{Artifacts: st, Analyzer: &critpath.Analyzer{Spans: st, Artifacts: st, Cache: cache}},
				Now:   func() time.Time { return time.Unix(0, end).Add(time.Second) }}
			// state: the incident's verdicts in a row keep what they read
			// (VerdictState); nothing changes between them here.
			var vs *VerdictState
			if bc.state {
				d.Changes, vs = NewArtifactChanges(st), &VerdictState{}
			}
			c0 := cpuTime()
			defer func() { b.ReportMetric(float64(cpuTime()-c0)/float64(b.N)/1e6, "cpu-ms/op") }()
			for range b.N {
				v, err := d.DiagnoseWith(ctx, inc, vs)
				if err != nil {
					b.Fatal(err)
				}
				if v.Service != "cart" || v.Cause != CauseLock {
					b.Fatalf("verdict %s/%s (paths %d), missing %q", v.Service, v.Cause, v.PathSpans, v.Missing)
				}
			}
		})
	}
}

// linksOnly hides the store's SpanArtifacts: the lookup as it was.
type linksOnly struct{ store.ArtifactStore }

// BenchmarkVerdictOnStore: the verdicts of one incident a demo's server
// stored, computed again on a copy of its data directory
// (ROOTLINE_BENCH_DATA=DIR; ROOTLINE_BENCH_INCIDENT=ID, else the longest
// incident), as the tracker computes them while it is open: from a minute
// after its onset, each verdict 10 s after the last, through its end. One
// op is one verdict; "from-scratch" keeps nothing between them, "state"
// the incident's VerdictState and the artifact listings (as the server
// does). Skipped without ROOTLINE_BENCH_DATA.
func BenchmarkVerdictOnStore(b *testing.B) {
	dir := os.Getenv("ROOTLINE_BENCH_DATA")
	if dir == "" {
		b.Skip("set ROOTLINE_BENCH_DATA to a copy of a stopped server's data directory")
	}
	ctx := context.Background()
	st, err := sqlite.Open(sqlite.Config{Dir: dir}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	list, err := st.FindIncidents(ctx, store.IncidentQuery{Limit: 1000})
	if err != nil {
		b.Fatal(err)
	}
	var pick *store.Incident
	for i, s := range list {
		if want := os.Getenv("ROOTLINE_BENCH_INCIDENT"); s.ID == want || want == "" && (pick == nil || s.End-s.Start > pick.End-pick.Start) {
			pick = &list[i]
		}
	}
	if pick == nil {
		b.Fatalf("no such incident in %s (%d incidents)", dir, len(list))
	}
	inc, err := FromStored(*pick)
	if err != nil {
		b.Fatal(err)
	}
	end := inc.End
	inc.End = 0 // open, as while its verdicts were computed
	for _, bc := range []struct {
		name  string
		state bool
	}{{"from-scratch", false}, {"state", true}} {
		b.Run(bc.name, func(b *testing.B) {
			cache := critpath.NewStoredCache(critpath.DefaultStoredCacheBytes)
			var at time.Time
			d := &Diagnoser{Source: &analysis.StoreSource{Spans: st, Artifacts: st}, Metrics: st, Config: DefaultConfig(), Cache: cache,
				Paths: StoredPaths{Artifacts: st, Analyzer: &critpath.Analyzer{Spans: st, Artifacts: st, Cache: cache}},
				Now:   func() time.Time { return at }}
			var vs *VerdictState
			if bc.state {
				d.Changes, vs = NewArtifactChanges(st), &VerdictState{}
			}
			first := time.Unix(0, inc.Start).Add(time.Minute)
			at = first
			c0 := cpuTime()
			defer func() { b.ReportMetric(float64(cpuTime()-c0)/float64(b.N)/1e6, "cpu-ms/op") }()
			for range b.N {
				if _, err := d.DiagnoseWith(ctx, &inc, vs); err != nil {
					b.Fatal(err)
				}
				if at = at.Add(10 * time.Second); at.UnixNano() > end {
					at = first
					if vs != nil {
						*vs = VerdictState{}
					}
				}
			}
		})
	}
}
