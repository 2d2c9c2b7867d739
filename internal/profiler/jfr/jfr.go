package jfr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rootline/rootline/internal/profiler"
)

// recordingName names the JFR recording the profiler owns in every JVM, so a
// restarted agent finds (and reuses) the recording its predecessor started.
const recordingName = "rootline"

// Media types of the artifacts a dump returns.
const (
	MediaTypeJFR   = "application/x-jfr"
	MediaTypePprof = "application/vnd.google.protobuf+gzip"
)

// Errors specific to JFR; the profiler package's sentinels cover the rest.
var (
	// ErrAttachDisabled: the JVM runs with -XX:+DisableAttachMechanism, so
	// no diagnostic command can reach it.
	ErrAttachDisabled = errors.New("the JVM's attach mechanism is disabled (-XX:+DisableAttachMechanism)")
	// ErrNoData: the recording holds nothing in the requested window (the
	// window ended before the recording started or has aged out of it).
	ErrNoData = errors.New("no recorded data in the window")
)

// Config configures the JFR profiler. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	// Attach is how commands reach a JVM: "native" (default) speaks the
	// HotSpot attach protocol itself and uses jcmd only where that fails;
	// "jcmd" always runs the jcmd tool (a JVM per command).
	Attach string `yaml:"attach"`
	// JcmdPath is the jcmd executable; default: jcmd from PATH, else
	// $JAVA_HOME/bin/jcmd. Its JDK must be the targets' major version or newer.
	JcmdPath string `yaml:"jcmd_path"`
	// MaxAge bounds the recording in time (JFR.start maxage).
	MaxAge time.Duration `yaml:"max_age"`
	// MaxSize bounds the recording's disk repository in bytes (JFR.start maxsize).
	MaxSize int64 `yaml:"max_size"`
	// Settings is the JFR settings file: "default" (~1% overhead, 20 ms
	// sampling) or "profile" (~2%, 10 ms sampling, lower lock thresholds).
	Settings string `yaml:"settings"`
	// EventSettings are event settings applied on top of Settings, each
	// "<event>#<setting>=<value>" as JFR.start takes them (JDK 17+). The
	// default turns off jdk.NativeMethodSample: every 20 ms it walks the
	// stack of each thread parked in native code (accept, epoll, socket
	// reads) — on a JVM serving a few requests a second, most of JFR's CPU
	// (bench/RESULTS.md) — and nothing reads those samples but JMC.
	// An empty list, not nil, records with Settings alone.
	EventSettings []string `yaml:"event_settings"`
	// DumpDir receives the dump files while they are read back; default: a
	// fresh temporary directory removed by Close. For JVMs of other users
	// its parent directories must be searchable (x) by them.
	DumpDir string `yaml:"dump_dir"`
	// Timeout bounds each diagnostic command (attach or jcmd).
	Timeout time.Duration `yaml:"timeout"`
}

// Values of Config.Attach.
const (
	AttachNative = "native"
	AttachJcmd   = "jcmd"
)

// DefaultConfig returns the defaults applied to zero Config fields.
func DefaultConfig() Config {
	return Config{
		Attach:   AttachNative,
		MaxAge:   120 * time.Second,
		MaxSize:  64 << 20,
		Settings: "profile",
		// Read by New when Config.EventSettings is nil.
		EventSettings: []string{"jdk.NativeMethodSample#enabled=false"},
		Timeout:       20 * time.Second,
	}
}

// eventSettingRE is what JFR.start takes as an event setting (a leading +
// adds a setting the event does not declare).
var eventSettingRE = regexp.MustCompile(`^\+?[A-Za-z_][\w.$]*#[A-Za-z_][\w-]*=\S+$`)

// Validate rejects settings JFR.start would refuse.
func (c Config) Validate() error {
	switch c.Settings {
	case "", "default", "profile":
	default:
		return fmt.Errorf("jfr: settings %q: want \"default\" or \"profile\"", c.Settings)
	}
	switch c.Attach {
	case "", AttachNative, AttachJcmd:
	default:
		return fmt.Errorf("jfr: attach %q: want %q or %q", c.Attach, AttachNative, AttachJcmd)
	}
	for _, e := range c.EventSettings {
		if !eventSettingRE.MatchString(e) {
			return fmt.Errorf("jfr: event setting %q: want <event>#<setting>=<value>, e.g. jdk.ThreadPark#threshold=5ms", e)
		}
	}
	if c.MaxAge < 0 || c.MaxSize < 0 || c.Timeout < 0 {
		return errors.New("jfr: max_age, max_size and timeout must not be negative")
	}
	return nil
}

