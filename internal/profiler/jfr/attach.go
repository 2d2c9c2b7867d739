package jfr

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rootline/rootline/internal/procfs"
)

// The HotSpot attach protocol, spoken directly instead of through jcmd, which
// starts a JVM of its own for every command (~0.15 s of CPU and ~40 MB; an
// anomaly burst asked for dozens of them). On Linux the JVM listens on the
// UNIX socket /tmp/.java_pid<pid> (its own /tmp and pid, as seen in its
// namespaces), which it opens on SIGQUIT when it finds a trigger file
// .attach_pid<pid> in its working directory or /tmp. A request is the
// protocol version "1", the command "jcmd" and three arguments, each
// NUL-terminated, the diagnostic command line as the first argument; the
// answer is a status line and the command's output, ended by the JVM closing
// the connection. The listener checks the client's credentials: its own
// effective uid and gid, or (JDK 11+) root.

// errNoListener: the JVM did not open its attach socket, or refused the
// connection (another user on a JDK that only accepts its own). jcmd is
// tried instead; it also tells why (attach disabled, perfdata).
var errNoListener = errors.New("no attach listener")

// socketWait bounds the wait for the attach socket after SIGQUIT (jcmd
// waits 10 s, jattach ~6 s); a JVM answers within milliseconds unless it is
// stopped or starting.
const socketWait = 5 * time.Second

// A JVM started with -XX:+StartAttachListener opens its socket during its
// start by itself. A SIGQUIT that comes once its listener is up but before
// its socket shows makes it print a thread dump on its standard output (the
// application's) instead: a JVM younger than youngJVM gets startGrace to
// open it before it is signalled.
const (
	youngJVM   = 10 * time.Second
	startGrace = 2 * time.Second
)

// canAttachNatively reports whether this process may talk to the JVM's
// listener itself: as root, or as the JVM's own user.
func canAttachNatively(pi procInfo) bool {
	euid := os.Geteuid()
	return euid == 0 || uint32(euid) == pi.uid
}

// hotspotJcmd runs one diagnostic command in the JVM pid over the attach
// socket and returns its output. Errors wrap errNoListener when jcmd may
// still succeed.
func hotspotJcmd(ctx context.Context, pid int, pi procInfo, cmdline string) ([]byte, error) {
	sock := attachSocket(pid, pi)
	existed := isSocket(sock)
	if !existed {
		if ok, known := perfdataAttachable(pid, pi); known && !ok {
			return nil, ErrAttachDisabled
		}
		if err := startListener(ctx, pid, pi, sock); err != nil {
			return nil, err
		}
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if existed && errors.Is(err, syscall.ECONNREFUSED) {
		// A socket nobody listens on: left by an earlier process with this
		// pid. The JVM only replaces it once asked to listen.
		_ = os.Remove(sock)
		if err := startListener(ctx, pid, pi, sock); err != nil {
			return nil, err
		}
		conn, err = d.DialContext(ctx, "unix", sock)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: connecting to %s: %v", errNoListener, sock, err)
	}
	defer conn.Close()
	if err := trustedSocket(sock, pi); err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()

	var req bytes.Buffer
	for _, s := range []string{"1", "jcmd", cmdline, "", ""} {
		req.WriteString(s)
		req.WriteByte(0)
	}
	if _, err := conn.Write(req.Bytes()); err != nil {
		return nil, fmt.Errorf("%w: sending the command: %v", errNoListener, err)
	}
	r := bufio.NewReader(conn)
	status, err := r.ReadString('\n')
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// Closed without a status: the listener refused our credentials.
		return nil, fmt.Errorf("%w: no answer: %v", errNoListener, err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		return out, fmt.Errorf("reading the answer: %w", err)
	}
	code, err := strconv.Atoi(strings.TrimSpace(status))
	if err != nil {
		return out, fmt.Errorf("malformed attach answer %q", strings.TrimSpace(status))
	}
	if code != 0 && classify(out) == nil {
		// Errors usually come as output (an exception's text), which the
		// caller classifies; a bare status says too little.
		return out, fmt.Errorf("attach status %d: %s", code, firstLines(out))
	}
	return out, nil
}

// startListener asks the JVM to open its attach socket: a trigger file it
// trusts (owned by its user or root) in its working directory, else in its
// /tmp, then SIGQUIT, then wait for the socket.
func startListener(ctx context.Context, pid int, pi procInfo, sock string) error {
	proc := "/proc/" + strconv.Itoa(pid)
	name := ".attach_pid" + strconv.Itoa(pi.nsPID)
	trigger := ""
	for _, dir := range []string{proc + "/cwd", proc + "/root/tmp"} {
		path := dir + "/" + name
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o660)
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		ferr := syscall.Fstat(int(f.Fd()), &st)
		f.Close()
		if ferr == nil && (st.Uid == 0 || st.Uid == uint32(os.Geteuid())) {
			trigger = path
			break
		}
		// A file system that maps owners (the JVM would not trust it).
		_ = os.Remove(path)
	}
	if trigger == "" {
		return fmt.Errorf("%w: cannot create an attach trigger in the JVM's working directory or /tmp", errNoListener)
	}
	defer os.Remove(trigger)
	if err := waitCatchesQuit(ctx, pid); err != nil {
		return err
	}
	if age, err := procfs.Age(pid); err == nil && age < youngJVM {
		if ok, err := waitSocket(ctx, sock, startGrace); ok || err != nil {
			return err
		}
	}
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		return fmt.Errorf("signalling the JVM: %w", err)
	}
	ok, err := waitSocket(ctx, sock, socketWait)
	if err == nil && !ok {
		err = fmt.Errorf("%w: the JVM did not open %s within %s of SIGQUIT", errNoListener, sock, socketWait)
	}
	return err
}

