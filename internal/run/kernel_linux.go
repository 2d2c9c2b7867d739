//go:build linux

package run

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/run/datapath"
	"github.com/rootline/rootline/internal/run/httpstream"
)

// runDatapath runs the command with the in-kernel datapath (no ptrace).
// started is false when the datapath could not be set up and nothing was
// run: the caller falls back to the supervisor.
func runDatapath(o Options, env []string, base *slog.Logger, sink Sink, stats *Stats, inflight *InFlight, stderr io.Writer) (code int, started bool, err error) {
	log := base.With("component", "run")
	dir, removeCgroup, err := datapath.NewCgroup(datapath.CgroupName())
	if err != nil {
		return 0, false, err
	}
	SweepDatapaths(log, new(bool)) // what killed runs left attached
	d, err := datapath.Open(datapath.Config{Cgroup: dir, RingBytes: o.RingBytes, Omit: uint32(o.Omit),
		LongTiming: o.Timing == httpstream.TimingLong})
	if err != nil {
		_ = removeCgroup()
		return 0, false, err
	}
	closeDatapath := func() {
		if err := d.Close(); err != nil {
			log.Warn("closing the eBPF datapath", "err", err)
		}
		if err := removeCgroup(); err != nil {
			log.Info("cgroup left behind (processes of the command still run in it)", "err", err)
		}
	}

	exe, lookErr := exec.LookPath(o.Argv[0])
	isGo := lookErr == nil && datapath.IsGo(exe)
	if isGo {
		// Before the start: the probes must be there for its first request.
		if ok, err := d.ProbeGo(exe); !ok {
			log.Info("Go program without net/http client probes: its outbound calls are not tied to requests", "err", err)
		}
	}

	spans := NewKernelSpans(KernelSpansConfig{Service: o.Service, Instance: o.Instance, Sink: sink,
		Logger: base, Stats: stats, InFlight: inflight})
	// The spans of each read go out in the same wake-up of the process.
	flush := func() {}
	if f, ok := sink.(interface{ Flush() }); ok {
		flush = f.Flush
	}
	readDone := make(chan error, 1)
	go func() {
		var kev KernelEvent
		// Spans leave for the server once a second (the shipper): reading
		// more often only costs wake-ups, ~10 a second per process in a
		// mesh of them. The programs wake the reader early on bursts.
		readDone <- d.Read(time.Second, func(ev *datapath.Event) {
			if ev.Type == datapath.EvExec {
				// A process of the run executed a program: a Go one gets
				// goroutine binding and probes.
				if path := string(ev.Head); datapath.IsGo(path) {
					spans.MarkGo(ev.Tgid)
					if _, err := d.AddGo(ev.Tgid, path); err != nil {
						log.Debug("Go probes", "exe", path, "err", err)
					}
				}
				return
			}
			kev = KernelEvent{Type: ev.Type, Flags: ev.Flags, Tgid: ev.Tgid, Tid: ev.Tid, Mono: ev.Mono,
				Conn: ev.Conn, TraceID: ev.TraceID, SpanID: ev.SpanID, ParentID: ev.ParentID, StartMono: ev.StartMono,
				Local: ev.Local, Sock: ev.SockWait, Net: ev.Net, Remote: ev.Remote, Server: ev.ServerTime, Status: ev.Status,
				Tids: ev.Tids, Peer: ev.Peer, Head: ev.Head}
			spans.Event(&kev)
		}, flush)
	}()

	cmd := exec.Command(o.Argv[0], o.Argv[1:]...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, os.Stdin, os.Stdout, os.Stderr
	cgfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil {
		// Born in the cgroup, so that every socket it makes is followed.
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cgfd}
	}
	err = cmd.Start()
	if cgfd >= 0 {
		unix.Close(cgfd)
	}
	if err != nil {
		closeDatapath()
		<-readDone
		var ee *exec.Error
		if errors.As(err, &ee) {
			// Not found or not executable: the shell's status for it.
			stderr.Write([]byte("rootline run: " + err.Error() + "\n"))
			return 127, true, nil
		}
		return 0, false, err
	}
	pid := cmd.Process.Pid
	if isGo {
		spans.MarkGo(pid)
		if err := d.MarkGo(pid); err != nil {
			log.Warn("Go binding", "err", err)
		}
	}
	log.Debug("tracing with the in-kernel datapath", "pid", pid, "cgroup", dir, "go", isGo, "shared", d.Shared())
	if d.SharedErr != nil {
		log.Info("the in-kernel datapath is this run's own, not the node's shared one", "reason", d.SharedErr)
	}
	if o.Agent != "" {
		go registerWithAgent(o, pid, log)
	}

	code = exitCode(waitForwarding(cmd))

	// The last spans end as the command's connections close (some as
	// their peers answer the FIN): let those arrive, then read everything
	// before detaching.
	time.Sleep(250 * time.Millisecond)
	d.Drain(2 * time.Second)
	st := d.Stats()
	closeDatapath()
	if err := <-readDone; err != nil {
		log.Warn("reading the eBPF datapath", "err", err)
	}
	if o.Agent != "" {
		unregisterFromAgent(o, pid)
	}
	if st.Lost > 0 {
		log.Warn("spans lost: the datapath's ring buffer was full (raise -datapath.buffer-bytes)", "events", st.Lost)
	}
	if st.Skipped > 0 {
		log.Info("heads left without Rootline's lines (send buffer full, a final line break split across writes, or a request head longer than 8 KiB)", "heads", st.Skipped)
	}
	if st.H2 > 0 {
		// The count at the end; the warning came at the first one.
		log.Info("HTTP/2 connections passed through untraced by the eBPF datapath", "connections", st.H2)
	}
	if n := st.Opaque - st.H2; n > 0 {
		log.Info("connections passed through untraced: not HTTP/1.x (TLS or another protocol)", "connections", n)
	}
	log.Debug("done", "requests", spans.Stats.Requests.Load(), "calls", spans.Stats.Calls.Load(),
		"injected", st.Injected, "go_roundtrips", st.GoRoundTrips, "go_handoffs", st.GoHandoffs, "unbound_calls", spans.Stats.Unbound.Load(), "unfinished", spans.Pending())
	return code, true, nil
}

// exitCode is the shell's status for a waited command: its exit code, or
// 128 + the signal that killed it.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 127
}
