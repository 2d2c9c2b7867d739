//go:build linux && amd64

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Config configures Run. The zero value is usable.
type Config struct {
	// Logger receives the supervisor's rare log lines; nil discards them.
	Logger *slog.Logger
	// Launcher is the binary re-executed as launcher (it MUST call
	// MaybeLauncher first); empty means the running executable.
	Launcher string
	// Env is the command's environment; nil keeps the supervisor's.
	Env []string
	// Dir is the command's working directory; empty keeps the current one.
	Dir string
	// Stdin, Stdout and Stderr default to the supervisor's.
	Stdin, Stdout, Stderr *os.File
	// Untraced lists calls of TracedSyscalls the filter leaves out (they
	// run at native speed and reach no hook), e.g. read and recvfrom when
	// another mechanism observes them. The per-thread request-cycle State is not
	// advanced by calls left out.
	Untraced []int
	// CancelGrace is how long Run waits after sending SIGTERM on context
	// cancellation before sending SIGKILL; zero means 5s.
	CancelGrace time.Duration
}

// Hooks are called on the supervisor's tracing thread while the task is
// stopped; they MUST NOT block for long, as the task waits. Nil fields are
// skipped. A panicking hook is logged once and all hooks are disabled: the
// command keeps running, traced without hooks (fail open).
type Hooks struct {
	// OnSyscallEnter is called at the entry of a traced syscall; returning
	// true requests OnSyscallExit for this call.
	OnSyscallEnter func(t *Task, sc *Syscall) (wantExit bool)
	// OnSyscallExit is called at the exit of a call, with sc.Ret set, when
	// OnSyscallEnter asked for it (the supervisor may stop at more exits
	// for its own bookkeeping; those are reported too).
	OnSyscallExit func(t *Task, sc *Syscall)
	// OnTaskStart is called when a new thread or process is followed; the
	// new task may not have stopped yet, so only its fields may be used.
	OnTaskStart func(t *Task)
	// OnTaskExit is called when a task has exited; status is its wait status.
	OnTaskExit func(t *Task, status unix.WaitStatus)
	// OnExec is called after a task executed a new program.
	OnExec func(t *Task)
	// OnBreakpoint is called when a task stops with SIGTRAP outside a
	// ptrace event (e.g. at an int3 the hooks placed), with its registers;
	// returning true means the hook handled it (and set the registers to
	// continue), so the signal is not delivered.
	OnBreakpoint func(t *Task, regs *unix.PtraceRegs) bool
}

// ErrNoCommand is returned by Run for an empty argv.
var ErrNoCommand = errors.New("supervisor: no command")

type supervisor struct {
	cfg     Config
	log     *slog.Logger
	hooks   Hooks
	mainPid int
	tasks   map[int]*Task
	orphans map[int]bool // new tasks stopped before their parent's event
	code    int
}

