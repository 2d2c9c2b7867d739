package mesh

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestParseFault(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Fault
		err  bool
	}{
		{in: "lock@E", want: Fault{Name: "lock", Service: "E"}},
		{in: "net-delay@B=50ms", want: Fault{Name: "net-delay", Service: "B", Amount: "50ms"}},
		{in: "cpu-throttle@C=20%", want: Fault{Name: "cpu-throttle", Service: "C", Amount: "20%"}},
		{in: "memory-pressure@j", want: Fault{Name: "memory-pressure", Service: "j"}},
		{in: "memory-pressure@j=16MB", want: Fault{Name: "memory-pressure", Service: "j", Amount: "16MB"}},
		{in: "none", want: Fault{Name: "none"}},
		{in: "none@E", err: true},
		{in: "none=10m", want: Fault{Name: "none", Amount: "10m"}},
		{in: "none=x", err: true},
		{in: "nonesuch@E", err: true},
		{in: "lock", err: true},
		{in: "@E", err: true},
		{in: "boom@E", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseFault(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("ParseFault(%q) = %+v, %v", tc.in, got, err)
			}
			if err == nil && got.String() != tc.in {
				t.Errorf("String() = %q", got.String())
			}
		})
	}
}

func TestParseAmounts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
	}{{"20%", 0.2}, {"0.5", 0.5}, {"250m", 0.25}, {"2", 2}} {
		if got, err := parseCPUs(tc.in); err != nil || got != tc.want {
			t.Errorf("parseCPUs(%q) = %v, %v", tc.in, got, err)
		}
	}
	for _, bad := range []string{"", "x", "-1", "0%"} {
		if _, err := parseCPUs(bad); err == nil {
			t.Errorf("parseCPUs(%q) accepted", bad)
		}
	}
	for _, tc := range []struct {
		in   string
		want float64
	}{{"1mbit", 125000}, {"8kbit", 1000}, {"2mbps", 2e6}, {"1gbit", 125e6}, {"800bit", 100}} {
		if got, err := parseRate(tc.in); err != nil || got != tc.want {
			t.Errorf("parseRate(%q) = %v, %v", tc.in, got, err)
		}
	}
	for _, bad := range []string{"", "fast", "1 mbit", "mbit", "-1mbit"} {
		if _, err := parseRate(bad); err == nil {
			t.Errorf("parseRate(%q) accepted", bad)
		}
	}
	for _, tc := range []struct {
		in   string
		want int64
	}{{"8MB", 8 << 20}, {"16m", 16 << 20}, {"512KB", 512 << 10}, {"1G", 1 << 30}, {"1.5MB", 3 << 19}, {"4096", 4096}} {
		if got, err := parseBytes(tc.in); err != nil || got != tc.want {
			t.Errorf("parseBytes(%q) = %v, %v", tc.in, got, err)
		}
	}
	for _, bad := range []string{"", "MB", "-8MB", "0", "lots"} {
		if _, err := parseBytes(bad); err == nil {
			t.Errorf("parseBytes(%q) accepted", bad)
		}
	}
}

// TestCleanupStale removes what a killed mesh would leave: a namespace with
// a process in it, links, a cgroup.
func TestCleanupStale(t *testing.T) {
	requireRoot(t)
	const prefix = "rlts"
	ctx := context.Background()
	for _, argv := range [][]string{
		{"ip", "netns", "add", prefix + "-x-0"},
		{"ip", "link", "add", prefix + "-br0", "type", "bridge"},
		{"ip", "link", "add", prefix + "-v0", "type", "veth", "peer", "name", "eth0", "netns", prefix + "-x-0"},
	} {
		if err := run(ctx, "", argv...); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll("/etc/netns/"+prefix+"-x-0", 0o755)
	sleeper := exec.Command("ip", "netns", "exec", prefix+"-x-0", "sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	// ip execs sleep once it is inside the namespace.
	for i := 0; i < 100; i++ {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", sleeper.Process.Pid)); string(comm) == "sleep\n" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cg, err := newCgroups(cgroupName(prefix), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cg.addService("x"); err != nil {
		t.Fatal(err)
	}
	if err := Cleanup(prefix, nil); err != nil {
		t.Fatal(err)
	}
	assertClean(t, prefix)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Error("the process in the stale namespace still runs")
	}
}

// TestExpectedCause: every fault the suite injects has the cause its
// mechanism makes, and those with none the kernel measures have "".
func TestExpectedCause(t *testing.T) {
	for _, tc := range []struct{ name, lang, want string }{
		{FaultLock, "python", "lock"}, {FaultCPUThrottle, "go", "cpu-throttle"}, {FaultCPUHog, "java", "cpu-throttle"},
		{FaultNetBandwidth, "go", "network"}, {FaultNetDelay, "java", "network"}, {FaultDisk, "python", "disk"},
		{FaultCPU, "go", "cpu"}, {FaultGC, "java", "gc"}, {FaultGC, "go", "cpu"}, {FaultGC, "python", "cpu"},
		{FaultSlowDownstream, "go", ""}, {FaultNone, "", ""}, {FaultMemory, "python", "memory"},
	} {
		if got := ExpectedCause(tc.name, tc.lang); got != tc.want {
			t.Errorf("ExpectedCause(%s, %s) = %q, want %q", tc.name, tc.lang, got, tc.want)
		}
	}
	for _, n := range FaultNames() {
		if n != FaultSlowDownstream && ExpectedCause(n, "java") == "" {
			t.Errorf("fault %s has no expected cause", n)
		}
	}
}
