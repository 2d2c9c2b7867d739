package kernel

import (
	"archive/tar"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/rootline/rootline/internal/profiler"
)

// The CTF 1.8 export ("kernel-ctf" artifact): a tar.gz of one directory
// holding a TSDL `metadata` file and binary stream files, the layout
// babeltrace2 and Trace Compass open. Stream class 0 carries the raw
// scheduler events of the snapshot's threads with LTTng's kernel event and
// field names (one stream per CPU, cpu_id in the packet context, env
// domain "kernel"), so Trace Compass can apply its kernel analyses; stream
// class 1 carries Rootline's derived data: rootline_thread (one per
// snapshot thread, at the window's start: the target's and the followed
// wakers, with their depth), rootline_thread_state (one per interval, at
// its start), rootline_wakeup (one per edge) and rootline_disk_io. Each
// stream file is one packet. Timestamps are
// CLOCK_MONOTONIC ns; the clock's offset makes them Unix time.

const ctfMagic = 0xC1FC1FC1

// Event class ids of the export.
const (
	ctfSchedSwitch    = 0
	ctfSchedWaking    = 1
	ctfSchedWakeup    = 2
	ctfSchedWakeupNew = 3
	ctfProcessFork    = 4
	ctfProcessExec    = 5
	ctfProcessExit    = 6
	ctfThreadState    = 100
	ctfWakeup         = 101
	ctfDiskIO         = 102
	ctfThread         = 103
	ctfSpanBegin      = 104
	ctfSpanEnd        = 105
)

// ctfMetadata is the TSDL metadata up to the stream and event classes
// (ctfClassMetadata follows it).
const ctfMetadata = `/* CTF 1.8 */

typealias integer { size = 8; align = 8; signed = false; } := uint8_t;
typealias integer { size = 32; align = 8; signed = false; } := uint32_t;
typealias integer { size = 64; align = 8; signed = false; } := uint64_t;
typealias integer { size = 32; align = 8; signed = true; } := int32_t;
typealias integer { size = 64; align = 8; signed = true; } := int64_t;
typealias integer { size = 8; align = 8; signed = true; encoding = UTF8; } := char_t;

trace {
	major = 1;
	minor = 8;
	uuid = "%[1]s";
	byte_order = le;
	packet.header := struct {
		uint32_t magic;
		uint8_t  uuid[16];
		uint32_t stream_id;
		uint64_t stream_instance_id;
	};
};

env {
	domain = "kernel";
	tracer_name = "lttng-modules";
	tracer_major = 2;
	tracer_minor = 13;
	tracer_patchlevel = 0;
	hostname = "%[2]s";
	rootline_producer = "rootline agent kernel recorder";
	rootline_pid = %[3]d;
	rootline_lost_events = %[4]d;
};

clock {
	name = "monotonic";
	uuid = "%[1]s";
	description = "CLOCK_MONOTONIC";
	freq = 1000000000;
	precision = 1;
	offset_s = %[5]d;
	offset = %[6]d;
	absolute = FALSE;
};

typealias integer { size = 64; align = 8; signed = false; map = clock.monotonic.value; } := uint64_clock_monotonic_t;

struct event_header {
	uint32_t id;
	uint64_clock_monotonic_t timestamp;
};
`

// ctfStreamMetadata declares a stream class (%d: its id) after ctfMetadata;
// its packet context is what ctfStream.packet writes (%s: the stream's own
// fields, cpu_id for the per-CPU streams of class 0).
const ctfStreamMetadata = `
stream {
	id = %d;
	event.header := struct event_header;
	packet.context := struct {
		uint64_clock_monotonic_t timestamp_begin;
		uint64_clock_monotonic_t timestamp_end;
		uint64_t content_size;
		uint64_t packet_size;
		uint64_t packet_seq_num;
		uint64_t events_discarded;
%s	};
};
`

// ctfType is the type of an event field: how the metadata declares it and
// how ctfStream.event encodes it (little-endian, byte-aligned).
type ctfType uint8

