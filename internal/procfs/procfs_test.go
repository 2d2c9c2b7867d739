package procfs

import (
	"os"
	"os/exec"
	"testing"
	"time"
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
