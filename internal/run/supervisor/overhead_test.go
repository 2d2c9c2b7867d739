//go:build linux && amd64

package supervisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file measures the per-syscall cost of the two interception designs
// (see doc.go for the numbers and the decision):
//
//	go test -run '^$' -bench SyscallOverhead -benchtime 1x ./internal/run/supervisor/
//
// The user-notification variant is only a prototype: a launcher installs a
// SECCOMP_RET_USER_NOTIF filter with SECCOMP_FILTER_FLAG_NEW_LISTENER, sends
// the listener fd to the supervisor over a unix socket (SCM_RIGHTS) and
// execs the command; the supervisor answers every notification with
// SECCOMP_USER_NOTIF_FLAG_CONTINUE.

const notifLauncherEnv = "ROOTLINE_SUPERVISOR_NOTIF_TEST"

const benchN = 200000

// notifSyscalls is TracedSyscalls without sendmsg, which the launcher needs
// after the filter is installed to hand over the listener.
func notifSyscalls() []uint32 {
	var nrs []uint32
	for _, nr := range TracedSyscalls {
		if nr != unix.SYS_SENDMSG {
			nrs = append(nrs, nr)
		}
	}
	return nrs
}

// maybeNotifLauncher is the launcher of the prototype; fd 3 is the socket.
func maybeNotifLauncher() {
	if os.Getenv(notifLauncherEnv) != "1" {
		return
	}
	runtime.LockOSThread()
	os.Unsetenv(notifLauncherEnv)
	err := func() error {
		path, err := exec.LookPath(os.Args[1])
		if err != nil {
			return err
		}
		lfd, err := installFilter(buildFilter(notifSyscalls(), unix.SECCOMP_RET_USER_NOTIF), unix.SECCOMP_FILTER_FLAG_NEW_LISTENER)
		if err != nil {
			return err
		}
		if err := unix.Sendmsg(3, []byte{0}, unix.UnixRights(lfd), nil, 0); err != nil {
			return err
		}
		return syscall.Exec(path, os.Args[1:], os.Environ())
	}()
	fmt.Fprintln(os.Stderr, "notif launcher:", err)
	os.Exit(127)
}

// struct seccomp_notif and seccomp_notif_resp (include/uapi/linux/seccomp.h).
type seccompNotif struct {
	id    uint64
	pid   uint32
	flags uint32
	nr    int32
	arch  uint32
	ip    uint64
	args  [6]uint64
}

type seccompNotifResp struct {
	id    uint64
	val   int64
	error int32
	flags uint32
}

// serveNotif continues every notification until the filter has no users.
func serveNotif(lfd int) (int, error) {
	count := 0
	for {
		pfd := []unix.PollFd{{Fd: int32(lfd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, 1000); err != nil && err != unix.EINTR {
			return count, err
		}
		if pfd[0].Revents&unix.POLLHUP != 0 {
			return count, nil
		}
		if pfd[0].Revents&unix.POLLIN == 0 {
			continue
		}
		var n seccompNotif
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(lfd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n))); e != 0 {
			if e == unix.EINTR || e == unix.ENOENT {
				continue
			}
			return count, e
		}
		count++
		r := seccompNotifResp{id: n.id, flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(lfd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&r))); e != 0 && e != unix.ENOENT {
			return count, e
		}
	}
}

func runNotif(argv []string, stdout *os.File) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	parent := os.NewFile(uintptr(fds[0]), "notif-parent")
	child := os.NewFile(uintptr(fds[1]), "notif-child")
	defer parent.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, argv...)
	cmd.Env = append(os.Environ(), notifLauncherEnv+"=1")
	cmd.Stdout, cmd.Stderr = stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{child}
	if err := cmd.Start(); err != nil {
		return err
	}
	child.Close()
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(fds[0], make([]byte, 1), oob, 0)
	if err != nil {
		return err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return fmt.Errorf("no listener fd: %v", err)
	}
	lfds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		_, err := serveNotif(lfds[0])
		served <- err
	}()
	werr := cmd.Wait()
	serr := <-served
	unix.Close(lfds[0])
	if werr != nil {
		return werr
	}
	return serr
}

func parseBench(b *testing.B, path string) (writeNs, getpidNs float64) {
	out, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := fmt.Sscanf(string(out), "write_ns=%g getpid_ns=%g", &writeNs, &getpidNs); err != nil {
		b.Fatalf("bench output %q: %v", out, err)
	}
	return writeNs, getpidNs
}

func BenchmarkSyscallOverhead(b *testing.B) {
	argv := []string{traceeBin, "bench", fmt.Sprint(benchN)}
	for _, mode := range []string{"native", "ptrace", "ptrace-exit", "notif"} {
		b.Run(mode, func(b *testing.B) {
			var w, g float64
			for range b.N {
				out, err := os.CreateTemp(b.TempDir(), "out")
				if err != nil {
					b.Fatal(err)
				}
				switch mode {
				case "native":
					cmd := exec.Command(argv[0], argv[1:]...)
					cmd.Stdout = out
					err = cmd.Run()
				case "ptrace":
					var code int
					code, err = Run(context.Background(), Config{Stdout: out}, argv, Hooks{})
					if err == nil && code != 0 {
						err = fmt.Errorf("exit %d", code)
					}
				case "ptrace-exit":
					// Both stops of every call, as reading a request needs.
					var code int
					code, err = Run(context.Background(), Config{Stdout: out}, argv,
						Hooks{OnSyscallEnter: func(*Task, *Syscall) bool { return true }})
					if err == nil && code != 0 {
						err = fmt.Errorf("exit %d", code)
					}
				case "notif":
					err = runNotif(argv, out)
				}
				out.Close()
				if err != nil {
					b.Skipf("%s unavailable: %v", mode, err)
				}
				wi, gi := parseBench(b, out.Name())
				w += wi
				g += gi
			}
			b.ReportMetric(w/float64(b.N)/1000, "µs/write")
			b.ReportMetric(g/float64(b.N)/1000, "µs/getpid")
		})
	}
}
