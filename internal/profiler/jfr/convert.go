package jfr

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"
	"github.com/grafana/jfr-parser/parser"
	"github.com/grafana/jfr-parser/parser/types"
	"github.com/grafana/jfr-parser/parser/types/def"
	"github.com/rootline/rootline/internal/profiler"
)

// Sample type indexes of the converted profile; the lock types are appended
// only when the window holds such events.
const (
	stSamples = iota
	stCPU
)

// Kinds of the JFR events converted.
const (
	kindCPU = iota
	kindMonitor
	kindPark
)

// converted is the outcome of convert.
type converted struct {
	profile []byte // gzipped pprof; nil when nothing could be parsed

	// chunksStart/End is what the JFR chunks cover; start/end is that
	// intersected with the window, the range of the pprof samples.
	chunksStart, chunksEnd time.Time
	start, end             time.Time
	chunks                 int

	period                                time.Duration
	cpuSamples, monitorEvents, parkEvents int
	outside                               int // events skipped as outside the window
}

// event is one JFR event kept for the profile.
type event struct {
	kind     int // kindCPU, kindMonitor or kindPark
	startNs  int64
	duration int64
	tid      int64
	thread   string
	locs     []*profile.Location
}

// convert turns a JFR recording into a pprof profile of the events starting
// inside w. A truncated recording (the JVM died mid-dump) yields the events
// before the damage along with the error.
func convert(data []byte, w profiler.Window, fallbackPeriod time.Duration) (res converted, err error) {
	defer func() {
		// The parser trusts its input; a corrupt file must not take the
		// agent down.
		if r := recover(); r != nil {
			err = fmt.Errorf("jfr parser panic: %v", r)
		}
	}()
	res.period = fallbackPeriod
	b := newBuilder()
	var events []event
	var lockMonitor, lockPark bool

	p := parser.NewParser(data, parser.Options{})
	var chunk parser.ChunkHeader
	for {
		typ, perr := p.ParseEvent()
		if errors.Is(perr, io.EOF) {
			break
		}
		if perr != nil {
			err = perr
			break
		}
		if h := p.ChunkHeader(); h != chunk {
			chunk = h
			res.chunks++
			b.newChunk()
			cs := time.Unix(0, int64(h.StartNanos))
			ce := cs.Add(time.Duration(h.DurationNanos))
			if res.chunksStart.IsZero() || cs.Before(res.chunksStart) {
				res.chunksStart = cs
			}
			if ce.After(res.chunksEnd) {
				res.chunksEnd = ce
			}
		}
		var ev event
		var thread types.ThreadRef
		var stack types.StackTraceRef
		switch typ {
		case p.TypeMap.T_EXECUTION_SAMPLE:
			ev = event{kind: kindCPU, startNs: ticksToUnixNs(&chunk, p.ExecutionSample.StartTime)}
			thread, stack = p.ExecutionSample.SampledThread, p.ExecutionSample.StackTrace
		case p.TypeMap.T_MONITOR_ENTER:
			e := &p.JavaMonitorEnter
			ev = event{kind: kindMonitor, startNs: ticksToUnixNs(&chunk, e.StartTime), duration: ticksToNs(&chunk, e.Duration)}
			thread, stack = e.EventThread, e.StackTrace
		case p.TypeMap.T_THREAD_PARK:
			e := &p.ThreadPark
			ev = event{kind: kindPark, startNs: ticksToUnixNs(&chunk, e.StartTime), duration: ticksToNs(&chunk, e.Duration)}
			thread, stack = e.EventThread, e.StackTrace
		case p.TypeMap.T_ACTIVE_SETTING:
			s := &p.ActiveSetting
			if s.Name == "period" && def.TypeID(s.Id) == p.TypeMap.T_EXECUTION_SAMPLE {
				if d, ok := parsePeriod(s.Value); ok {
					res.period = d
				}
			}
			continue
		default:
			continue
		}
		if !inWindow(ev.startNs, w) {
			res.outside++
			continue
		}
		if idx, ok := p.Threads.IDMap[thread]; ok {
			th := &p.Threads.Thread[idx]
			ev.tid = int64(th.OsThreadId)
			ev.thread = th.JavaName
			if ev.thread == "" {
				ev.thread = th.OsName
			}
		}
		ev.locs = b.stack(p, stack)
		switch ev.kind {
		case kindCPU:
			res.cpuSamples++
		case kindMonitor:
			res.monitorEvents++
			lockMonitor = true
		case kindPark:
			res.parkEvents++
			lockPark = true
		}
		events = append(events, ev)
	}
	if res.chunks == 0 {
		if err == nil {
			err = errors.New("no JFR chunk in the file")
		}
		return res, err
	}

	prof := b.prof
	prof.SampleType = []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}}
	prof.DefaultSampleType = "cpu"
	prof.PeriodType = &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}
	prof.Period = res.period.Nanoseconds()
	monitorIdx, parkIdx := -1, -1
	if lockMonitor {
		monitorIdx = len(prof.SampleType)
		prof.SampleType = append(prof.SampleType, &profile.ValueType{Type: "monitor_enter", Unit: "nanoseconds"})
	}
	if lockPark {
		parkIdx = len(prof.SampleType)
		prof.SampleType = append(prof.SampleType, &profile.ValueType{Type: "thread_park", Unit: "nanoseconds"})
	}
	for i := range events {
		ev := &events[i]
		v := make([]int64, len(prof.SampleType))
		switch ev.kind {
		case kindCPU:
			v[stSamples], v[stCPU] = 1, prof.Period
		case kindMonitor:
			v[monitorIdx] = ev.duration
		case kindPark:
			v[parkIdx] = ev.duration
		}
		s := &profile.Sample{
			Location: ev.locs,
			Value:    v,
			NumLabel: map[string][]int64{"tid": {ev.tid}, "time_ns": {ev.startNs}},
			NumUnit:  map[string][]string{"time_ns": {"nanoseconds"}},
		}
		if ev.thread != "" {
			s.Label = map[string][]string{"thread": {ev.thread}}
		}
		prof.Sample = append(prof.Sample, s)
	}

	res.start, res.end = res.chunksStart, res.chunksEnd
	if !w.Start.IsZero() && w.Start.After(res.start) {
		res.start = w.Start
	}
	if !w.End.IsZero() && w.End.Before(res.end) {
		res.end = w.End
	}
	if res.end.Before(res.start) {
		res.end = res.start
	}
	prof.TimeNanos = res.start.UnixNano()
	prof.DurationNanos = res.end.Sub(res.start).Nanoseconds()
	if verr := prof.CheckValid(); verr != nil {
		return res, errors.Join(err, fmt.Errorf("building pprof: %w", verr))
	}
	var buf bytes.Buffer
	if werr := prof.Write(&buf); werr != nil {
		return res, errors.Join(err, fmt.Errorf("writing pprof: %w", werr))
	}
	res.profile = buf.Bytes()
	return res, err
}

