package critpath

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/profiler/goroutine"
	"github.com/rootline/rootline/internal/profiler/kernel"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestGolden")

// timelineCase is a synthetic timeline in testdata/*.json. Times are in
// units of Scale nanoseconds (default 1 ms) so that the files stay readable.
type timelineCase struct {
	Comment string `json:"comment"`
	Scale   int64  `json:"scale"`
	// Window of the snapshot, [start, end].
	Window [2]int64 `json:"window"`
	// Threads: [tid, pid, "comm"] (a target thread), or [tid, pid,
	// "comm", depth(, observer)] (a followed waker at depth > 0, a task
	// only seen holding a CPU at kernel.HolderDepth; observer: one of
	// Rootline's own processes, kernel.Thread.Observer).
	Threads [][]any `json:"threads"`
	// Intervals: [tid, "state", "reason", start, end, wakeup(, cpu(,
	// "syscall"(, "device")))]; cpu -1: unknown (the default).
	Intervals [][]any `json:"intervals"`
	// Wakeups: [ts, wakee, waker, "context"(, causal)].
	Wakeups  [][]any      `json:"wakeups"`
	Requests []caseSpan   `json:"requests"`
	Pauses   [][3]float64 `json:"pauses"`
	// Goroutines: [pid, ts, tid, goid, old, new(, "reason")], the goroutine
	// tracker's status changes (goroutine.Running…), in time order.
	Goroutines [][]any `json:"goroutines"`
	// Paths are the span ids whose paths are checked (all when empty).
	Paths []string `json:"paths"`
}

type caseSpan struct {
	Trace     string `json:"trace"`
	Span      string `json:"span"`
	Parent    string `json:"parent"`
	Service   string `json:"service"`
	Operation string `json:"op"`
	PID       uint32 `json:"pid"`
	Start     int64  `json:"start"`
	End       int64  `json:"end"`
	// Threads: [tid, start, end].
	Threads [][3]int64 `json:"threads"`
	Go      bool       `json:"go"`
	// Read: when its first thread read it (the span's start plus its
	// rootline.wait.socket_ms), 0: not said.
	Read int64 `json:"read"`
	// Client: a CLIENT span; Answered: when its response's first byte was
	// in the socket (its end less rootline.wait.response_socket_ms).
	Client   bool  `json:"client"`
	Answered int64 `json:"answered"`
}

func num(v any) int64 {
	switch x := v.(type) {
	case float64:
		return int64(x)
	case int64:
		return x
	}
	panic("not a number")
}

// snapshot builds a case's snapshot, and returns the time scale.
func (c *timelineCase) snapshot() (*kernel.Snapshot, int64) {
	sc := c.Scale
	if sc == 0 {
		sc = 1_000_000
	}
	s := &kernel.Snapshot{Version: kernel.SnapshotVersion, Start: c.Window[0] * sc, End: c.Window[1] * sc,
		Threads: []kernel.Thread{}, Intervals: []kernel.Interval{}, Wakeups: []kernel.Wakeup{}}
	for _, th := range c.Threads {
		t := kernel.Thread{TID: uint32(num(th[0])), PID: uint32(num(th[1])), Comm: th[2].(string), Target: true, Recorded: true}
		if len(th) > 3 {
			t.Depth = int(num(th[3]))
			t.Target = t.Depth == 0
		}
		if len(th) > 4 {
			t.Observer = th[4].(bool)
		}
		s.Threads = append(s.Threads, t)
	}
	for _, w := range c.Wakeups {
		wk := kernel.Wakeup{TS: num(w[0]) * sc, Wakee: uint32(num(w[1])), Waker: uint32(num(w[2])), Context: w[3].(string)}
		wk.Causal = wk.Context == "thread" || len(w) > 4 && w[4].(bool)
		s.Wakeups = append(s.Wakeups, wk)
	}
	for _, iv := range c.Intervals {
		in := kernel.Interval{TID: uint32(num(iv[0])), State: iv[1].(string), Reason: iv[2].(string),
			Start: num(iv[3]) * sc, End: num(iv[4]) * sc, CPU: -1, Wakeup: int(num(iv[5]))}
		// A running interval's CPU is unknown unless the case gives it:
		// the cases run threads at once without saying on which CPUs.
		if in.State == kernel.StateRunning && len(iv) > 6 {
			in.CPU = int(num(iv[6]))
		}
		if len(iv) > 7 {
			in.Syscall = iv[7].(string)
		}
		if len(iv) > 8 {
			in.Device = iv[8].(string)
		}
		s.Intervals = append(s.Intervals, in)
	}
	return s, sc
}