// Profiler records HotSpot JVMs with JDK Flight Recorder driven by
// diagnostic commands (JFR.start, JFR.dump) over the attach mechanism. It
// is safe for concurrent use.
type Profiler struct {
	cfg    Config
	logger *slog.Logger

	mu      sync.Mutex
	targets map[int]*target
	tmpDir  string // DumpDir when the profiler created it
	stats   stats
}

var _ profiler.Profiler = (*Profiler)(nil)

type target struct {
	mu      sync.Mutex // serialises Start against itself
	started bool
	proc    procInfo
	cred    *syscall.Credential // nil: run jcmd as the agent
	// jcmdOnly is set once the attach socket failed: jcmd from then on.
	jcmdOnly atomic.Bool
}

type stats struct {
	starts, dumps, errors    float64
	dumpSeconds, bytes       float64
	attachNative, attachJcmd float64 // commands sent each way
}

// New returns a JFR profiler. A nil logger discards logs. An invalid
// Settings value falls back to "profile" with a warning.
func New(cfg Config, logger *slog.Logger) *Profiler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "profiler/jfr")
	def := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		logger.Warn("invalid config, using defaults for bad fields", "err", err)
		if cfg.Settings != "default" {
			cfg.Settings = def.Settings
		}
		if cfg.Attach != AttachJcmd {
			cfg.Attach = def.Attach
		}
		cfg.EventSettings = slices.DeleteFunc(slices.Clone(cfg.EventSettings), func(e string) bool {
			return !eventSettingRE.MatchString(e)
		})
	}
	if cfg.EventSettings == nil {
		cfg.EventSettings = def.EventSettings
	}
	if cfg.Attach == "" {
		cfg.Attach = def.Attach
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = def.MaxAge
	}
	if cfg.MaxSize <= 0 {
		cfg.MaxSize = def.MaxSize
	}
	if cfg.Settings == "" {
		cfg.Settings = def.Settings
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = def.Timeout
	}
	if cfg.JcmdPath == "" {
		cfg.JcmdPath = findJcmd()
	}
	return &Profiler{cfg: cfg, logger: logger, targets: make(map[int]*target)}
}

// Name implements profiler.Profiler.
func (p *Profiler) Name() string { return "jfr" }

// Supports implements profiler.Profiler: t must be a HotSpot JVM, as
// discovery marked it or as /proc shows it.
func (p *Profiler) Supports(t profiler.Target) bool {
	return t.JVM || isJVM(t.PID)
}

