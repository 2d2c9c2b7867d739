//go:build linux && amd64

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/bpftest"
)

var traceeBin string

func TestMain(m *testing.M) {
	// The test binary is its own launcher, like rootline's main.
	MaybeLauncher()
	maybeNotifLauncher()
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "supervisor-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	traceeBin = filepath.Join(dir, "tracee")
	build := exec.Command("go", "build", "-o", traceeBin, "./testdata/tracee")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building testdata/tracee:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		// Run must leave no goroutine behind (os/signal's is process-wide).
		if err := goleak.Find(goleak.IgnoreTopFunction("os/signal.signal_recv")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

var (
	traceOnce sync.Once
	traceErr  error
)

// requireTrace skips the test when this environment cannot ptrace with a
// seccomp filter, unless ROOTLINE_REQUIRE_BPF=1 says it must.
func requireTrace(t *testing.T) {
	t.Helper()
	traceOnce.Do(func() {
		code, err := Run(context.Background(), Config{}, []string{"true"}, Hooks{})
		if err == nil && code != 0 {
			err = fmt.Errorf("traced true exited %d", code)
		}
		traceErr = err
	})
	if traceErr != nil {
		bpftest.Missing(t, fmt.Sprintf("ptrace+seccomp unavailable: %v", traceErr))
	}
}

// runCaptured runs argv traced with stdout captured.
func runCaptured(t *testing.T, ctx context.Context, argv []string, hooks Hooks) (int, string) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	code, err := Run(ctx, Config{Stdout: out}, argv, hooks)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	return code, string(b)
}

func TestExitCodes(t *testing.T) {
	requireTrace(t)
	for _, tc := range []struct {
		name string
		argv []string
		code int
		out  string
	}{
		{"shell", []string{"sh", "-c", "echo hi; exit 3"}, 3, "hi\n"},
		{"sigusr1 handled", []string{traceeBin, "usr1"}, 0, "got usr1\n"},
		{"sigkill", []string{traceeBin, "sigkill"}, 128 + 9, ""},
		{"missing command", []string{"/nonexistent/cmd"}, 127, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runCaptured(t, context.Background(), tc.argv, Hooks{})
			if code != tc.code || out != tc.out {
				t.Errorf("got code %d, stdout %q; want %d, %q", code, out, tc.code, tc.out)
			}
		})
	}
}

type taskInfo struct {
	tgid, parent int
	syscalls     int
}

type fdSeen struct {
	pid, fd int
}