// waitSocket polls for the socket sock for up to d: whether it showed, or
// ctx's error.
func waitSocket(ctx context.Context, sock string, d time.Duration) (bool, error) {
	wait := time.NewTimer(d)
	defer wait.Stop()
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		if isSocket(sock) {
			return true, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-wait.C:
			return isSocket(sock), nil
		case <-time.After(delay):
		}
	}
}

// errQuitNotCaught: the JVM does not handle SIGQUIT (yet, or ever: -Xrs),
// so the signal that opens its attach listener would kill it.
var errQuitNotCaught = errors.New("the JVM does not catch SIGQUIT (still starting, or run with -Xrs): attaching would kill it")

// waitCatchesQuit waits, as long as ctx lets it, until process pid has a
// SIGQUIT handler (SigCgt in /proc/<pid>/status): a JVM installs it early in
// its start, and before that SIGQUIT terminates it (JDK 21's attach client
// checks this too). A JVM registered the moment it was exec'd is still
// starting, and on a busy machine may take seconds to get there; -Xrs JVMs,
// which never do, are refused before (reducedSignals).
func waitCatchesQuit(ctx context.Context, pid int) error {
	for {
		caught, err := catchesQuit(pid)
		if err != nil || caught {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (waited %v)", errQuitNotCaught, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func catchesQuit(pid int) (bool, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false, fmt.Errorf("malformed SigCgt in /proc/%d/status: %w", pid, err)
			}
			return mask&(1<<(syscall.SIGQUIT-1)) != 0, nil
		}
	}
	return false, fmt.Errorf("no SigCgt in /proc/%d/status", pid)
}

// trustedSocket checks, as the JDK's attach client does, that the socket is
// the JVM's: owned by its effective uid and closed to everyone else. Anyone
// can create files in /tmp; the commands sent name files the agent reads.
func trustedSocket(path string, pi procInfo) error {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fmt.Errorf("%w: %s: %v", errNoListener, path, err)
	}
	if st.Uid != pi.uid || st.Mode&0o077 != 0 {
		return fmt.Errorf("attach socket %s is not the JVM's (owner uid %d, mode %#o; want uid %d, no group or other access)",
			path, st.Uid, st.Mode&0o777, pi.uid)
	}
	return nil
}

// attachSocket is the path of the JVM's attach socket as the agent sees it:
// /tmp/.java_pid<pid> in the JVM's mount and pid namespaces.
func attachSocket(pid int, pi procInfo) string {
	return fmt.Sprintf("/proc/%d/root/tmp/.java_pid%d", pid, pi.nsPID)
}

func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Type() == os.ModeSocket
}

// perfdataAttachable reads the JVM's capabilities from its perfdata file
// (/tmp/hsperfdata_<user>/<pid> in its namespaces), as jcmd does before it
// signals: attachable, and whether the file said so at all (a JVM run with
// -XX:-UsePerfData has none). A JVM with -XX:+DisableAttachMechanism would
// only print a thread dump on SIGQUIT.
func perfdataAttachable(pid int, pi procInfo) (attachable, known bool) {
	pattern := fmt.Sprintf("/proc/%d/root/tmp/hsperfdata_*/%d", pid, pi.nsPID)
	files, _ := filepath.Glob(pattern)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if v, ok := perfdataString(b, "sun.rt.jvmCapabilities"); ok && v != "" {
			return v[0] == '1', true
		}
	}
	return false, false
}

// perfdataString finds a string (byte vector) entry in a HotSpot perfdata
// buffer: a 32-byte prologue (magic CAFEC0C0, byte order, versions, …,
// entry offset at 24, entry count at 28), then entries of {length, name
// offset, vector length, type, flags, units, variability, data offset}.
func perfdataString(b []byte, name string) (string, bool) {
	if len(b) < 32 || !bytes.Equal(b[:4], []byte{0xca, 0xfe, 0xc0, 0xc0}) {
		return "", false
	}
	var order binary.ByteOrder = binary.BigEndian
	if b[4] == 1 {
		order = binary.LittleEndian
	}
	i32 := func(off int) int {
		if off < 0 || off+4 > len(b) {
			return -1
		}
		return int(int32(order.Uint32(b[off:])))
	}
	off, n := i32(24), i32(28)
	for ; n > 0 && off >= 32 && off+20 <= len(b); n-- {
		length, nameOff, vlen, dataOff := i32(off), i32(off+4), i32(off+8), i32(off+16)
		if length <= 0 {
			return "", false
		}
		if nameOff > 0 && off+nameOff < len(b) {
			entName, _, _ := bytes.Cut(b[off+nameOff:min(off+length, len(b))], []byte{0})
			if string(entName) == name && b[off+12] == 'B' && vlen > 0 && dataOff > 0 && off+dataOff+vlen <= len(b) {
				v, _, _ := bytes.Cut(b[off+dataOff:off+dataOff+vlen], []byte{0})
				return string(v), true
			}
		}
		off += length
	}
	return "", false
}
