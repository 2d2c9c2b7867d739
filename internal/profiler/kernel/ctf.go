package kernel

import (
	"archive/tar"
	"compress/gzip"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The CTF 1.8 export ("kernel-ctf" artifact): a tar.gz of one directory
// holding a TSDL `metadata` file and binary stream files, the layout
// babeltrace2 and Trace Compass open. Stream class 0 carries the raw
// scheduler events of the snapshot's threads with LTTng's kernel event and
// field names (one stream per CPU, cpu_id in the packet context, env
// domain "kernel"), so Trace Compass can apply its kernel analyses; stream
// class 1 carries Rootline's derived data: rootline_thread_state (one per
// interval, at its start), rootline_wakeup (one per edge) and
// rootline_disk_io. Each stream file is one packet. Timestamps are
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
)

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

stream {
	id = 0;
	event.header := struct event_header;
	packet.context := struct {
		uint64_clock_monotonic_t timestamp_begin;
		uint64_clock_monotonic_t timestamp_end;
		uint64_t content_size;
		uint64_t packet_size;
		uint64_t packet_seq_num;
		uint64_t events_discarded;
		uint32_t cpu_id;
	};
};

stream {
	id = 1;
	event.header := struct event_header;
	packet.context := struct {
		uint64_clock_monotonic_t timestamp_begin;
		uint64_clock_monotonic_t timestamp_end;
		uint64_t content_size;
		uint64_t packet_size;
		uint64_t packet_seq_num;
		uint64_t events_discarded;
	};
};

event {
	name = "sched_switch";
	id = 0;
	stream_id = 0;
	fields := struct {
		char_t prev_comm[16];
		int32_t prev_tid;
		int32_t prev_prio;
		int64_t prev_state;
		char_t next_comm[16];
		int32_t next_tid;
		int32_t next_prio;
	};
};

event {
	name = "sched_waking";
	id = 1;
	stream_id = 0;
	fields := struct {
		char_t comm[16];
		int32_t tid;
		int32_t prio;
		int32_t target_cpu;
	};
};

event {
	name = "sched_wakeup";
	id = 2;
	stream_id = 0;
	fields := struct {
		char_t comm[16];
		int32_t tid;
		int32_t prio;
		int32_t target_cpu;
	};
};

event {
	name = "sched_wakeup_new";
	id = 3;
	stream_id = 0;
	fields := struct {
		char_t comm[16];
		int32_t tid;
		int32_t prio;
		int32_t target_cpu;
	};
};

event {
	name = "sched_process_fork";
	id = 4;
	stream_id = 0;
	fields := struct {
		char_t parent_comm[16];
		int32_t parent_tid;
		int32_t parent_pid;
		char_t child_comm[16];
		int32_t child_tid;
		int32_t child_pid;
	};
};

event {
	name = "sched_process_exec";
	id = 5;
	stream_id = 0;
	fields := struct {
		string filename;
		int32_t tid;
		int32_t old_tid;
	};
};

event {
	name = "sched_process_exit";
	id = 6;
	stream_id = 0;
	fields := struct {
		char_t comm[16];
		int32_t tid;
		int32_t prio;
	};
};

event {
	name = "rootline_thread_state";
	id = 100;
	stream_id = 1;
	fields := struct {
		int32_t tid;
		int32_t pid;
		string state;
		string reason;
		string syscall;
		uint64_t duration_ns;
		int32_t cpu;
		int32_t wakeup_id;
	};
};

event {
	name = "rootline_wakeup";
	id = 101;
	stream_id = 1;
	fields := struct {
		int32_t wakeup_id;
		int32_t wakee_tid;
		int32_t waker_tid;
		string waker_comm;
		string context;
		string detail;
		int32_t cpu;
		int64_t enqueue_delay_ns;
	};
};