// The integer types take a value of any Go integer type and keep its low
// bits, as a conversion does.
const (
	ctfInt32 ctfType = iota
	ctfInt64
	ctfUint32
	ctfUint64
	ctfComm   // char_t[16]: a thread name, cut to 15 bytes, NUL-padded
	ctfString // NUL-terminated; NULs in the value are dropped
)

// ctfDecl is the TSDL declaration of each field type (%s: the field's name).
var ctfDecl = [...]string{
	ctfInt32:  "int32_t %s",
	ctfInt64:  "int64_t %s",
	ctfUint32: "uint32_t %s",
	ctfUint64: "uint64_t %s",
	ctfComm:   "char_t %s[16]",
	ctfString: "string %s",
}

// ctfField is one field of an event class.
type ctfField struct {
	name string
	typ  ctfType
}

// ctfEventClass is one event class of the export.
type ctfEventClass struct {
	id     uint32
	name   string
	stream uint32 // 0: the raw scheduler events, 1: Rootline's derived data
	fields []ctfField
}

// ctfWakeFields are the fields of sched_waking, sched_wakeup and
// sched_wakeup_new.
var ctfWakeFields = []ctfField{{"comm", ctfComm}, {"tid", ctfInt32}, {"prio", ctfInt32}, {"target_cpu", ctfInt32}}

// ctfEvents are the export's event classes, in the order the metadata
// declares them. The metadata and the encoding of each event
// (ctfStream.event, whose values follow the field list) both come from
// this table: adding an event class is an entry here and a call of event
// where writeCTF writes it.
var ctfEvents = []ctfEventClass{
	{ctfSchedSwitch, "sched_switch", 0, []ctfField{
		{"prev_comm", ctfComm}, {"prev_tid", ctfInt32}, {"prev_prio", ctfInt32}, {"prev_state", ctfInt64},
		{"next_comm", ctfComm}, {"next_tid", ctfInt32}, {"next_prio", ctfInt32}}},
	{ctfSchedWaking, "sched_waking", 0, ctfWakeFields},
	{ctfSchedWakeup, "sched_wakeup", 0, ctfWakeFields},
	{ctfSchedWakeupNew, "sched_wakeup_new", 0, ctfWakeFields},
	{ctfProcessFork, "sched_process_fork", 0, []ctfField{
		{"parent_comm", ctfComm}, {"parent_tid", ctfInt32}, {"parent_pid", ctfInt32},
		{"child_comm", ctfComm}, {"child_tid", ctfInt32}, {"child_pid", ctfInt32}}},
	{ctfProcessExec, "sched_process_exec", 0, []ctfField{
		{"filename", ctfString}, {"tid", ctfInt32}, {"old_tid", ctfInt32}}},
	{ctfProcessExit, "sched_process_exit", 0, []ctfField{
		{"comm", ctfComm}, {"tid", ctfInt32}, {"prio", ctfInt32}}},
	{ctfThreadState, "rootline_thread_state", 1, []ctfField{
		{"tid", ctfInt32}, {"pid", ctfInt32}, {"state", ctfString}, {"reason", ctfString},
		{"syscall", ctfString}, {"device", ctfString}, {"duration_ns", ctfUint64}, {"cpu", ctfInt32}, {"wakeup_id", ctfInt32}}},
	{ctfWakeup, "rootline_wakeup", 1, []ctfField{
		{"wakeup_id", ctfInt32}, {"wakee_tid", ctfInt32}, {"waker_tid", ctfInt32}, {"waker_comm", ctfString},
		{"context", ctfString}, {"detail", ctfString}, {"causal", ctfUint32}, {"device", ctfString},
		{"cpu", ctfInt32}, {"enqueue_delay_ns", ctfInt64}}},
	{ctfDiskIO, "rootline_disk_io", 1, []ctfField{
		{"tid", ctfInt32}, {"bytes", ctfUint32}, {"latency_ns", ctfUint64}, {"device", ctfString}}},
	// One per snapshot thread, at the window's start: which threads are the
	// target's and which are (followed) wakers.
	{ctfThread, "rootline_thread", 1, []ctfField{
		{"tid", ctfInt32}, {"pid", ctfInt32}, {"comm", ctfString}, {"target", ctfUint32}, {"depth", ctfInt32},
		{"recorded", ctfUint32}, {"unrecorded", ctfString}, {"kernel", ctfUint32}}},
	// The requests the dump explains, begun and ended on each thread that
	// served them (tid 0: the thread is not known): the user-space
	// synchronization events of "Combining distributed and kernel tracing"
	// (Gelle et al.), so that a trace viewer shows which request each
	// thread served. partial = 1: the span began before or ended after the
	// window, and the event is at the window's edge.
	{ctfSpanBegin, "rootline_span_begin", 1, ctfSpanFields},
	{ctfSpanEnd, "rootline_span_end", 1, ctfSpanFields},
}