// Start implements profiler.Profiler. It adopts a running recording named
// "rootline" (left by an earlier agent) instead of starting a second one.
func (p *Profiler) Start(ctx context.Context, t profiler.Target) (err error) {
	defer p.countError(&err)
	pi, err := readProc(t.PID)
	if errors.Is(err, errNoProcess) {
		return fmt.Errorf("jfr: start pid %d: no such process: %w", t.PID, profiler.ErrTargetGone)
	}
	if err != nil {
		return fmt.Errorf("jfr: start pid %d: %w", t.PID, err)
	}
	// Attaching sends SIGQUIT to the target to wake its attach listener: on
	// anything but a JVM that signal would kill the process.
	if !isJVM(t.PID) {
		return fmt.Errorf("jfr: start pid %d (%s): not a HotSpot JVM: %w", t.PID, t.Exe, profiler.ErrNotSupported)
	}
	args := jvmArgs(t.PID)
	if attachDisabled(args) {
		return fmt.Errorf("jfr: start pid %d: %w", t.PID, ErrAttachDisabled)
	}
	if reducedSignals(args) {
		return fmt.Errorf("jfr: start pid %d: %w", t.PID, errQuitNotCaught)
	}
	if pi.otherMountNS && !pi.otherPidNS && !sameTmp(t.PID) &&
		(p.cfg.Attach == AttachJcmd || !canAttachNatively(pi)) {
		// jcmd would wait 10 s for an attach socket in the agent's /tmp
		// while the JVM creates it in its own. (A mount namespace that
		// keeps the host's /tmp, as `ip netns exec` makes, is fine; the
		// native attach finds the socket through /proc/<pid>/root.)
		return fmt.Errorf("jfr: start pid %d: the JVM has its own mount namespace but shares the agent's pid namespace, where jcmd cannot find its attach socket: %w",
			t.PID, profiler.ErrNotSupported)
	}

	p.mu.Lock()
	tg, ok := p.targets[t.PID]
	if ok && tg.proc.startTicks != pi.startTicks {
		// The pid was recycled: forget the old process.
		ok = false
	}
	if !ok {
		tg = &target{proc: pi, cred: credentialFor(pi)}
		p.targets[t.PID] = tg
	}
	p.mu.Unlock()

	tg.mu.Lock()
	defer tg.mu.Unlock()
	if tg.started {
		return nil
	}
	out, err := p.jcmdReady(ctx, tg, t.PID, "JFR.check", "name="+recordingName)
	if err != nil {
		return fmt.Errorf("jfr: start pid %d: %w", t.PID, err)
	}
	if recordingRunning(out) {
		p.logger.Info("adopted running recording", "pid", t.PID, "service", t.Service)
	} else {
		args := append([]string{"JFR.start", "name=" + recordingName,
			"settings=" + p.cfg.Settings,
			"maxage=" + strconv.FormatInt(int64(p.cfg.MaxAge.Round(time.Second)/time.Second), 10) + "s",
			"maxsize=" + strconv.FormatInt(p.cfg.MaxSize, 10),
			"disk=true"}, p.cfg.EventSettings...)
		out, err = p.jcmd(ctx, tg, t.PID, args...)
		if (err != nil || !startedRE.Match(out)) && len(p.cfg.EventSettings) > 0 && ctx.Err() == nil {
			// A JVM older than event settings in JFR.start (before JDK
			// 17) refuses them (jcmd then exits non-zero): record with
			// Settings alone. A JDK 17 that rejects a value may have
			// started the recording all the same: keep that one.
			p.logger.Warn("JFR.start refused the event settings; recording without them",
				"pid", t.PID, "event_settings", p.cfg.EventSettings, "out", firstLines(out), "err", err)
			if chk, cerr := p.jcmd(ctx, tg, t.PID, "JFR.check", "name="+recordingName); cerr == nil && recordingRunning(chk) {
				out, err = []byte("Started recording (adopted)"), nil
			} else {
				out, err = p.jcmd(ctx, tg, t.PID, args[:6]...)
			}
		}
		if err != nil {
			return fmt.Errorf("jfr: start pid %d: %w", t.PID, err)
		}
		if !startedRE.Match(out) {
			return fmt.Errorf("jfr: start pid %d: JFR.start: %s", t.PID, firstLines(out))
		}
		p.logger.Info("started recording", "pid", t.PID, "service", t.Service, "settings", p.cfg.Settings,
			"event_settings", p.cfg.EventSettings)
	}
	tg.started = true
	p.mu.Lock()
	p.stats.starts++
	p.mu.Unlock()
	return nil
}

// Dump implements profiler.Profiler. The JVM writes the window to a file
// from its attach listener thread (no safepoint beyond JFR's chunk
// rotation); reading it back and converting it happen in the agent.
func (p *Profiler) Dump(ctx context.Context, t profiler.Target, w profiler.Window) (arts []profiler.Artifact, err error) {
	defer p.countError(&err)
	begun := time.Now()
	p.mu.Lock()
	tg, ok := p.targets[t.PID]
	p.mu.Unlock()
	if !ok || !tg.isStarted() {
		return nil, fmt.Errorf("jfr: dump pid %d: %w", t.PID, profiler.ErrUnknownTarget)
	}
	if !w.Start.IsZero() && !w.End.IsZero() && w.End.Before(w.Start) {
		return nil, fmt.Errorf("jfr: dump pid %d: window ends before it starts", t.PID)
	}
	if !alive(t.PID, tg.proc.startTicks) {
		return nil, fmt.Errorf("jfr: dump pid %d: %w", t.PID, profiler.ErrTargetGone)
	}

	jvmPath, readPath, err := p.dumpPaths(tg, t.PID)
	if err != nil {
		return nil, fmt.Errorf("jfr: dump pid %d: %w", t.PID, err)
	}
	args := []string{"JFR.dump", "name=" + recordingName}
	now := time.Now()
	if !w.Start.IsZero() {
		args = append(args, "begin="+w.Start.UTC().Truncate(time.Second).Format(instantLayout))
	}
	if !w.End.IsZero() && w.End.Before(now) {
		// JFR.dump wants whole seconds; round the end up so the window's last
		// events are in the file.
		end := w.End.UTC().Add(time.Second - 1).Truncate(time.Second)
		args = append(args, "end="+end.Format(instantLayout))
	}
	args = append(args, "filename="+jvmPath)
	out, jerr := p.jcmd(ctx, tg, t.PID, args...)
	if jerr == nil && !dumpedRE.Match(out) {
		// E.g. "Could not find rootline": someone stopped the recording.
		jerr = errors.New("JFR.dump: " + firstLines(out))
	}
	data, rerr := os.ReadFile(readPath)
	if rerr == nil || !errors.Is(rerr, fs.ErrNotExist) {
		_ = os.Remove(readPath)
	}
	gone := !alive(t.PID, tg.proc.startTicks)
	switch {
	case jerr != nil && gone, jerr != nil && errors.Is(jerr, profiler.ErrTargetGone):
		// The JVM died mid-dump: whatever it wrote is partial evidence.
		err = fmt.Errorf("jfr: dump pid %d: %w", t.PID, profiler.ErrTargetGone)
		if len(data) == 0 {
			return nil, err
		}
	case jerr != nil:
		return nil, fmt.Errorf("jfr: dump pid %d: %w", t.PID, jerr)
	case rerr != nil:
		return nil, fmt.Errorf("jfr: dump pid %d: reading the dump: %w", t.PID, rerr)
	}
	partial := err != nil

	arts, cerr := p.artifacts(t, w, data, partial)
	p.mu.Lock()
	p.stats.dumps++
	p.stats.dumpSeconds += time.Since(begun).Seconds()
	p.stats.bytes += float64(len(data))
	p.mu.Unlock()
	if cerr != nil && !partial {
		// The raw recording is still good evidence; report the conversion.
		err = fmt.Errorf("jfr: dump pid %d: converting to pprof: %w", t.PID, cerr)
	}
	p.logger.Debug("dumped", "pid", t.PID, "bytes", len(data), "partial", partial, "took", time.Since(begun))
	return arts, err
}

