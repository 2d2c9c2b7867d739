//go:build linux && amd64

package supervisor

import (
	"testing"

	"golang.org/x/sys/unix"
)

func newTestTask() *Task {
	return &Task{Tid: 10, Tgid: 10, files: newFDTable(), inbound: map[int]bool{}}
}

// step feeds one syscall through the bookkeeping as the tracing loop does.
func step(t *Task, nr int, fd int, ret int64) {
	sc := &Syscall{Nr: nr, Args: [6]uint64{uint64(fd)}}
	if t.trackEnter(sc) {
		sc.Ret = ret
		t.trackExit(sc)
	}
}

func TestThreadStates(t *testing.T) {
	task := newTestTask()
	for _, tc := range []struct {
		name  string
		nr    int
		fd    int
		ret   int64
		state ThreadState
	}{
		{"accept registers inbound", unix.SYS_ACCEPT4, 3, 5, WaitingRequest},
		{"read of a file ignored", unix.SYS_READ, 4, 10, WaitingRequest},
		{"request read", unix.SYS_RECVFROM, 5, 100, Servicing},
		{"outbound connect", unix.SYS_CONNECT, 6, 0, Servicing},
		{"outbound write", unix.SYS_WRITE, 6, 10, Servicing},
		{"response written", unix.SYS_SENDMSG, 5, 50, WaitingRequest},
		{"read blocked then EOF", unix.SYS_READ, 5, 0, WaitingRequest},
		{"close last inbound", unix.SYS_CLOSE, 5, 0, Idle},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step(task, tc.nr, tc.fd, tc.ret)
			if task.State != tc.state {
				t.Errorf("state %v, want %v", task.State, tc.state)
			}
		})
	}
	if k := task.FD(6); k != FDOutbound {
		t.Errorf("fd 6 is %v", k)
	}
	if k := task.FD(5); k != FDUnknown {
		t.Errorf("closed fd 5 is %v", k)
	}
}

func TestChildInheritance(t *testing.T) {
	for _, tc := range []struct {
		name       string
		flags      uint64
		sameTgid   bool
		sharedFile bool
	}{
		{"thread", unix.CLONE_THREAD | unix.CLONE_FILES | unix.CLONE_VM, true, true},
		{"fork", 0, false, false},
		{"clone sharing files", unix.CLONE_FILES, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestTask()
			step(p, unix.SYS_ACCEPT, 3, 7)
			step(p, unix.SYS_READ, 7, 20)
			p.Context = "trace-1"
			c := p.child(11, tc.flags)
			if c.State != Servicing || c.ServicingFD != 7 || c.Context != "trace-1" || c.ParentTid != 10 {
				t.Errorf("child did not inherit the servicing context: %+v", c)
			}
			if (c.Tgid == p.Tgid) != tc.sameTgid {
				t.Errorf("tgid %d", c.Tgid)
			}
			step(c, unix.SYS_CONNECT, 8, 0)
			if (p.FD(8) == FDOutbound) != tc.sharedFile {
				t.Errorf("fd table sharing: parent sees fd 8 as %v", p.FD(8))
			}
			if c.FD(7) != FDInbound {
				t.Errorf("child lost inbound fd 7")
			}
		})
	}
}