event {
	name = "rootline_disk_io";
	id = 102;
	stream_id = 1;
	fields := struct {
		int32_t tid;
		uint32_t bytes;
		uint64_t latency_ns;
	};
};
`

// ctfStream builds one packet of one stream (little-endian, byte-aligned
// fields, as the metadata declares).
type ctfStream struct {
	buf    []byte
	last   int64
	events int
}

func (s *ctfStream) u32(v uint32) { s.buf = binary.LittleEndian.AppendUint32(s.buf, v) }
func (s *ctfStream) u64(v uint64) { s.buf = binary.LittleEndian.AppendUint64(s.buf, v) }
func (s *ctfStream) i32(v int32)  { s.u32(uint32(v)) }
func (s *ctfStream) i64(v int64)  { s.u64(uint64(v)) }
func (s *ctfStream) comm(c string) {
	var b [16]byte
	copy(b[:15], c)
	s.buf = append(s.buf, b[:]...)
}
func (s *ctfStream) str(v string) {
	s.buf = append(s.buf, strings.ReplaceAll(v, "\x00", "")...)
	s.buf = append(s.buf, 0)
}

// header starts an event; timestamps MUST not decrease within a stream.
func (s *ctfStream) header(id uint32, ts int64) {
	s.u32(id)
	s.u64(uint64(ts))
	s.last = ts
	s.events++
}

// packet returns the stream file's packet header and context; the events
// (s.buf) follow them in the file.
func (s *ctfStream) packet(uuid [16]byte, streamID uint32, instance uint64, begin, end int64, cpu int) []byte {
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
	h = le.AppendUint32(h, streamID)
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

func formatUUID(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// writeCTF writes the CTF export of snap (built from raw, whose times are
// CLOCK_MONOTONIC; offset turns them into Unix ns) as a tar.gz to w.
func writeCTF(w io.Writer, snap *Snapshot, raw []Event, offset int64, comm func(uint32) string, hostname string) error {
	var uuid [16]byte
	_, _ = rand.Read(uuid[:])
	uuid[6] = uuid[6]&0x0f | 0x40
	uuid[8] = uuid[8]&0x3f | 0x80
	begin, end := snap.Start-offset, snap.End-offset
	metadata := fmt.Sprintf(ctfMetadata, formatUUID(uuid), strings.ReplaceAll(hostname, `"`, ""), snap.PID,
		snap.Lost, offset/1e9, offset%1e9)

	perCPU := map[int]*ctfStream{}
	tgid := map[uint32]uint32{}
	for _, th := range snap.Threads {
		tgid[th.TID] = th.PID
	}
	for i := range raw {
		ev := &raw[i]
		s := perCPU[int(ev.CPU)]
		if s == nil {
			s = &ctfStream{buf: make([]byte, 0, 64*len(raw)/max(1, runtime.NumCPU()))}
			perCPU[int(ev.CPU)] = s
		}
		switch ev.Type {
		case EvSwitch:
			s.header(ctfSchedSwitch, ev.TS)
			s.comm(comm(ev.TID))
			s.i32(int32(ev.TID))
			s.i32(int32(ev.Prio))
			s.i64(reportedState(ev))
			s.comm(comm(ev.TID2))
			s.i32(int32(ev.TID2))
			s.i32(int32(ev.Prio2))
		case EvWaking, EvWakeup, EvWakeupNew:
			id := map[uint8]uint32{EvWaking: ctfSchedWaking, EvWakeup: ctfSchedWakeup, EvWakeupNew: ctfSchedWakeupNew}[ev.Type]
			s.header(id, ev.TS)
			s.comm(comm(ev.TID))
			s.i32(int32(ev.TID))
			s.i32(int32(ev.Prio))
			s.i32(int32(ev.TargetCPU))
		case EvFork:
			s.header(ctfProcessFork, ev.TS)
			s.comm(comm(ev.TID2))
			s.i32(int32(ev.TID2))
			s.i32(int32(ev.TGID2))
			s.comm(comm(ev.TID))
			s.i32(int32(ev.TID))
			s.i32(int32(ev.TGID))
		case EvExec:
			s.header(ctfProcessExec, ev.TS)
			s.str(comm(ev.TID))
			s.i32(int32(ev.TID))
			s.i32(int32(ev.TID))
		case EvExit:
			s.header(ctfProcessExit, ev.TS)
			s.comm(comm(ev.TID))
			s.i32(int32(ev.TID))
			s.i32(int32(ev.Prio))
		}
	}

	// Derived events, time-ordered in one stream.
	type derived struct {
		ts    int64
		kind  int
		index int
	}
	var ds []derived
	for i, iv := range snap.Intervals {
		ds = append(ds, derived{iv.Start - offset, ctfThreadState, i})
	}
	for i, wk := range snap.Wakeups {
		ds = append(ds, derived{max(wk.TS-offset, begin), ctfWakeup, i})
	}
	for i, d := range snap.DiskIOs {
		ds = append(ds, derived{max(d.Issue-offset, begin), ctfDiskIO, i})
	}
	slices.SortStableFunc(ds, func(a, b derived) int { return int(a.ts - b.ts) })
	rs := &ctfStream{buf: make([]byte, 0, 64*len(ds))}
	for _, d := range ds {
		rs.header(uint32(d.kind), d.ts)
		switch d.kind {
		case ctfThreadState:
			iv := snap.Intervals[d.index]
			rs.i32(int32(iv.TID))
			rs.i32(int32(tgid[iv.TID]))
			rs.str(iv.State)
			rs.str(iv.Reason)
			rs.str(iv.Syscall)
			rs.u64(uint64(iv.End - iv.Start))
			rs.i32(int32(iv.CPU))
			rs.i32(int32(iv.Wakeup))
		case ctfWakeup:
			wk := snap.Wakeups[d.index]
			rs.i32(int32(d.index))
			rs.i32(int32(wk.Wakee))
			rs.i32(int32(wk.Waker))
			rs.str(comm(wk.Waker))
			rs.str(wk.Context)
			rs.str(wk.Detail)
			rs.i32(int32(wk.CPU))
			delay := int64(-1)
			if wk.Enqueued != 0 {
				delay = wk.Enqueued - wk.TS
			}
			rs.i64(delay)
		case ctfDiskIO:
			io := snap.DiskIOs[d.index]
			rs.i32(int32(io.TID))
			rs.u32(io.Bytes)
			rs.u64(uint64(io.Complete - io.Issue))
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
		if err := add(fmt.Sprintf("channel0_%d", c), st.packet(uuid, 0, uint64(i), begin, end, c), st.buf); err != nil {
			return err
		}
	}
	if err := add("rootline_0", rs.packet(uuid, 1, uint64(len(cpus)), begin, end, -1), rs.buf); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}
