package jfr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rootline/rootline/internal/profiler"
)

var (
	startedRE = regexp.MustCompile(`(?m)^Started recording \d+`)
	dumpedRE  = regexp.MustCompile(`(?m)^Dumped recording`)
	// JFR.check lists "Recording 3: name=rootline maxsize=… (running)".
	runningRE = regexp.MustCompile(`(?m)^Recording \d+: name=` + recordingName + ` .*\((running|delayed)\)`)
)

func recordingRunning(out []byte) bool { return runningRE.Match(out) }

// jcmdFlags keep jcmd's own JVM small: it only connects a socket, prints
// the answer and exits. -UsePerfData stops it leaving hsperfdata files.
var jcmdFlags = []string{"-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1", "-J-XX:-UsePerfData", "-J-Xss512k"}

func findJcmd() string {
	if path, err := exec.LookPath("jcmd"); err == nil {
		return path
	}
	if home := os.Getenv("JAVA_HOME"); home != "" {
		return filepath.Join(home, "bin", "jcmd")
	}
	return "jcmd"
}

// credentialFor returns the credentials jcmd needs to attach to a JVM of
// another user: the attach listener accepts only its own effective uid and
// gid (JDK 8; later JDKs also accept root), and the JVM writes the dump file
// as itself. nil when the JVM runs as root or the agent cannot switch users
// (not root; attaching then works only to its own user's JVMs).
func credentialFor(pi procInfo) *syscall.Credential {
	if os.Geteuid() != 0 || pi.uid == 0 {
		return nil
	}
	return &syscall.Credential{Uid: pi.uid, Gid: pi.gid}
}

// jcmd runs one diagnostic command in pid and returns its output: over the
// attach socket itself when it may (see attach.go), else — or when the JVM
// does not answer that way — with the jcmd tool. The output is classified
// here: the errors returned wrap ErrAttachDisabled, profiler.ErrTargetGone or
// ErrNoData where they apply.
func (p *Profiler) jcmd(ctx context.Context, tg *target, pid int, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	if p.cfg.Attach == AttachNative && !tg.jcmdOnly.Load() && canAttachNatively(tg.proc) {
		begun := time.Now()
		out, err := hotspotJcmd(ctx, pid, tg.proc, strings.Join(args, " "))
		p.logger.Debug("attach", "pid", pid, "cmd", args[0], "took", time.Since(begun), "err", err)
		if !errors.Is(err, errNoListener) {
			p.count(func(s *stats) { s.attachNative++ })
			return p.answer(ctx, tg, pid, args[0], out, err)
		}
		if !alive(pid, tg.proc.startTicks) {
			return nil, fmt.Errorf("%s: %w", args[0], profiler.ErrTargetGone)
		}
		// jcmd knows more ways in (and why there is none): use it from now on.
		tg.jcmdOnly.Store(true)
		p.logger.Info("attach socket unusable, using jcmd", "pid", pid, "err", err)
	}
	p.count(func(s *stats) { s.attachJcmd++ })
	if !isSocket(attachSocket(pid, tg.proc)) {
		// jcmd (before JDK 21) would SIGQUIT a JVM that cannot take it yet.
		if err := waitCatchesQuit(ctx, pid); err != nil {
			if !alive(pid, tg.proc.startTicks) {
				return nil, fmt.Errorf("%s: %w", args[0], profiler.ErrTargetGone)
			}
			return nil, fmt.Errorf("%s: %w", args[0], err)
		}
	}
	return p.runJcmd(ctx, tg, pid, args...)
}

// jcmdReady is jcmd for the first command of a JVM just registered: while
// the JVM is still starting (errNotReady) the command is repeated, as long
// as ctx and the command timeout allow.
func (p *Profiler) jcmdReady(ctx context.Context, tg *target, pid int, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		out, err := p.jcmd(ctx, tg, pid, args...)
		if !errors.Is(err, errNotReady) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return out, err
		case <-time.After(delay):
		}
	}
}