// instantLayout is what java.time.Instant.parse reads, which JFR.dump
// accepts for begin and end; UTC avoids depending on the JVM's time zone.
const instantLayout = "2006-01-02T15:04:05Z"

// artifacts builds the .jfr and the pprof artifacts of one dump. A
// conversion failure still returns the .jfr artifact.
func (p *Profiler) artifacts(t profiler.Target, w profiler.Window, data []byte, partial bool) ([]profiler.Artifact, error) {
	base := t.Service
	if base == "" {
		base = "java"
	}
	base += "-" + strconv.Itoa(t.PID)
	res, cerr := convert(data, w, defaultPeriod(p.cfg.Settings))
	raw := profiler.Artifact{
		Kind:      "jfr",
		MediaType: MediaTypeJFR,
		FileName:  base + ".jfr",
		Data:      data,
		Start:     res.chunksStart,
		End:       res.chunksEnd,
		Partial:   partial,
		Attributes: map[string]string{
			"settings": p.cfg.Settings,
			"chunks":   strconv.Itoa(res.chunks),
		},
	}
	arts := []profiler.Artifact{raw}
	if res.profile == nil {
		return arts, cerr
	}
	arts = append(arts, profiler.Artifact{
		Kind:      "jfr",
		MediaType: MediaTypePprof,
		FileName:  base + ".pb.gz",
		Data:      res.profile,
		Start:     res.start,
		End:       res.end,
		Partial:   partial || cerr != nil,
		Attributes: map[string]string{
			"execution_samples":     strconv.Itoa(res.cpuSamples),
			"monitor_enter_events":  strconv.Itoa(res.monitorEvents),
			"thread_park_events":    strconv.Itoa(res.parkEvents),
			"sampling_period_ns":    strconv.FormatInt(res.period.Nanoseconds(), 10),
			"events_outside_window": strconv.Itoa(res.outside),
		},
	})
	return arts, cerr
}

// dumpPaths returns where the JVM writes the dump (in its own filesystem)
// and where the agent reads it.
func (p *Profiler) dumpPaths(tg *target, pid int) (jvmPath, readPath string, err error) {
	name := fmt.Sprintf("rootline-%d-%d.jfr", pid, time.Now().UnixNano())
	if tg.proc.otherMountNS {
		// A containerised JVM cannot see the agent's DumpDir; its /tmp is
		// writable by any user and reachable through /proc/<pid>/root.
		jvmPath = "/tmp/" + name
		return jvmPath, "/proc/" + strconv.Itoa(pid) + "/root" + jvmPath, nil
	}
	dir, err := p.dumpDir(tg)
	if err != nil {
		return "", "", err
	}
	jvmPath = filepath.Join(dir, name)
	return jvmPath, jvmPath, nil
}