// ctfSpanFields are the fields of rootline_span_begin and rootline_span_end.
var ctfSpanFields = []ctfField{{"tid", ctfInt32}, {"trace_id", ctfString}, {"span_id", ctfString},
	{"parent_span_id", ctfString}, {"service", ctfString}, {"operation", ctfString}, {"partial", ctfUint32}}

// ctfEventByID indexes ctfEvents by id.
var ctfEventByID = func() map[uint32]*ctfEventClass {
	m := make(map[uint32]*ctfEventClass, len(ctfEvents))
	for i := range ctfEvents {
		m[ctfEvents[i].id] = &ctfEvents[i]
	}
	return m
}()

// ctfClassMetadata is the TSDL of the stream and event classes, the end of
// the metadata.
var ctfClassMetadata = func() string {
	var b strings.Builder
	fmt.Fprintf(&b, ctfStreamMetadata, 0, "\t\tuint32_t cpu_id;\n")
	fmt.Fprintf(&b, ctfStreamMetadata, 1, "")
	for _, c := range ctfEvents {
		fmt.Fprintf(&b, "\nevent {\n\tname = \"%s\";\n\tid = %d;\n\tstream_id = %d;\n\tfields := struct {\n", c.name, c.id, c.stream)
		for _, f := range c.fields {
			fmt.Fprintf(&b, "\t\t"+ctfDecl[f.typ]+";\n", f.name)
		}
		b.WriteString("\t};\n};\n")
	}
	return b.String()
}()

// ctfStream builds one packet of one stream (little-endian, byte-aligned
// fields, as the metadata declares).
type ctfStream struct {
	id     uint32 // stream class
	buf    []byte
	last   int64
	events int
}

// event appends an event of class id at ts; timestamps MUST not decrease
// within a stream. vals are the values of the class's fields in their
// order: a string for ctfComm and ctfString, any integer type otherwise.
func (s *ctfStream) event(id uint32, ts int64, vals ...any) {
	c := ctfEventByID[id]
	if c == nil || c.stream != s.id || len(vals) != len(c.fields) {
		panic("ctf: event does not match its class")
	}
	le := binary.LittleEndian
	s.buf = le.AppendUint32(s.buf, id)
	s.buf = le.AppendUint64(s.buf, uint64(ts))
	s.last = ts
	s.events++
	for i, f := range c.fields {
		switch f.typ {
		case ctfInt32, ctfUint32:
			s.buf = le.AppendUint32(s.buf, uint32(ctfInt(vals[i])))
		case ctfInt64, ctfUint64:
			s.buf = le.AppendUint64(s.buf, uint64(ctfInt(vals[i])))
		case ctfComm:
			var b [16]byte
			copy(b[:15], vals[i].(string))
			s.buf = append(s.buf, b[:]...)
		case ctfString:
			s.buf = append(s.buf, strings.ReplaceAll(vals[i].(string), "\x00", "")...)
			s.buf = append(s.buf, 0)
		}
	}
}

// ctfInt is an integer field's value; the field keeps its low bits.
func ctfInt(v any) int64 {
	switch v := v.(type) {
	case int:
		return int64(v)
	case int16:
		return int64(v)
	case int32:
		return int64(v)
	case int64:
		return v
	case uint16:
		return int64(v)
	case uint32:
		return int64(v)
	case uint64:
		return int64(v)
	}
	panic("ctf: an integer field's value is not an integer")
}

