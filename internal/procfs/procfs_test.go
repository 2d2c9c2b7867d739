package procfs

import (
	"os"
	"os/exec"
	"testing"
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