// answer classifies the outcome of a command sent over the attach socket.
func (p *Profiler) answer(ctx context.Context, tg *target, pid int, name string, out []byte, err error) ([]byte, error) {
	if cerr := classify(out); cerr != nil {
		return out, fmt.Errorf("%s: %w", name, cerr)
	}
	switch {
	case err == nil:
		return out, nil
	case !alive(pid, tg.proc.startTicks):
		return out, fmt.Errorf("%s: %w", name, profiler.ErrTargetGone)
	case ctx.Err() != nil:
		return out, fmt.Errorf("%s: the JVM did not answer within %s: %w", name, p.cfg.Timeout, ctx.Err())
	}
	return out, fmt.Errorf("%s: %w", name, err)
}

// runJcmd runs the jcmd tool (ctx bounds it). jcmd reports most failures
// with exit status 0 and a message.
func (p *Profiler) runJcmd(ctx context.Context, tg *target, pid int, args ...string) ([]byte, error) {
	argv := append(append(append([]string{}, jcmdFlags...), strconv.Itoa(pid)), args...)
	cmd := exec.CommandContext(ctx, p.cfg.JcmdPath, argv...)
	cmd.Dir = "/" // the agent's working directory may be closed to the JVM's user
	cmd.WaitDelay = 2 * time.Second
	if tg.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: tg.cred}
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	begun := time.Now()
	runErr := cmd.Run()
	b := out.Bytes()
	p.logger.Debug("jcmd", "pid", pid, "cmd", args[0], "took", time.Since(begun), "err", runErr)
	if err := classify(b); err != nil {
		return b, fmt.Errorf("%s: %w", args[0], err)
	}
	if ctx.Err() != nil {
		return b, fmt.Errorf("%s: jcmd did not answer within %s: %w", args[0], p.cfg.Timeout, ctx.Err())
	}
	if runErr != nil {
		var ee *exec.ExitError
		if errors.As(runErr, &ee) {
			if !alive(pid, tg.proc.startTicks) {
				return b, fmt.Errorf("%s: %w", args[0], profiler.ErrTargetGone)
			}
			return b, fmt.Errorf("%s: jcmd %s: %s", args[0], ee.ProcessState, firstLines(b))
		}
		return b, fmt.Errorf("%s: running %s: %w", args[0], p.cfg.JcmdPath, runErr)
	}
	return b, nil
}

// errNotReady: the JVM does not know the JFR diagnostic commands (yet):
// a JVM registers them late in its start, so one attached to as it starts
// answers "Unknown diagnostic command" for a while.
var errNotReady = errors.New("the JVM does not know the JFR commands: still starting, or a JVM without JFR")

// classify maps jcmd's messages (JDK 11–21 wording) to errors.
func classify(out []byte) error {
	s := string(out)
	switch {
	case strings.Contains(s, "Unknown diagnostic command"):
		return errNotReady
	case strings.Contains(s, "does not support the attach mechanism"):
		return ErrAttachDisabled
	case strings.Contains(s, "No such process"), strings.Contains(s, "No such file or directory") && strings.Contains(s, "AttachNotSupportedException"):
		return profiler.ErrTargetGone
	case strings.Contains(s, "No data found in the specified interval"):
		return ErrNoData
	case strings.Contains(s, "Unable to open socket file"):
		// The JVM did not start its attach listener: another user's JVM the
		// agent cannot impersonate, a JVM in a mount namespace jcmd cannot
		// reach, or one too busy (or stopped) to answer SIGQUIT.
		return fmt.Errorf("attach failed (JVM did not open its attach socket; other user, container or unresponsive JVM): %s", firstLines(out))
	case strings.Contains(s, "Exception"), strings.Contains(s, "Dump failed"),
		strings.Contains(s, "Could not start recording"):
		return errors.New(firstLines(out))
	}
	return nil
}

// firstLines shortens jcmd output for an error message: the "<pid>:" header
// dropped, at most three non-empty lines kept.
func firstLines(out []byte) string {
	var lines []string
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasSuffix(line, ":") && strings.Trim(line, "0123456789:") == "" {
			continue
		}
		lines = append(lines, line)
		if len(lines) == 3 {
			break
		}
	}
	return strings.Join(lines, " | ")
}
