package mesh

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/procfs"
)

// TestAdoptInfra moves a process into the infrastructure pod and back: in
// the pod its cpu cgroup is <mesh>/rootline-system with a pod's default
// weight; Close's release puts it back where it was, so removing the
// cgroups leaves it running (rmCgroup kills what it finds).
func TestAdoptInfra(t *testing.T) {
	bpftest.RequireRoot(t, "cgroups")
	name := fmt.Sprintf("rootline-test-infra-%d", os.Getpid())
	cg, err := newCgroups(name, slog.Default())
	if err != nil {
		bpftest.Missing(t, "cgroups: "+err.Error())
	}
	m := &Mesh{cg: cg, log: slog.Default(), services: []ServiceState{{Name: "a"}}}
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	root := cg.cpu
	if root == "" {
		root = cg.v2
	}
	before, err := cpuCgroupOf(sleeper.Process.Pid, root, cg.cpu == "")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AdoptInfra(sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	in, err := cpuCgroupOf(sleeper.Process.Pid, root, cg.cpu == "")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, name, InfraPod); in != want {
		t.Fatalf("adopted process's cpu cgroup = %s, want %s", in, want)
	}
	weight, file := "1024", "cpu.shares"
	if cg.cpu == "" {
		weight, file = "100", "cpu.weight"
	}
	if b, err := os.ReadFile(filepath.Join(in, file)); err != nil || strings.TrimSpace(string(b)) != weight {
		t.Errorf("%s of the pod = %q (%v), want %s", file, b, err, weight)
	}
	m.releaseInfra()
	if err := cg.remove(); err != nil {
		t.Fatal(err)
	}
	after, err := cpuCgroupOf(sleeper.Process.Pid, root, cg.cpu == "")
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("released process's cpu cgroup = %s, want %s (where it was)", after, before)
	}
	if !procfs.Running(sleeper.Process.Pid) {
		t.Errorf("the released process did not survive the pod's removal")
	}
	// A service of the pod's name is refused.
	m2 := &Mesh{cg: &cgroups{name: name, cpu: cg.cpu, v2: cg.v2}, services: []ServiceState{{Name: InfraPod}}}
	if err := m2.AdoptInfra(sleeper.Process.Pid); err == nil || !strings.Contains(err.Error(), InfraPod) {
		t.Errorf("AdoptInfra with a service named %s: %v, want an error naming it", InfraPod, err)
	}
}