// dumpDir returns a directory the target JVM can write to: DumpDir, or for a
// JVM of another user a subdirectory owned by that user.
func (p *Profiler) dumpDir(tg *target) (string, error) {
	p.mu.Lock()
	dir := p.cfg.DumpDir
	if dir == "" {
		if p.tmpDir == "" {
			d, err := os.MkdirTemp("", "rootline-jfr-")
			if err != nil {
				p.mu.Unlock()
				return "", err
			}
			p.tmpDir = d
		}
		dir = p.tmpDir
	}
	p.mu.Unlock()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if tg.cred == nil {
		return dir, nil
	}
	// Other users may traverse DumpDir but list or read only their own
	// subdirectory.
	if err := os.Chmod(dir, 0o711); err != nil {
		return "", err
	}
	sub := filepath.Join(dir, "uid-"+strconv.FormatUint(uint64(tg.cred.Uid), 10))
	if err := os.MkdirAll(sub, 0o700); err != nil {
		return "", err
	}
	if err := os.Chown(sub, int(tg.cred.Uid), int(tg.cred.Gid)); err != nil {
		return "", err
	}
	return sub, nil
}

// Stop implements profiler.Profiler. A recording already gone (stopped by
// someone else, or the JVM exited) counts as stopped.
func (p *Profiler) Stop(t profiler.Target) (err error) {
	defer p.countError(&err)
	p.mu.Lock()
	tg, ok := p.targets[t.PID]
	delete(p.targets, t.PID)
	p.mu.Unlock()
	if !ok {
		return fmt.Errorf("jfr: stop pid %d: %w", t.PID, profiler.ErrUnknownTarget)
	}
	return p.stop(t.PID, tg)
}

func (p *Profiler) stop(pid int, tg *target) error {
	if !tg.isStarted() || !alive(pid, tg.proc.startTicks) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Timeout)
	defer cancel()
	if _, err := p.jcmd(ctx, tg, pid, "JFR.stop", "name="+recordingName); err != nil {
		if errors.Is(err, profiler.ErrTargetGone) || !alive(pid, tg.proc.startTicks) {
			return nil
		}
		return fmt.Errorf("jfr: stop pid %d: %w", pid, err)
	}
	p.logger.Info("stopped recording", "pid", pid)
	return nil
}

// Stats implements profiler.Profiler.
func (p *Profiler) Stats() map[string]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return map[string]float64{
		"starts":             p.stats.starts,
		"dumps":              p.stats.dumps,
		"dump_seconds_total": p.stats.dumpSeconds,
		"bytes_dumped":       p.stats.bytes,
		"errors":             p.stats.errors,
		"commands_attach":    p.stats.attachNative,
		"commands_jcmd":      p.stats.attachJcmd,
		"targets":            float64(len(p.targets)),
	}
}

// Close implements profiler.Profiler: it stops every recording and removes
// the temporary dump directory it created.
func (p *Profiler) Close() error {
	p.mu.Lock()
	targets := p.targets
	p.targets = make(map[int]*target)
	tmp := p.tmpDir
	p.tmpDir = ""
	p.mu.Unlock()
	var errs []error
	for pid, tg := range targets {
		errs = append(errs, p.stop(pid, tg))
	}
	if tmp != "" {
		errs = append(errs, os.RemoveAll(tmp))
	}
	return errors.Join(errs...)
}

func (tg *target) isStarted() bool {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.started
}

func (p *Profiler) count(f func(*stats)) {
	p.mu.Lock()
	f(&p.stats)
	p.mu.Unlock()
}

func (p *Profiler) countError(err *error) {
	// A window without data is an answer, not a profiler failure.
	if *err != nil && !errors.Is(*err, ErrNoData) {
		p.mu.Lock()
		p.stats.errors++
		p.mu.Unlock()
	}
}

// defaultPeriod is jdk.ExecutionSample's period in the JDK's settings files,
// used when a recording lacks its jdk.ActiveSetting events.
func defaultPeriod(settings string) time.Duration {
	if settings == "default" {
		return 20 * time.Millisecond
	}
	return 10 * time.Millisecond
}

// sameTmp reports whether the process sees the agent's /tmp (same device and
// inode through /proc/<pid>/root/tmp).
func sameTmp(pid int) bool {
	var a, b syscall.Stat_t
	if syscall.Stat("/tmp", &a) != nil || syscall.Stat(fmt.Sprintf("/proc/%d/root/tmp", pid), &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}
