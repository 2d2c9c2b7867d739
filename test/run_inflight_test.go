package test

import (
	"net/http"
	"slices"
	"testing"
	"time"
)

// TestRunInFlight: a request that hangs at a leaf is reported while it is
// still open — the leaf's SERVER span, and its caller's SERVER span with the
// CLIENT span of the call still waiting — as provisional spans
// (rootline.in_flight, their ages as durations, the final spans' ids), and
// each is then superseded by its final span.
func TestRunInFlight(t *testing.T) { forEachMode(t, testRunInFlight) }

func testRunInFlight(t *testing.T) {
	col := newCollector(t)
	leaf := startSvc(t, col, "leaf", nil, pySvc(t)...)
	front := startSvc(t, col, "front", []string{"CALL=" + leaf.url()}, pySvc(t)...)
	client := &http.Client{Timeout: 30 * time.Second}
	// The operations' medians here: 25 quick requests.
	for range 25 {
		if _, _, err := get(client, front.url()+"/x", ""); err != nil {
			t.Fatal(err)
		}
	}
	// Under ptrace with the eBPF read tap, the tracer takes a read when the
	// process next stops at a traced call: a leaf that reads its request
	// and sleeps is seen only when it answers (docs/run.md).
	leafSeen := !slices.Equal(runMode, []string{"--mode", "ptrace", "--reads", "ebpf"})
	want := 3
	if !leafSeen {
		want = 2
	}
	const hang = 6 * time.Second
	trace := randHex(16)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, _, err := get(client, front.url()+"/x?sleep_ms=6000", "00-"+trace+"-"+randHex(8)+"-01")
		done <- err
	}()
	// While it hangs: provisional spans of the three.
	type key struct{ service, kind string }
	var provisional map[key]otlpSpan
	for time.Since(start) < hang-time.Second {
		provisional = map[key]otlpSpan{}
		col.mu.Lock()
		for _, s := range col.spans {
			if s.Trace == trace && s.Attrs["rootline.in_flight"] == true {
				provisional[key{s.Service, s.Kind.String()}] = s
			}
		}
		col.mu.Unlock()
		if len(provisional) == want {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	leafP, frontP, callP := provisional[key{"leaf", "Server"}], provisional[key{"front", "Server"}], provisional[key{"front", "Client"}]
	if (leafSeen && leafP.ID == "") || frontP.ID == "" || callP.ID == "" {
		t.Fatalf("%.1f s into a %v request, provisional spans %+v; want the leaf's SERVER span, the front's SERVER and CLIENT spans",
			time.Since(start).Seconds(), hang, provisional)
	}
	if callP.Parent != frontP.ID || (leafSeen && leafP.Parent != callP.ID) {
		t.Errorf("provisional spans not joined: front %s, its call %s (parent %s), leaf parent %s", frontP.ID, callP.ID, callP.Parent, leafP.Parent)
	}
	reported := []otlpSpan{frontP, callP}
	if leafSeen {
		reported = append(reported, leafP)
	}
	for _, s := range reported {
		if d := s.End.Sub(s.Start); d < time.Second || d >= hang {
			t.Errorf("provisional %s %s: duration %v, want its age then (≥ 1 s, < %v)", s.Service, s.Kind, d, hang)
		}
		if _, ok := s.Attrs["rootline.wait.local_ms"]; ok {
			t.Errorf("provisional %s %s carries a wait field", s.Service, s.Kind)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * hang):
		t.Fatal("the hanging request did not end")
	}
	// Then the final spans, with the same ids.
	final := map[string]otlpSpan{}
	for deadline := time.Now().Add(traceWait); len(final) < 3 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		col.mu.Lock()
		for _, s := range col.spans {
			if s.Trace == trace && s.Attrs["rootline.in_flight"] != true {
				final[s.ID] = s
			}
		}
		col.mu.Unlock()
	}
	for _, p := range reported {
		f, ok := final[p.ID]
		if !ok {
			t.Errorf("no final copy of the provisional %s %s span %s", p.Service, p.Kind, p.ID)
			continue
		}
		if d := f.End.Sub(f.Start); d < hang || !f.Start.Equal(p.Start) {
			t.Errorf("final %s %s: %v from %v, want ≥ %v from the provisional's start %v", f.Service, f.Kind, d, f.Start, hang, p.Start)
		}
	}
}
