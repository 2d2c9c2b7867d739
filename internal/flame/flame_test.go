package flame

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/pprof/profile"
)

// testProfile builds a small CPU profile. Each sample is a stack (root
// first), a tid, a time and a value.
func testProfile(t *testing.T) []byte {
	t.Helper()
	fns := map[string]*profile.Function{}
	var locs []*profile.Location
	loc := func(names ...string) *profile.Location { // names innermost first (inlined)
		l := &profile.Location{ID: uint64(len(locs) + 1)}
		for _, n := range names {
			fn := fns[n]
			if fn == nil {
				fn = &profile.Function{ID: uint64(len(fns) + 1), Name: n}
				fns[n] = fn
			}
			l.Line = append(l.Line, profile.Line{Function: fn})
		}
		locs = append(locs, l)
		return l
	}
	mainL, handleL, parseL, writeL := loc("main"), loc("handle"), loc("parse", "decode"), loc("write")
	sample := func(tid, ts, v int64, stack ...*profile.Location) *profile.Sample {
		s := &profile.Sample{Value: []int64{1, v}, NumLabel: map[string][]int64{"tid": {tid}, "time_ns": {ts}}}
		for i := len(stack) - 1; i >= 0; i-- { // leaf first
			s.Location = append(s.Location, stack[i])
		}
		return s
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			sample(1, 100, 10, mainL, handleL, parseL), // main;handle;decode;parse
			sample(1, 200, 20, mainL, handleL, writeL),
			sample(2, 300, 30, mainL, handleL, parseL),
			sample(2, 400, 40, mainL, writeL),
			{Value: []int64{1, 5}, Location: []*profile.Location{{ID: 99, Address: 0xbeef}}}, // no labels, no symbols
		},
		Location: append(locs, &profile.Location{ID: 99, Address: 0xbeef}),
	}
	for _, fn := range fns {
		p.Function = append(p.Function, fn)
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestFromPprof(t *testing.T) {
	data := testProfile(t)
	for _, tc := range []struct {
		name      string
		f         Filter
		want      string
		kept      int
		wantTotal int64
	}{
		{
			name: "all, default type is the last (cpu)",
			want: `{"name":"root","value":105,"children":[` +
				`{"name":"0xbeef","value":5},` +
				`{"name":"main","value":100,"children":[` +
				`{"name":"handle","value":60,"children":[{"name":"decode","value":40,"children":[{"name":"parse","value":40}]},{"name":"write","value":20}]},` +
				`{"name":"write","value":40}]}]}`,
			kept: 5, wantTotal: 105,
		},
		{
			name: "sample type by name",
			f:    Filter{Type: "samples", TIDs: []int64{2}},
			want: `{"name":"root","value":2,"children":[{"name":"main","value":2,"children":[` +
				`{"name":"handle","value":1,"children":[{"name":"decode","value":1,"children":[{"name":"parse","value":1}]}]},` +
				`{"name":"write","value":1}]}]}`,
			kept: 2, wantTotal: 5,
		},
		{
			name: "tid",
			f:    Filter{TIDs: []int64{1}},
			want: `{"name":"root","value":30,"children":[{"name":"main","value":30,"children":[` +
				`{"name":"handle","value":30,"children":[{"name":"decode","value":10,"children":[{"name":"parse","value":10}]},{"name":"write","value":20}]}]}]}`,
			kept: 2, wantTotal: 105,
		},
		{
			name: "time range inclusive",
			f:    Filter{Start: 200, End: 300},
			want: `{"name":"root","value":50,"children":[{"name":"main","value":50,"children":[` +
				`{"name":"handle","value":50,"children":[{"name":"decode","value":30,"children":[{"name":"parse","value":30}]},{"name":"write","value":20}]}]}]}`,
			kept: 2, wantTotal: 105,
		},
		{
			name: "open-ended time range",
			f:    Filter{Start: 350},
			want: `{"name":"root","value":40,"children":[{"name":"main","value":40,"children":[{"name":"write","value":40}]}]}`,
			kept: 1, wantTotal: 105,
		},
		{
			name: "tid and time",
			f:    Filter{TIDs: []int64{1, 7}, End: 150},
			want: `{"name":"root","value":10,"children":[{"name":"main","value":10,"children":[` +
				`{"name":"handle","value":10,"children":[{"name":"decode","value":10,"children":[{"name":"parse","value":10}]}]}]}]}`,
			kept: 1, wantTotal: 105,
		},
		{
			name: "nothing matches",
			f:    Filter{TIDs: []int64{3}},
			want: `{"name":"root","value":0}`,
			kept: 0, wantTotal: 105,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, st, err := FromPprof(data, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(root)
			if string(got) != tc.want {
				t.Errorf("tree\n got %s\nwant %s", got, tc.want)
			}
			if st.SamplesTotal != 5 || st.SamplesKept != tc.kept || st.ValueTotal != tc.wantTotal {
				t.Errorf("stats = %+v, want kept %d of 5, total %d", st, tc.kept, tc.wantTotal)
			}
		})
	}
}

func TestFromPprofErrors(t *testing.T) {
	data := testProfile(t)
	for _, tc := range []struct {
		name string
		data []byte
		f    Filter
		is   error
	}{
		{name: "empty", data: nil},
		{name: "garbage", data: []byte("not a profile at all")},
		{name: "truncated gzip", data: data[:len(data)/2]},
		{name: "unknown type", data: data, f: Filter{Type: "alloc_space"}, is: ErrUnknownSampleType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := FromPprof(tc.data, tc.f)
			if err == nil {
				t.Fatal("no error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
		})
	}
}