func TestFollowsThreadsChildrenAndFDs(t *testing.T) {
	requireTrace(t)
	tasks := map[int]*taskInfo{}
	kinds := map[fdSeen]FDKind{}
	servicedWrite := map[fdSeen]bool{} // a write on the fd while Servicing
	hooks := Hooks{
		OnTaskStart: func(task *Task) {
			tasks[task.Tid] = &taskInfo{tgid: task.Tgid, parent: task.ParentTid}
		},
		OnSyscallEnter: func(task *Task, sc *Syscall) bool {
			tasks[task.Tid].syscalls++
			if IsRead(sc.Nr) || IsWrite(sc.Nr) {
				k := fdSeen{task.Tgid, sc.FD()}
				kinds[k] = task.FD(sc.FD())
				if IsWrite(sc.Nr) && task.State == Servicing && task.ServicingFD == sc.FD() {
					servicedWrite[k] = true
				}
			}
			return false
		},
	}
	code, out := runCaptured(t, context.Background(), []string{traceeBin, "tree"}, hooks)
	if code != 0 {
		t.Fatalf("exit %d, out %q", code, out)
	}
	m := regexp.MustCompile(`(?s)thread=(\d+)\ninbound=(\d+) outbound=(\d+) pid=(\d+) resp="HTTP/1.1 200 OK\\r\\n"\nchild=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("unexpected output %q", out)
	}
	n := make([]int, len(m))
	for i := 1; i < len(m); i++ {
		n[i], _ = strconv.Atoi(m[i])
	}
	thread, inbound, outbound, pid, child := n[1], n[2], n[3], n[4], n[5]
	if pid != child {
		t.Fatalf("child reported pid %d, parent saw %d", pid, child)
	}
	var mainPid int
	for tid, ti := range tasks {
		if ti.parent == 0 {
			mainPid = tid
		}
	}
	if ti := tasks[thread]; ti == nil || ti.syscalls == 0 || ti.tgid != mainPid || ti.parent == 0 {
		t.Errorf("thread %d: %+v (main %d)", thread, ti, mainPid)
	}
	if ti := tasks[child]; ti == nil || ti.syscalls == 0 || ti.tgid != child || tasks[ti.parent] == nil || tasks[ti.parent].tgid != mainPid {
		t.Errorf("child %d: %+v", child, ti)
	}
	if k := kinds[fdSeen{child, inbound}]; k != FDInbound {
		t.Errorf("accepted fd %d classified %v", inbound, k)
	}
	if k := kinds[fdSeen{child, outbound}]; k != FDOutbound {
		t.Errorf("connected fd %d classified %v", outbound, k)
	}
	if !servicedWrite[fdSeen{child, inbound}] {
		t.Errorf("response on fd %d not written in state Servicing", inbound)
	}
}

func TestCancelTerminates(t *testing.T) {
	requireTrace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var pid int
	hooks := Hooks{OnSyscallEnter: func(task *Task, sc *Syscall) bool {
		if pid == 0 && task.ParentTid == 0 {
			pid = task.Tid
		}
		// Ask for the exit stop of the write of "sleeping": cancelling at its
		// entry could kill the tracee before the bytes are out.
		return sc.Nr == unix.SYS_WRITE && sc.FD() == 1
	}, OnSyscallExit: func(task *Task, sc *Syscall) {
		if sc.Nr == unix.SYS_WRITE && sc.FD() == 1 {
			cancel() // the tracee printed "sleeping"
		}
	}}
	code, out := runCaptured(t, ctx, []string{traceeBin, "sleep"}, hooks)
	if code != 128+int(unix.SIGTERM) || !strings.Contains(out, "sleeping") {
		t.Errorf("code %d out %q, want SIGTERM exit", code, out)
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Errorf("kill -0 %d: %v, want ESRCH", pid, err)
	}
}

func TestHookPanicFailsOpen(t *testing.T) {
	requireTrace(t)
	code, out := runCaptured(t, context.Background(), []string{"sh", "-c", "echo a; echo b"},
		Hooks{OnSyscallEnter: func(*Task, *Syscall) bool { panic("boom") }})
	if code != 0 || out != "a\nb\n" {
		t.Errorf("code %d out %q", code, out)
	}
}

// TestFilter runs the BPF program on synthetic seccomp_data.
func TestFilter(t *testing.T) {
	const action = unix.SECCOMP_RET_TRACE
	prog := buildFilter(TracedSyscalls, action)
	eval := func(arch, nr uint32) uint32 {
		var a uint32
		for pc := 0; pc < len(prog); pc++ {
			ins := prog[pc]
			switch ins.Code {
			case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
				if ins.K == seccompDataArch {
					a = arch
				} else {
					a = nr
				}
			case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
				if a == ins.K {
					pc += int(ins.Jt)
				} else {
					pc += int(ins.Jf)
				}
			case unix.BPF_RET | unix.BPF_K:
				return ins.K
			}
		}
		t.Fatal("fell off the program")
		return 0
	}
	for _, nr := range TracedSyscalls {
		if got := eval(unix.AUDIT_ARCH_X86_64, nr); got != action {
			t.Errorf("nr %d: %#x", nr, got)
		}
	}
	for _, nr := range []uint32{unix.SYS_GETPID, unix.SYS_MMAP, unix.SYS_EXECVE, unix.SYS_OPENAT} {
		if got := eval(unix.AUDIT_ARCH_X86_64, nr); got != unix.SECCOMP_RET_ALLOW {
			t.Errorf("nr %d: %#x", nr, got)
		}
	}
	if got := eval(unix.AUDIT_ARCH_I386, unix.SYS_WRITE); got != unix.SECCOMP_RET_ALLOW {
		t.Errorf("i386: %#x", got)
	}
}

func TestMemoryHelpers(t *testing.T) {
	requireTrace(t)
	var got string
	var wrote bool
	hooks := Hooks{OnSyscallEnter: func(task *Task, sc *Syscall) bool {
		if sc.Nr == unix.SYS_WRITE && sc.FD() == 1 && !wrote {
			buf := make([]byte, sc.Args[2])
			if n, err := task.ReadMem(uintptr(sc.Args[1]), buf); err == nil {
				got = string(buf[:n])
			}
			// Rewrite the tracee's buffer in place.
			_, _ = task.WriteMem(uintptr(sc.Args[1]), []byte("HELLO"))
			wrote = true
		}
		return false
	}}
	code, out := runCaptured(t, context.Background(), []string{"sh", "-c", "echo hello"}, hooks)
	if code != 0 || got != "hello\n" || out != "HELLO\n" {
		t.Errorf("code %d read %q out %q", code, got, out)
	}
}

// TestDetachedTraceeGetsENOSYS documents why Run never detaches: once the
// tracer is gone, every syscall the filter marks SECCOMP_RET_TRACE fails
// with ENOSYS, so a detached command cannot do I/O nor even exit: sh below
// prints "a" (the write under way at detach completes), then exit_group and
// exit fail and glibc's _exit falls through to hlt, a SIGSEGV.
func TestDetachedTraceeGetsENOSYS(t *testing.T) {
	requireTrace(t)
	detached := false
	hooks := Hooks{OnSyscallEnter: func(task *Task, sc *Syscall) bool {
		if sc.Nr == unix.SYS_WRITE && !detached {
			detached = true
			if err := unix.PtraceDetach(task.Tid); err != nil {
				t.Errorf("detach: %v", err)
			}
		}
		return false
	}}
	code, out := runCaptured(t, context.Background(), []string{"sh", "-c", "echo a && exit 0; exit 9"}, hooks)
	if code == 0 || out != "a\n" {
		t.Errorf("code %d out %q; want a failed exit", code, out)
	}
}
