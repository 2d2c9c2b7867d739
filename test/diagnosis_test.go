package test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/diagnosis"
)

// The diagnosis tests run a real fault in a real C service
// (test/testdata/cpsvc) under `rootline run`, with the server and the
// agent's kernel recorder, and check the incident the server opened and its
// verdict: the culprit service and the cause, from the critical paths of
// the service's slow requests.

// dgGet sends GET /work?<q> with no trace context, so that the service's
// SERVER span is the root of its trace: the entry point of incidents.
func dgGet(t *testing.T, port int, q string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Get(fmt.Sprintf("http://127.0.0.1:%d/work?%s", port, q))
	if err != nil {
		t.Errorf("GET %s: %v", q, err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET %s: %s", q, resp.Status)
	}
}

// waitVerdict polls the incidents of svc until one has a verdict computed
// from at least minPaths critical paths, and returns it.
func (e *cpEnv) waitVerdict(t *testing.T, svc string, minPaths int) diagnosis.Incident {
	t.Helper()
	deadline := time.Now().Add(150 * time.Second)
	var last []diagnosis.Incident
	for {
		var resp struct {
			Incidents []diagnosis.Incident `json:"incidents"`
		}
		if code := e.srv.getJSON(t, "/api/v1/incidents?service="+svc, &resp); code != 200 {
			t.Fatalf("GET /api/v1/incidents: status %d", code)
		}
		last = resp.Incidents
		for _, inc := range resp.Incidents {
			if inc.Verdict != nil && inc.Verdict.PathSpans >= minPaths {
				// Polled every second: an upper bound of the time from the
				// onset to a verdict from kernel evidence.
				t.Logf("onset to a verdict from %d critical paths: ≤ %.1f s (this verdict computed %.1f s after the onset)",
					inc.Verdict.PathSpans, time.Since(time.Unix(0, inc.Start)).Seconds(), float64(inc.Verdict.Updated-inc.Start)/1e9)
				return inc
			}
		}
		if time.Now().After(deadline) {
			var anoms []any
			e.srv.getJSON(t, "/api/v1/anomalies?service="+svc, &anoms)
			var det any
			e.srv.getJSON(t, "/api/v1/detector", &det)
			t.Logf("%d anomalous spans of %s; detector %v", len(anoms), svc, det)
			t.Fatalf("no incident of %s with a verdict from %d critical paths after 150 s: %+v", svc, minPaths, last)
		}
		time.Sleep(time.Second)
	}
}

// checkVerdict asserts the verdict and that the incident is served by id and
// as the diagnosis of its example trace.
func (e *cpEnv) checkVerdict(t *testing.T, inc diagnosis.Incident, svc, cause string) {
	t.Helper()
	v := inc.Verdict
	t.Logf("incident %s %s: %d anomalous of %d requests; verdict %s / %s (confidence %.2f), runner-up %+v, waits %v\n  evidence:\n    %s\n  missing:\n    %s",
		inc.ID, inc.Entry, inc.Anomalous, inc.Requests, v.Service, v.Cause, v.Confidence, v.RunnerUp, v.Waits,
		strings.Join(v.Evidence, "\n    "), strings.Join(v.Missing, "\n    "))
	if v.Service != svc || v.Cause != cause {
		t.Fatalf("verdict %s / %s, want %s / %s", v.Service, v.Cause, svc, cause)
	}
	if inc.Entry != svc+" GET /work" || inc.Anomalous < 5 || inc.Anomalous > inc.Requests {
		t.Fatalf("incident entry %q, %d anomalous of %d requests", inc.Entry, inc.Anomalous, inc.Requests)
	}
	if v.Confidence <= 0.3 || v.ExampleTraceID == "" {
		t.Fatalf("confidence %.2f, example trace %q", v.Confidence, v.ExampleTraceID)
	}
	var byID, byTrace diagnosis.Incident
	if code := e.srv.getJSON(t, "/api/v1/incidents/"+inc.ID, &byID); code != 200 || byID.ID != inc.ID {
		t.Fatalf("GET /api/v1/incidents/%s: %d %+v", inc.ID, code, byID)
	}
	if code := e.srv.getJSON(t, "/api/v1/traces/"+v.ExampleTraceID+"/diagnosis", &byTrace); code != 200 || byTrace.ID != inc.ID {
		t.Fatalf("GET /api/v1/traces/%s/diagnosis: %d, incident %q, want %q", v.ExampleTraceID, code, byTrace.ID, inc.ID)
	}
}

// TestDiagnosisLockC: waves of requests contend for one pthread mutex in a C
// service (one request holds it while spinning, three wait): an incident
// opens at its entry point, and its verdict names the service and lock.
func TestDiagnosisLockC(t *testing.T) {
	e := newCPEnvServer(t, "kernel", nil)
	bin := cpBuild(t, e.dir)
	port, _ := e.run(t, "dg-lock", "ptrace", nil, bin)
	for range 40 {
		dgGet(t, port, "do=fast")
	}
	time.Sleep(500 * time.Millisecond)
	for range 6 {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); dgGet(t, port, "do=lock&hold=300") }()
		time.Sleep(60 * time.Millisecond)
		for range 3 {
			wg.Add(1)
			go func() { defer wg.Done(); dgGet(t, port, "do=lock&hold=1") }()
		}
		wg.Wait()
	}
	inc := e.waitVerdict(t, "dg-lock", 5)
	e.checkVerdict(t, inc, "dg-lock", diagnosis.CauseLock)

	// rootline analyze diagnose: the server's incidents, then offline,
	// where the verdict is computed again from the stopped server's store.
	remote := diagnoseJSON(t, "--server", "http://"+e.srv.query, "--service", "dg-lock")
	if err := e.srv.signal(syscall.SIGTERM); err != nil {
		t.Fatalf("server exit: %v", err)
	}
	offline := diagnoseJSON(t, "--data-dir", e.srv.dir, "--service", "dg-lock")
	for _, got := range [][]diagnosis.Incident{remote, offline} {
		if len(got) == 0 || got[0].ID != inc.ID || got[0].Verdict == nil || got[0].Verdict.Service != "dg-lock" || got[0].Verdict.Cause != diagnosis.CauseLock {
			t.Fatalf("rootline analyze diagnose gave %+v, want incident %s with dg-lock / lock", got, inc.ID)
		}
	}
	out, err := exec.Command(rootlineBin(t), "analyze", "diagnose", "--data-dir", e.srv.dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "verdict      dg-lock / lock") {
		t.Fatalf("text output (%v):\n%s", err, out)
	}
}