func inWindow(ns int64, w profiler.Window) bool {
	if !w.Start.IsZero() && ns < w.Start.UnixNano() {
		return false
	}
	return w.End.IsZero() || ns <= w.End.UnixNano()
}

// ticksToNs converts a JFR tick count to nanoseconds without overflowing
// for long durations at a 1 GHz tick rate.
func ticksToNs(h *parser.ChunkHeader, ticks uint64) int64 {
	tps := h.TicksPerSecond
	if tps == 0 {
		return int64(ticks)
	}
	return int64(ticks/tps*1e9 + ticks%tps*1e9/tps)
}

// ticksToUnixNs converts an event's tick timestamp to Unix nanoseconds from
// the chunk header's (start nanos, start ticks) pair.
func ticksToUnixNs(h *parser.ChunkHeader, ticks uint64) int64 {
	if ticks >= h.StartTicks {
		return int64(h.StartNanos) + ticksToNs(h, ticks-h.StartTicks)
	}
	return int64(h.StartNanos) - ticksToNs(h, h.StartTicks-ticks)
}

// parsePeriod reads a JFR setting value such as "10 ms" or "20 ms".
func parsePeriod(v string) (time.Duration, bool) {
	num, unit, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	mult := map[string]time.Duration{"ns": time.Nanosecond, "us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[unit]
	if mult == 0 {
		return 0, false
	}
	return time.Duration(n) * mult, true
}

// builder interns pprof functions and locations across chunks. JFR
// constant-pool ids are chunk-local, so functions are keyed by name and
// stacks are cached per chunk only.
type builder struct {
	prof   *profile.Profile
	funcs  map[string]*profile.Function
	locs   map[locKey]*profile.Location
	stacks map[types.StackTraceRef][]*profile.Location
}

type locKey struct {
	fn   string
	line int64
}

func newBuilder() *builder {
	return &builder{
		prof:  &profile.Profile{},
		funcs: make(map[string]*profile.Function),
		locs:  make(map[locKey]*profile.Location),
	}
}

func (b *builder) newChunk() { b.stacks = make(map[types.StackTraceRef][]*profile.Location) }

// stack returns the locations of a JFR stack trace, leaf first (JFR's order
// and pprof's).
func (b *builder) stack(p *parser.Parser, ref types.StackTraceRef) []*profile.Location {
	if locs, ok := b.stacks[ref]; ok {
		return locs
	}
	var locs []*profile.Location
	if st := p.GetStacktrace(ref); st != nil {
		locs = make([]*profile.Location, 0, len(st.Frames))
		for _, f := range st.Frames {
			locs = append(locs, b.location(methodName(p, f.Method), int64(f.LineNumber)))
		}
		if st.Truncated {
			locs = append(locs, b.location("[truncated]", 0))
		}
	}
	if len(locs) == 0 {
		locs = []*profile.Location{b.location("[unknown]", 0)}
	}
	b.stacks[ref] = locs
	return locs
}

func (b *builder) location(fn string, line int64) *profile.Location {
	k := locKey{fn, line}
	if l, ok := b.locs[k]; ok {
		return l
	}
	f, ok := b.funcs[fn]
	if !ok {
		f = &profile.Function{ID: uint64(len(b.prof.Function) + 1), Name: fn, SystemName: fn}
		b.funcs[fn] = f
		b.prof.Function = append(b.prof.Function, f)
	}
	l := &profile.Location{ID: uint64(len(b.prof.Location) + 1), Line: []profile.Line{{Function: f, Line: line}}}
	b.locs[k] = l
	b.prof.Location = append(b.prof.Location, l)
	return l
}

// methodName returns "pkg.Class.method" from JFR's internal class name
// ("java/lang/Thread") and method name.
func methodName(p *parser.Parser, ref types.MethodRef) string {
	m := p.GetMethod(ref)
	if m == nil {
		return "[unknown]"
	}
	name := p.GetSymbolString(m.Name)
	if c := p.GetClass(m.Type); c != nil {
		if cls := p.GetSymbolString(c.Name); cls != "" {
			name = strings.ReplaceAll(cls, "/", ".") + "." + name
		}
	}
	return name
}