// input reads a case into an analysis input. The snapshot goes through the
// recorder's encoder and this package's decoder, so the cases also pin the
// format.
func (c *timelineCase) input(t testing.TB) Input {
	t.Helper()
	s, sc := c.snapshot()
	tl, err := DecodeBytes(encode(t, s))
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Timeline: tl}
	for _, r := range c.Requests {
		req := Request{TraceID: mustTrace(t, r.Trace), SpanID: mustSpan(t, r.Span), Service: r.Service,
			Operation: r.Operation, PID: r.PID, Start: r.Start * sc, End: r.End * sc, UserScheduled: r.Go, Read: r.Read * sc,
			Client: r.Client, Answered: r.Answered * sc}
		if r.Parent != "" {
			req.Parent = mustSpan(t, r.Parent)
		}
		for _, th := range r.Threads {
			req.Threads = append(req.Threads, Activity{TID: uint32(th[0]), Start: th[1] * sc, End: th[2] * sc})
		}
		in.Requests = append(in.Requests, req)
	}
	for _, p := range c.Pauses {
		in.Pauses = append(in.Pauses, Pause{PID: uint32(p[0]), Start: int64(p[1] * float64(sc)), End: int64(p[2] * float64(sc))})
	}
	for _, g := range c.Goroutines {
		e := goroutine.Event{PID: uint32(num(g[0])), TS: num(g[1]) * sc, TID: uint32(num(g[2])), Goid: uint64(num(g[3])),
			Old: uint32(num(g[4])), New: uint32(num(g[5]))}
		if len(g) > 6 {
			e.Reason = g[6].(string)
		}
		in.Goroutines = append(in.Goroutines, e)
	}
	return in
}

// encode writes a snapshot as the recorder does.
func encode(t testing.TB, s *kernel.Snapshot) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := s.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func mustTrace(t testing.TB, s string) model.TraceID {
	id, err := model.ParseTraceID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mustSpan(t testing.TB, s string) model.SpanID {
	id, err := model.ParseSpanID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// goldenOut is what a golden file holds.
type goldenOut struct {
	Paths  []SpanPath   `json:"paths"`
	Shared []SharedJSON `json:"shared"`
}

// TestGolden computes the paths of each synthetic timeline in testdata and
// compares them with its .golden.json (go test -update rewrites them; each
// was checked by hand against the case's comment). The naive reference
// must agree on every case too.
func TestGolden(t *testing.T) {
	for _, tc := range loadCases(t) {
		f, c := tc.file, tc.c
		t.Run(tc.name, func(t *testing.T) {
			in := c.input(t)
			a := New(in, Config{})
			var got goldenOut
			var paths []Path
			for i, r := range in.Requests {
				if len(c.Paths) > 0 && !contains(c.Paths, r.SpanID.String(), strings.TrimLeft(r.SpanID.String(), "0")) {
					continue
				}
				p := a.Path(i)
				checkPath(t, a, &p)
				if np := a.NaivePath(i); !equalPaths(p, np) {
					t.Errorf("span %s: naive path differs:\nfast  %+v\nnaive %+v", r.SpanID, p, np)
				}
				paths = append(paths, p)
				got.Paths = append(got.Paths, a.JSON(&p))
			}
			got.Shared = a.SharedJSON(Merge(paths))
			out, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, '\n')
			golden := strings.TrimSuffix(f, ".json") + ".golden.json"
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(out, want) {
				t.Errorf("%s differs from the computed paths:\n%s", golden, out)
			}
		})
	}
}

// namedCase is a synthetic timeline case of testdata.
type namedCase struct {
	name, file string
	c          timelineCase
}

// loadCases reads the cases of testdata (not their golden results).
func loadCases(t testing.TB) []namedCase {
	t.Helper()
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	var out []namedCase
	for _, f := range files {
		if strings.HasSuffix(f, ".golden.json") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		nc := namedCase{name: strings.TrimSuffix(filepath.Base(f), ".json"), file: f}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&nc.c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, nc)
	}
	if len(out) == 0 {
		t.Fatal("no cases in testdata")
	}
	return out
}

func contains(l []string, s ...string) bool {
	for _, x := range l {
		for _, y := range s {
			if x == y {
				return true
			}
		}
	}
	return false
}

// checkPath asserts what every path satisfies: segments cover the request
// exactly, in order, and the summaries add up.
func checkPath(t testing.TB, a *Analysis, p *Path) {
	t.Helper()
	r := a.Requests()[p.Request]
	cur := r.Start
	for _, s := range p.Segments {
		if s.Start != cur || s.End <= s.Start {
			t.Fatalf("span %s: segment %+v does not continue at %d", r.SpanID, s, cur)
		}
		cur = s.End
	}
	if r.End > r.Start && cur != r.End {
		t.Fatalf("span %s: segments end at %d, not %d", r.SpanID, cur, r.End)
	}
	var sum int64
	for _, d := range p.States {
		sum += d
	}
	if sum != r.End-r.Start {
		t.Fatalf("span %s: states add up to %d, not %d", r.SpanID, sum, r.End-r.Start)
	}
	sum = 0
	for _, d := range p.Waits {
		sum += d
	}
	if sum != r.End-r.Start {
		t.Fatalf("span %s: waits add up to %d, not %d", r.SpanID, sum, r.End-r.Start)
	}
}

// equalPaths compares two paths; arrows as sets.
func equalPaths(x, y Path) bool {
	if x.Request != y.Request || x.States != y.States || x.Waits != y.Waits || !reflect.DeepEqual(x.BlockedBy, y.BlockedBy) ||
		!reflect.DeepEqual(x.Threads, y.Threads) || !reflect.DeepEqual(x.Segments, y.Segments) {
		return false
	}
	set := func(as []Arrow) map[Arrow]bool {
		m := map[Arrow]bool{}
		for _, a := range as {
			m[a] = true
		}
		return m
	}
	return reflect.DeepEqual(set(x.Arrows), set(y.Arrows))
}