func diagnoseJSON(t *testing.T, args ...string) []diagnosis.Incident {
	t.Helper()
	cmd := exec.Command(rootlineBin(t), append([]string{"analyze", "diagnose", "--json"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rootline analyze diagnose %v: %v\n%s", args, err, stderr.String())
	}
	var res struct {
		Incidents []diagnosis.Incident `json:"incidents"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return res.Incidents
}

// TestDiagnosisThrottledC: a CPU-bound C service's cgroup gets a CPU quota
// of 2 % of a CPU (5 ms per 250 ms period): its requests are held off the
// CPU by the quota, and the verdict names the service and cpu-throttle (not
// CPU work, not run-queue contention). The long period keeps the quota's
// share of each request well above the run-queue wait that follows each
// unthrottle on a machine loaded by other work.
func TestDiagnosisThrottledC(t *testing.T) {
	e := newCPEnvServer(t, "kernel", nil)
	bin := cpBuild(t, e.dir)
	cg := cpuCgroup(t, "rootline-test-diagnosis")
	mustWrite(t, cg+"/cpu.cfs_period_us", "250000")
	port, _ := e.run(t, "dg-quota", "ebpf", nil, "sh", "-c", "echo $$ > "+cg+"/cgroup.procs && exec "+bin)
	for range 40 {
		dgGet(t, port, "do=spin&ms=10")
	}
	time.Sleep(500 * time.Millisecond)
	mustWrite(t, cg+"/cpu.cfs_quota_us", "5000")
	for range 20 {
		dgGet(t, port, "do=spin&ms=10")
	}
	mustWrite(t, cg+"/cpu.cfs_quota_us", "-1")
	inc := e.waitVerdict(t, "dg-quota", 5)
	e.checkVerdict(t, inc, "dg-quota", diagnosis.CauseCPUThrottle)
	checkQuotaAdvice(t, inc.Verdict)
}