// packet returns the stream file's packet header and context; the events
// (s.buf) follow them in the file.
func (s *ctfStream) packet(uuid [16]byte, instance uint64, begin, end int64, cpu int) []byte {
	ctxLen := 8 * 6
	if cpu >= 0 {
		ctxLen += 4
	}
	const headerLen = 4 + 16 + 4 + 8
	size := uint64(headerLen+ctxLen+len(s.buf)) * 8
	h := make([]byte, 0, headerLen+ctxLen)
	le := binary.LittleEndian
	h = le.AppendUint32(h, ctfMagic)
	h = append(h, uuid[:]...)
	h = le.AppendUint32(h, s.id)
	h = le.AppendUint64(h, instance)
	h = le.AppendUint64(h, uint64(begin))
	h = le.AppendUint64(h, uint64(max(end, begin, s.last)))
	h = le.AppendUint64(h, size) // content_size (bits)
	h = le.AppendUint64(h, size) // packet_size (bits)
	h = le.AppendUint64(h, 0)    // packet_seq_num
	h = le.AppendUint64(h, 0)    // events_discarded
	if cpu >= 0 {
		h = le.AppendUint32(h, uint32(cpu))
	}
	return h
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func formatUUID(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// writeCTF writes the CTF export of snap (built from events, whose times are
// CLOCK_MONOTONIC; offset turns them into Unix ns; raw selects those the
// export carries), with the begin and end of spans on their threads, as a
// tar.gz to w.
func writeCTF(w io.Writer, snap *Snapshot, ivs intervalSource, events []Event, raw func(*Event) bool, spans []profiler.Span, offset int64,
	comm func(uint32) string, hostname string) error {
	var uuid [16]byte
	_, _ = rand.Read(uuid[:])
	uuid[6] = uuid[6]&0x0f | 0x40
	uuid[8] = uuid[8]&0x3f | 0x80
	begin, end := snap.Start-offset, snap.End-offset
	metadata := fmt.Sprintf(ctfMetadata, formatUUID(uuid), strings.ReplaceAll(hostname, `"`, ""), snap.PID,
		snap.Lost, offset/1e9, offset%1e9) + ctfClassMetadata

	perCPU := map[int]*ctfStream{}
	tgid := map[uint32]uint32{}
	for _, th := range snap.Threads {
		tgid[th.TID] = th.PID
	}
	for i := range events {
		ev := &events[i]
		if !raw(ev) {
			continue
		}
		s := perCPU[int(ev.CPU)]
		if s == nil {
			s = &ctfStream{id: 0, buf: make([]byte, 0, 64*len(events)/max(1, runtime.NumCPU()))}
			perCPU[int(ev.CPU)] = s
		}
		switch ev.Type {
		case EvSwitch:
			s.event(ctfSchedSwitch, ev.TS, comm(ev.TID), ev.TID, ev.Prio, reportedState(ev), comm(ev.TID2), ev.TID2, ev.Prio2)
		case EvWaking:
			s.event(ctfSchedWaking, ev.TS, comm(ev.TID), ev.TID, ev.Prio, ev.TargetCPU)
		case EvWakeup:
			s.event(ctfSchedWakeup, ev.TS, comm(ev.TID), ev.TID, ev.Prio, ev.TargetCPU)
		case EvWakeupNew:
			s.event(ctfSchedWakeupNew, ev.TS, comm(ev.TID), ev.TID, ev.Prio, ev.TargetCPU)
		case EvFork:
			s.event(ctfProcessFork, ev.TS, comm(ev.TID2), ev.TID2, ev.TGID2, comm(ev.TID), ev.TID, ev.TGID)
		case EvExec:
			s.event(ctfProcessExec, ev.TS, comm(ev.TID), ev.TID, ev.TID)
		case EvExit:
			s.event(ctfProcessExit, ev.TS, comm(ev.TID), ev.TID, ev.Prio)
		}
	}

	// Derived events, time-ordered in one stream.
	type derived struct {
		ts    int64
		kind  int
		index int
	}
	var ds []derived
	for i := range snap.Threads {
		ds = append(ds, derived{begin, ctfThread, i})
	}
	for i, n := 0, ivs.Len(); i < n; i++ {
		ds = append(ds, derived{ivs.At(i).Start - offset, ctfThreadState, i})
	}
	for i, wk := range snap.Wakeups {
		ds = append(ds, derived{max(wk.TS-offset, begin), ctfWakeup, i})
	}
	for i, d := range snap.DiskIOs {
		ds = append(ds, derived{max(d.Issue-offset, begin), ctfDiskIO, i})
	}
	// Span marks: a begin and an end per span and thread.
	type mark struct {
		span int
		tid  uint32
	}
	var marks []mark
	for i, sp := range spans {
		st, en := sp.Start.UnixNano()-offset, sp.End.UnixNano()-offset
		if en < begin || st > end {
			continue
		}
		tids := sp.TIDs
		if len(tids) == 0 {
			tids = []uint32{0}
		}
		for _, tid := range tids {
			ds = append(ds, derived{max(st, begin), ctfSpanBegin, len(marks)}, derived{min(en, end), ctfSpanEnd, len(marks)})
			marks = append(marks, mark{i, tid})
		}
	}
	slices.SortStableFunc(ds, func(a, b derived) int { return int(a.ts - b.ts) })
	rs := &ctfStream{id: 1, buf: make([]byte, 0, 64*len(ds))}
	for _, d := range ds {
		switch d.kind {
		case ctfThreadState:
			iv := ivs.At(d.index)
			rs.event(ctfThreadState, d.ts, iv.TID, tgid[iv.TID], iv.State, iv.Reason, iv.Syscall, iv.Device, iv.End-iv.Start, iv.CPU, iv.Wakeup)
		case ctfWakeup:
			wk := snap.Wakeups[d.index]
			delay := int64(-1)
			if wk.Enqueued != 0 {
				delay = wk.Enqueued - wk.TS
			}
			rs.event(ctfWakeup, d.ts, d.index, wk.Wakee, wk.Waker, comm(wk.Waker), wk.Context, wk.Detail, b2u(wk.Causal), wk.Device, wk.CPU, delay)
		case ctfDiskIO:
			io := snap.DiskIOs[d.index]
			rs.event(ctfDiskIO, d.ts, io.TID, io.Bytes, io.Complete-io.Issue, io.Device)
		case ctfThread:
			th := snap.Threads[d.index]
			rs.event(ctfThread, d.ts, th.TID, th.PID, th.Comm, b2u(th.Target), th.Depth, b2u(th.Recorded), th.Unrecorded, b2u(th.Kernel))
		case ctfSpanBegin, ctfSpanEnd:
			m := marks[d.index]
			sp := spans[m.span]
			partial := sp.Start.UnixNano()-offset < begin
			if d.kind == ctfSpanEnd {
				partial = sp.End.UnixNano()-offset > end
			}
			rs.event(uint32(d.kind), d.ts, m.tid, sp.TraceID, sp.SpanID, sp.ParentSpanID, sp.Service, sp.Operation, b2u(partial))
		}
	}

	dir := fmt.Sprintf("kernel-ctf-%d", snap.PID)
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed) // large dumps: speed over size
	tw := tar.NewWriter(zw)
	now := time.Now()
	add := func(name string, parts ...[]byte) error {
		size := 0
		for _, p := range parts {
			size += len(p)
		}
		if err := tw.WriteHeader(&tar.Header{Name: dir + "/" + name, Mode: 0o644, Size: int64(size), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		for _, p := range parts {
			if _, err := tw.Write(p); err != nil {
				return err
			}
		}
		return nil
	}
	if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Mode: 0o755, ModTime: now, Typeflag: tar.TypeDir}); err != nil {
		return err
	}
	if err := add("metadata", []byte(metadata)); err != nil {
		return err
	}
	cpus := make([]int, 0, len(perCPU))
	for c := range perCPU {
		cpus = append(cpus, c)
	}
	slices.Sort(cpus)
	for i, c := range cpus {
		st := perCPU[c]
		if err := add(fmt.Sprintf("channel0_%d", c), st.packet(uuid, uint64(i), begin, end, c), st.buf); err != nil {
			return err
		}
	}
	if err := add("rootline_0", rs.packet(uuid, uint64(len(cpus)), begin, end, -1), rs.buf); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}