// Run runs argv as a traced command and returns its exit status (128+signal
// when killed), after every traced task has exited. SIGINT and SIGTERM
// received by the supervisor are forwarded to the command. Cancelling ctx
// sends SIGTERM, then SIGKILL after Config.CancelGrace; tracees are not
// detached, because with a SECCOMP_RET_TRACE filter and no tracer the
// filtered syscalls fail with ENOSYS (see the package doc).
func Run(ctx context.Context, cfg Config, argv []string, hooks Hooks) (int, error) {
	if len(argv) == 0 {
		return -1, ErrNoCommand
	}
	if cfg.Launcher == "" {
		exe, err := os.Executable()
		if err != nil {
			return -1, fmt.Errorf("supervisor: launcher: %w", err)
		}
		cfg.Launcher = exe
	}
	if cfg.CancelGrace == 0 {
		cfg.CancelGrace = 5 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &supervisor{cfg: cfg, log: log.With("component", "supervisor"), hooks: hooks,
		tasks: map[int]*Task{}, orphans: map[int]bool{}}

	type result struct {
		code int
		err  error
	}
	started := make(chan error, 1)
	done := make(chan result, 1)
	go func() {
		// Every ptrace request must come from the thread that is the
		// tracer. The thread is never unlocked, so it exits with the
		// goroutine rather than returning to the scheduler.
		runtime.LockOSThread()
		code, err := s.run(argv, started)
		done <- result{code, err}
	}()
	if err := <-started; err != nil {
		r := <-done
		return r.code, r.err
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctxDone := ctx.Done()
	var killTimer <-chan time.Time
	for {
		select {
		case r := <-done:
			return r.code, r.err
		case sig := <-sigs:
			_ = unix.Kill(s.mainPid, sig.(syscall.Signal))
		case <-ctxDone:
			ctxDone = nil
			_ = unix.Kill(s.mainPid, unix.SIGTERM)
			killTimer = time.After(cfg.CancelGrace)
		case <-killTimer:
			_ = unix.Kill(s.mainPid, unix.SIGKILL)
		}
	}
}

func (s *supervisor) run(argv []string, started chan<- error) (int, error) {
	env := s.cfg.Env
	if env == nil {
		env = os.Environ()
	}
	env = append(env[:len(env):len(env)], launcherEnv+"=1")
	if len(s.cfg.Untraced) > 0 {
		nrs := make([]string, len(s.cfg.Untraced))
		for i, nr := range s.cfg.Untraced {
			nrs[i] = strconv.Itoa(nr)
		}
		env = append(env, untracedEnv+"="+strings.Join(nrs, ","))
	}
	files := []*os.File{s.cfg.Stdin, s.cfg.Stdout, s.cfg.Stderr}
	for i, def := range []*os.File{os.Stdin, os.Stdout, os.Stderr} {
		if files[i] == nil {
			files[i] = def
		}
	}
	proc, err := os.StartProcess(s.cfg.Launcher, append([]string{s.cfg.Launcher}, argv...), &os.ProcAttr{
		Dir: s.cfg.Dir, Env: env, Files: files,
		Sys: &syscall.SysProcAttr{Ptrace: true},
	})
	if err != nil {
		err = fmt.Errorf("supervisor: start: %w", err)
		started <- err
		return -1, err
	}
	pid := proc.Pid
	_ = proc.Release() // the tracing loop reaps it
	s.mainPid = pid

	// PTRACE_TRACEME stops the launcher with SIGTRAP after its exec.
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil || !ws.Stopped() {
		_ = unix.Kill(pid, unix.SIGKILL)
		err = fmt.Errorf("supervisor: launcher did not stop (status %#x): %v", ws, err)
		started <- err
		return -1, err
	}
	// No PTRACE_O_EXITKILL: if the supervisor dies the command is not killed
	// (though its traced syscalls then fail, see the package doc).
	opts := unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_TRACESECCOMP | unix.PTRACE_O_TRACECLONE |
		unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK | unix.PTRACE_O_TRACEEXEC
	if err := unix.PtraceSetOptions(pid, opts); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
		err = fmt.Errorf("supervisor: PTRACE_SETOPTIONS: %w", err)
		started <- err
		return -1, err
	}
	t := &Task{Tid: pid, Tgid: pid, files: newFDTable(), inbound: map[int]bool{}}
	s.tasks[pid] = t
	s.call(func() { s.hooks.OnTaskStart(t) }, s.hooks.OnTaskStart != nil)
	started <- nil
	s.resume(t, 0)
	s.loop()
	return s.code, nil
}

func (s *supervisor) loop() {
	for len(s.tasks) > 0 || len(s.orphans) > 0 {
		if len(s.tasks) == 0 {
			// The parents of the parked tasks are gone without reporting
			// them; follow them with what little is known.
			for tid := range s.orphans {
				t := &Task{Tid: tid, Tgid: tid, files: newFDTable(), inbound: map[int]bool{}}
				s.tasks[tid] = t
				delete(s.orphans, tid)
				s.resume(t, 0)
			}
		}
		var ws unix.WaitStatus
		tid, err := unix.Wait4(-1, &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			if err != unix.ECHILD {
				s.log.Error("wait4", "err", err)
			}
			return
		}
		t := s.tasks[tid]
		if t == nil {
			if ws.Stopped() {
				// A new task's first stop can arrive before its parent's
				// clone/fork event: park it until the event tells who it is.
				s.orphans[tid] = true
			}
			continue
		}
		switch {
		case ws.Exited() || ws.Signaled():
			s.exit(t, ws)
		case ws.Stopped():
			s.stopped(t, ws)
		}
	}
}

func (s *supervisor) exit(t *Task, ws unix.WaitStatus) {
	delete(s.tasks, t.Tid)
	if t.Tid == s.mainPid {
		if ws.Exited() {
			s.code = ws.ExitStatus()
		} else {
			s.code = 128 + int(ws.Signal())
		}
	}
	s.call(func() { s.hooks.OnTaskExit(t, ws) }, s.hooks.OnTaskExit != nil)
}

func (s *supervisor) stopped(t *Task, ws unix.WaitStatus) {
	sig := ws.StopSignal()
	switch {
	case sig == unix.SIGTRAP|0x80:
		s.syscallExit(t)
	case sig == unix.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_SECCOMP:
		s.syscallEnter(t)
	case sig == unix.SIGTRAP && (ws.TrapCause() == unix.PTRACE_EVENT_CLONE ||
		ws.TrapCause() == unix.PTRACE_EVENT_FORK || ws.TrapCause() == unix.PTRACE_EVENT_VFORK):
		msg, err := unix.PtraceGetEventMsg(t.Tid)
		if err == nil {
			flags := t.cloneFlags
			if ws.TrapCause() != unix.PTRACE_EVENT_CLONE {
				flags &^= unix.CLONE_THREAD | unix.CLONE_FILES
			}
			c := t.child(int(msg), flags)
			s.tasks[c.Tid] = c
			s.call(func() { s.hooks.OnTaskStart(c) }, s.hooks.OnTaskStart != nil)
			if s.orphans[c.Tid] {
				delete(s.orphans, c.Tid)
				c.fresh = false
				s.resume(c, 0)
			}
		}
		s.resume(t, 0)
	case sig == unix.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_EXEC:
		s.exec(t)
	case sig == unix.SIGTRAP && ws.TrapCause() > 0:
		s.resume(t, 0) // other events (PTRACE_EVENT_STOP with SEIZE)
	case t.fresh && sig == unix.SIGSTOP:
		t.fresh = false
		s.resume(t, 0)
	case sig == unix.SIGTRAP && s.hooks.OnBreakpoint != nil:
		var regs unix.PtraceRegs
		handled := false
		if err := unix.PtraceGetRegs(t.Tid, &regs); err == nil {
			s.call(func() { handled = s.hooks.OnBreakpoint(t, &regs) }, true)
		}
		if handled {
			s.resume(t, 0)
		} else {
			s.resume(t, sig)
		}
	default:
		// Signal-delivery-stop: inject the signal. A group-stop (stopping
		// signal with no siginfo) is resumed too, so job control stops
		// are not honoured while traced (that needs PTRACE_SEIZE and
		// PTRACE_LISTEN).
		if sig == unix.SIGSTOP || sig == unix.SIGTSTP || sig == unix.SIGTTIN || sig == unix.SIGTTOU {
			var si unix.Siginfo
			if err := ptraceGetSiginfo(t.Tid, &si); err == unix.EINVAL {
				s.resume(t, 0)
				return
			}
		}
		s.resume(t, sig)
	}
}

func (s *supervisor) exec(t *Task) {
	former, err := unix.PtraceGetEventMsg(t.Tid)
	if err == nil && int(former) != t.Tid {
		// A non-leader thread executed: it took over the leader's tid and
		// every other thread of the process is gone.
		if old := s.tasks[int(former)]; old != nil {
			delete(s.tasks, int(former))
			old.Tid = t.Tid
			s.tasks[t.Tid] = old
			t = old
		}
	}
	for tid, o := range s.tasks {
		if o.Tgid == t.Tgid && tid != t.Tid {
			delete(s.tasks, tid)
		}
	}
	// execve unshares the descriptor table; close-on-exec fds are not
	// known here and stay classified until reused.
	t.files = t.files.clone()
	t.State, t.Context, t.pending = Idle, nil, nil
	t.inbound = map[int]bool{}
	s.call(func() { s.hooks.OnExec(t) }, s.hooks.OnExec != nil)
	s.resume(t, 0)
}

func (s *supervisor) syscallEnter(t *Task) {
	var regs unix.PtraceRegs
	if err := unix.PtraceGetRegs(t.Tid, &regs); err != nil {
		s.resume(t, 0)
		return
	}
	sc := &Syscall{Nr: int(regs.Orig_rax),
		Args: [6]uint64{regs.Rdi, regs.Rsi, regs.Rdx, regs.R10, regs.R8, regs.R9}, Regs: &regs}
	want := t.trackEnter(sc)
	if s.hooks.OnSyscallEnter != nil {
		s.call(func() {
			if s.hooks.OnSyscallEnter(t, sc) {
				want = true
			}
		}, true)
	}
	if t.gone != nil { // reaped inside the hook
		s.exit(t, *t.gone)
		return
	}
	if t.restart { // the call re-executes and stops at its entry again
		t.restart = false
		s.resume(t, 0)
		return
	}
	if want && sc.Nr != unix.SYS_EXIT && sc.Nr != unix.SYS_EXIT_GROUP {
		t.pending = sc
	}
	s.resume(t, 0)
}

func (s *supervisor) syscallExit(t *Task) {
	sc := t.pending
	t.pending = nil
	if sc == nil {
		s.resume(t, 0)
		return
	}
	var regs unix.PtraceRegs
	if err := unix.PtraceGetRegs(t.Tid, &regs); err == nil {
		sc.Ret = int64(regs.Rax)
		sc.Regs = &regs
		t.trackExit(sc)
		s.call(func() { s.hooks.OnSyscallExit(t, sc) }, s.hooks.OnSyscallExit != nil)
	}
	s.resume(t, 0)
}

// resume restarts a stopped task, asking for the syscall-exit stop when a
// call of the task is pending.
func (s *supervisor) resume(t *Task, sig unix.Signal) {
	var err error
	if t.pending != nil {
		err = unix.PtraceSyscall(t.Tid, int(sig))
	} else {
		err = unix.PtraceCont(t.Tid, int(sig))
	}
	// ESRCH: the task was killed while stopped; its exit is reported next.
	if err != nil && err != unix.ESRCH {
		s.log.Warn("resume", "tid", t.Tid, "err", err)
	}
}

// call runs a hook and disables all hooks if it panics: a bug in the
// observer must not take the service down.
func (s *supervisor) call(f func(), ok bool) {
	if !ok {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("hook panicked; hooks disabled, command continues untraced by hooks", "panic", r)
			s.hooks = Hooks{}
		}
	}()
	f()
}

func ptraceGetSiginfo(tid int, si *unix.Siginfo) error {
	_, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GETSIGINFO, uintptr(tid), 0, uintptr(unsafe.Pointer(si)), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
