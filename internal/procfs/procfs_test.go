package procfs

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestStartTime(t *testing.T) {
	st, err := StartTime(os.Getpid())
	if err != nil || st == 0 {
		t.Fatalf("StartTime(self) = %d, %v", st, err)
	}
	if !Alive(os.Getpid(), st) || Alive(os.Getpid(), st+1) {
		t.Error("Alive does not tell this process by its start time")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := StartTime(cmd.Process.Pid); err == nil {
		t.Error("a process that exited (and was waited for) has a start time")
	}
}

// A process that exited but is not reaped yet (a zombie) is not alive, though
// it still has its pid and start time.
func TestAliveZombie(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	pid := cmd.Process.Pid
	st, err := StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, state, err := stat(pid); err != nil {
			t.Fatal(err)
		} else if state == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not exit")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s, _ := StartTime(pid); s != st {
		t.Fatalf("zombie's start time %d, was %d", s, st)
	}
	if Alive(pid, st) {
		t.Error("a zombie counts as alive")
	}
	if Running(pid) {
		t.Error("a zombie counts as running")
	}
	if !Running(os.Getpid()) {
		t.Error("this process does not count as running")
	}
}

func TestParseSchedstat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Schedstat
		err  bool
	}{
		{"123 4567 89\n", Schedstat{Run: 123, Wait: 4567, Slices: 89}, false},
		{"0 0 0", Schedstat{}, false},
		{"123", Schedstat{}, true},
		{"123 4567", Schedstat{}, true},
		{"123 -4 5", Schedstat{}, true},
		{"123 x 5", Schedstat{}, true},
		{"99999999999999999999 1 1", Schedstat{}, true}, // beyond a Duration
		{"", Schedstat{}, true},
	} {
		got, err := ParseSchedstat([]byte(tc.in))
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("ParseSchedstat(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// A thread that spins has run, and has been given a CPU at least once, as
// the listing of all this process's threads says too (a Go test process has
// several); a thread or process that does not exist has no statistics.
func TestThreadSchedstat(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skipf("no /proc: %v", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	for deadline := time.Now().Add(20 * time.Millisecond); time.Now().Before(deadline); {
	}
	st, err := ThreadSchedstat(tid)
	if err != nil {
		t.Fatal(err)
	}
	if st.Run <= 0 || st.Slices == 0 {
		t.Errorf("a spinning thread's schedstat %+v", st)
	}
	if _, err := ThreadSchedstat(1 << 30); err == nil {
		t.Error("schedstat of a thread that does not exist")
	}
	all, err := TaskSchedstats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 2 || all[tid].Run < st.Run || all[tid].Slices < st.Slices {
		t.Errorf("TaskSchedstats(self) = %d threads, this one %+v (read before: %+v)", len(all), all[tid], st)
	}
	if _, err := TaskSchedstats(1 << 30); err == nil {
		t.Error("schedstat of a process that does not exist")
	}
}

// TestAge: this process started before now and after the system did; a
// child started now is younger than this process.
func TestAge(t *testing.T) {
	self, err := Age(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self < 0 || self > 24*time.Hour {
		t.Fatalf("this process's age %v", self)
	}
	if _, err := Age(1 << 30); err == nil {
		t.Error("no error for a pid that does not exist")
	}
}

func TestParseNodeCPU(t *testing.T) {
	b := []byte("cpu  100 2 30 4000 5 6 7 80 0 0\ncpu0 50 1 15 2000 2 3 3 40 0 0\n")
	got, err := parseNodeCPU(b, []int{StatSteal})
	if err != nil || got != 800*time.Millisecond {
		t.Errorf("steal = %v, %v; want 800ms", got, err)
	}
	if got, err := parseNodeCPU(b, []int{StatUser, StatSystem}); err != nil || got != 1300*time.Millisecond {
		t.Errorf("user+system = %v, %v; want 1.3s", got, err)
	}
	for _, bad := range []string{"", "intr 1 2 3\n", "cpu 1 2 3\n", "cpu 1 2 3 4 5 6 7 x\n"} {
		if _, err := parseNodeCPU([]byte(bad), []int{StatSteal}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := NodeCPU(StatSteal); err != nil {
		t.Errorf("this machine's /proc/stat: %v", err)
	}
}

func TestNodeCPUSums(t *testing.T) {
	got, err := NodeCPUSums([]int{StatSteal}, []int{StatUser, StatSystem})
	if err != nil || len(got) != 2 || got[1] <= 0 {
		t.Fatalf("NodeCPUSums = %v, %v; want steal and a positive user+system", got, err)
	}
	if _, err := NodeCPUSums([]int{StatSteal}, []int{99}); err == nil {
		t.Error("a column past the line: no error")
	}
}
