package test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/mesh"
)

// TestDemoSidecarKS runs `rootline demo` on the small topology (pod mode,
// every service under `rootline run` behind a real Envoy sidecar, the agent
// recording every kernel metric) through a fault-free stretch, then
// `rootline analyze critical-metrics` on its store. Each service is a pod
// whose sidecar is a container of its own (<mesh>/<service>/envoy in the
// cgroup v2 hierarchy), labelled by the agent with the service's name and
// container.name=envoy: the analysis must find, for every service, that
// sidecar as its sidecar group, the app's containers as its app group, and
// the two-sample KS tests of the service against its sidecar, per metric
// both recorded (ViperProbe §5.3), in the JSON and the summary.
func TestDemoSidecarKS(t *testing.T) {
	bpftest.SkipShort(t, "the mesh demo takes minutes")
	bpftest.RequireBPF(t)
	if _, err := mesh.FindEnvoy(); err != nil {
		bpftest.Missing(t, err.Error())
	}
	dir := t.TempDir()
	const prefix = "sks"
	cmd := exec.Command(rootlineBin(t), "demo", "--topology", "testdata/demo-small.yaml", "--warmup", "20s",
		"--fault", "none=30s", "--settle", "10s", "--prefix", prefix, "--subnet", "10.77.153.0/24", "--query.addr", "127.0.0.1:0",
		"--data-dir", dir, "--json", filepath.Join(dir, "demo.json"))
	var logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	start := time.Now()
	// The demo's own exit status says whether its verdicts were right,
	// which on a loaded machine is not what this test is about.
	err := cmd.Run()
	t.Logf("demo ran %s (%v):\n%s", time.Since(start).Round(time.Second), err, logs.String())
	if _, serr := os.Stat(filepath.Join(dir, "demo.json")); serr != nil {
		t.Fatalf("the demo wrote no summary: %v", err)
	}

	store := filepath.Join(dir, "data")
	out, err := exec.Command(rootlineBin(t), "analyze", "critical-metrics", "--data-dir", store, "--json").Output()
	if err != nil {
		t.Fatalf("analyze critical-metrics --json: %v", err)
	}
	var rep struct {
		Critical map[string][]string `json:"critical"`
		Services []sidecarKSService  `json:"services"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	for _, svc := range []string{"a", "b", "c", "d"} {
		i := slices.IndexFunc(rep.Services, func(s sidecarKSService) bool { return s.Service == svc })
		if i < 0 {
			t.Errorf("%s: not in the report", svc)
			continue
		}
		s := rep.Services[i]
		sidecar := "/rootline-demo-" + prefix + "/" + svc + "/envoy"
		if s.Sidecar == nil || !slices.Contains(s.Sidecar.Containers, sidecar) {
			t.Errorf("%s: sidecar group %+v, want its container %s", svc, s.Sidecar, sidecar)
			continue
		}
		for _, c := range s.Sidecar.Containers {
			if !strings.HasSuffix(c, "/"+svc+"/envoy") {
				t.Errorf("%s: sidecar group holds %s, not a sidecar of %s", svc, c, svc)
			}
		}
		if s.App == nil || len(s.App.Containers) == 0 {
			t.Errorf("%s: no app group", svc)
			continue
		}
		for _, c := range s.App.Containers {
			if strings.Contains(c, "envoy") {
				t.Errorf("%s: app group holds the sidecar %s", svc, c)
			}
		}
		if _, ok := rep.Critical[svc+" sidecar"]; !ok {
			t.Errorf("%s: no critical metrics of its sidecar", svc)
		}
		// Both run and use the CPU: their on-CPU slices are always
		// compared, whatever else the kernel saw.
		if !slices.ContainsFunc(s.KS, func(k sidecarKS) bool { return k.Metric == "oncpu" }) {
			t.Errorf("%s: no KS test of oncpu (%s)", svc, s.KSNote)
		}
		for _, k := range s.KS {
			if k.D < 0 || k.D > 1 || k.P < 0 || k.P > 1 || k.N1 == 0 || k.N2 == 0 || k.Different != (k.P < 0.05) {
				t.Errorf("%s: KS of %s: %+v", svc, k.Metric, k)
			}
		}
		t.Logf("%s: app %v, sidecar %v, %d KS tests: %+v", svc, s.App.Containers, s.Sidecar.Containers, len(s.KS), s.KS)
	}

	var stderr bytes.Buffer
	sum := exec.Command(rootlineBin(t), "analyze", "critical-metrics", "--data-dir", store)
	sum.Stderr = &stderr
	text, err := sum.Output()
	if err != nil {
		t.Fatalf("analyze critical-metrics: %v\n%s", err, stderr.String())
	}
	if n := strings.Count(string(text), "KS service vs sidecar:"); n < 4 {
		t.Errorf("the summary has %d lines of KS tests, want one per service (4):\n%s", n, text)
	}
	// Other meshes on the machine with the same service names add their
	// containers to the groups: ours must be among them.
	found := false
	for line := range strings.Lines(string(text)) {
		if strings.HasPrefix(strings.TrimSpace(line), "sidecar (") && strings.Contains(line, "/rootline-demo-"+prefix+"/a/envoy") {
			found = true
		}
	}
	if !found {
		t.Errorf("the summary does not show a's sidecar group:\n%s", text)
	}
}

// sidecarKSService is the part of a service's analysis the test reads.
type sidecarKSService struct {
	Service string `json:"service"`
	App     *struct {
		Containers []string `json:"containers"`
	} `json:"app"`
	Sidecar *struct {
		Containers []string `json:"containers"`
	} `json:"sidecar"`
	KS     []sidecarKS `json:"ks"`
	KSNote string      `json:"ksNote"`
	Error  string      `json:"error"`
}

type sidecarKS struct {
	Metric    string  `json:"metric"`
	Sample    string  `json:"sample"`
	D         float64 `json:"d"`
	P         float64 `json:"p"`
	N1        uint64  `json:"n1"`
	N2        uint64  `json:"n2"`
	Different bool    `json:"different"`
}
