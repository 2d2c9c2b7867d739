package query

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/rootline/rootline/internal/store"
)

// cpuProfile builds a gzipped pprof with two threads: tid 1 runs main→hot at
// t=100 and t=200, tid 2 runs main→cold at t=150.
func cpuProfile(t *testing.T) []byte {
	t.Helper()
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	mainF, hot, cold := fn(1, "main"), fn(2, "hot"), fn(3, "cold")
	loc := func(id uint64, f *profile.Function) *profile.Location {
		return &profile.Location{ID: id, Line: []profile.Line{{Function: f}}}
	}
	lMain, lHot, lCold := loc(1, mainF), loc(2, hot), loc(3, cold)
	sample := func(tid, at int64, leaf *profile.Location) *profile.Sample {
		return &profile.Sample{Location: []*profile.Location{leaf, lMain}, Value: []int64{1},
			NumLabel: map[string][]int64{"tid": {tid}, "time_ns": {at}}}
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}},
		Sample:     []*profile.Sample{sample(1, 100, lHot), sample(1, 200, lHot), sample(2, 150, lCold)},
		Location:   []*profile.Location{lMain, lHot, lCold},
		Function:   []*profile.Function{mainF, hot, cold},
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestFlameGraph(t *testing.T) {
	f := newFakeStore()
	f.addArtifact(store.Artifact{ID: "prof", Kind: "cpu", MediaType: "application/vnd.google.protobuf+gzip", FileName: "cpu.pb.gz"}, cpuProfile(t))
	f.addArtifact(store.Artifact{ID: "raw", Kind: "jfr", MediaType: "application/octet-stream", FileName: "x.jfr"}, []byte("JFR"))
	h := newTestAPI(f, Config{}, nil, nil)
	for _, tc := range []struct {
		name   string
		target string
		status int
		kept   int
		leaves map[string]int64 // child of main → value
	}{
		{"whole window", "/api/v1/artifacts/prof/flamegraph", 200, 3, map[string]int64{"hot": 2, "cold": 1}},
		{"one thread", "/api/v1/artifacts/prof/flamegraph?tid=2", 200, 1, map[string]int64{"cold": 1}},
		{"thread and time", "/api/v1/artifacts/prof/flamegraph?tid=1,2&start=120&end=250", 200, 2, map[string]int64{"hot": 1, "cold": 1}},
		{"nothing in range", "/api/v1/artifacts/prof/flamegraph?start=300", 200, 0, nil},
		{"bad tid", "/api/v1/artifacts/prof/flamegraph?tid=x", 400, 0, nil},
		{"end before start", "/api/v1/artifacts/prof/flamegraph?start=5&end=1", 400, 0, nil},
		{"not a profile", "/api/v1/artifacts/raw/flamegraph", 422, 0, nil},
		{"unknown artifact", "/api/v1/artifacts/nope/flamegraph", 404, 0, nil},
		{"unknown sample type", "/api/v1/artifacts/prof/flamegraph?type=alloc", 400, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := do(t, h, tc.target)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if tc.status != http.StatusOK {
				return
			}
			var got flameGraphJSON
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got.SamplesKept != tc.kept || got.SamplesTotal != 3 {
				t.Fatalf("kept %d of %d, want %d of 3", got.SamplesKept, got.SamplesTotal, tc.kept)
			}
			leaves := map[string]int64{}
			for _, c := range got.Root.Children {
				for _, l := range c.Children {
					leaves[l.Name] = l.Value
				}
			}
			if len(leaves) != len(tc.leaves) {
				t.Fatalf("leaves %v, want %v", leaves, tc.leaves)
			}
			for k, v := range tc.leaves {
				if leaves[k] != v {
					t.Fatalf("leaves %v, want %v", leaves, tc.leaves)
				}
			}
		})
	}
}
