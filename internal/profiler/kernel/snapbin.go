package kernel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/klauspost/compress/zstd"
)

// The binary snapshot format (version 3), what Encode writes: a zstd frame
// (RFC 8878) holding
//
//	magic "RLKSNAP\x00", uvarint version (3),
//	sections: uvarint tag, uvarint length, length bytes of content.
//
// Every number is a varint (encoding/binary: uvarint, or zigzag varint for
// signed values and differences). Strings (comm, reasons, syscalls,
// devices, wakeup contexts…) are interned: written once in the strings
// section and referred to by index (0 is the empty string). An interval's
// state, reason, syscall and device together are one "interval kind", a
// wakeup's context, detail, device and causal flag one "wakeup kind", so a
// record names them with one small index. Intervals and wakeups are
// records in chunks of at most binChunk bytes, each value a difference from
// the previous record's (a thread's intervals are mostly contiguous: the
// start of one is the end of the one before, difference 0).
//
// Sections (tags), each once unless said otherwise:
//
//	1 meta: pid, start, end, lost, events, intervals, wakeups (the counts
//	  of the records), flags (1: follow present, 2: truncated present),
//	  [follow: max depth, max threads, recording 0/1], [truncated: depth, count]
//	2 strings: count, then for each: length, bytes
//	3 threads: count, then for each: tid, pid, comm, flags (1 target,
//	  2 kernel, 4 recorded, 8 observer), depth, since, unrecorded
//	4 interval kinds: count, then for each: state, reason, syscall, device
//	5 wakeup kinds: count, then for each: context, detail, device, causal 0/1
//	6 intervals (repeated, in order): count, then for each record:
//	  zigzag(tid − previous tid) (32-bit), kind×2 + 1 if it has a wakeup,
//	  zigzag(start − previous end), zigzag(end − start), zigzag(cpu),
//	  [zigzag(wakeup − previous wakeup)]
//	7 wakeups (repeated, in order): count, then for each record:
//	  zigzag(ts − previous ts), zigzag(wakee − previous wakee) (32-bit),
//	  zigzag(waker − wakee) (32-bit), kind×2 + 1 if enqueued is set,
//	  zigzag(cpu), [zigzag(enqueued − ts)]
//	8 disk I/Os: count, then for each: tid, issue, complete − issue, bytes, device
//
// A reader skips sections of tags it does not know (a later writer's
// additions that older readers may ignore); a change they must not ignore
// takes a new version. The previous format, version 2 (gzipped JSON, see
// EncodeJSON), is still read by DecodeSnapshot.

// BinaryVersion is the version of the binary snapshot format.
const BinaryVersion = 3

// MediaType is the media type of a kernel snapshot artifact as Encode
// writes it (version 3), MediaTypeJSON that of version 2 (gzipped JSON)
// artifacts stored before it.
const (
	MediaType     = "application/vnd.rootline.kernel-snapshot+zstd"
	MediaTypeJSON = "application/vnd.rootline.kernel-snapshot+json+gzip"
	// FileExt is the file name extension of a version 3 snapshot.
	FileExt = ".rlks.zst"
)

// binMagic starts a version 3 snapshot's content (after decompression).
const binMagic = "RLKSNAP\x00"

// zstdMagic starts a zstd frame.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// Section tags of the binary format.
const (
	secMeta          = 1
	secStrings       = 2
	secThreads       = 3
	secIntervalKinds = 4
	secWakeupKinds   = 5
	secIntervals     = 6
	secWakeups       = 7
	secDiskIOs       = 8
)

// Limits of the binary format: a snapshot is untrusted input.
const (
	// MaxBinarySnapshotBytes bounds a version 3 snapshot's decompressed
	// content: far above what a recorder's memory budget produces (a full
	// 128 MiB buffer gives ~35 MB), low enough that a hostile artifact
	// cannot exhaust the reader's memory.
	MaxBinarySnapshotBytes = 1 << 30
	// MaxBinaryRecords bounds the intervals, and the wakeups, of a
	// snapshot: 20 times what a full default buffer gives (3.3 M), and
	// about what the JSON format's 4 GiB bound allowed.
	MaxBinaryRecords = 1 << 26
	// maxBinString bounds one string of the strings section.
	maxBinString = 1 << 16
	// maxBinWindow bounds the zstd window a reader accepts (the writer
	// uses binWindow).
	maxBinWindow = 8 << 20
	// binChunk is the size past which a writer starts a new chunk of
	// records, and binWindow its zstd window.
	binChunk  = 1 << 20
	binWindow = 1 << 20
	// Minimum encoded sizes of a record, which bound the counts a section
	// may declare by its length.
	minIntervalBytes = 5
	minWakeupBytes   = 5
	minThreadBytes   = 7
	minKindBytes     = 4
	minDiskBytes     = 5
)

// ErrBadBinarySnapshot is wrapped by the errors of a malformed version 3
// snapshot (truncated, counts or indexes out of range, too large).
var ErrBadBinarySnapshot = errors.New("malformed kernel snapshot")

// IntervalKind is what intervals of a binary snapshot share: all but their
// thread, times, CPU and wakeup.
type IntervalKind struct{ State, Reason, Syscall, Device string }

// WakeupKind is what wakeups of a binary snapshot share: all but their time,
// threads, CPU and enqueue time.
type WakeupKind struct {
	Context, Detail, Device string
	Causal                  bool
}

// PackedInterval is an interval of a binary snapshot, its kind an index in
// BinarySnapshot.IntervalKinds.
type PackedInterval struct {
	Start, End int64
	TID        uint32
	Kind       uint32
	CPU        int32
	Wakeup     int32 // index in the wakeups, -1: none
}

// PackedWakeup is a wakeup of a binary snapshot, its kind an index in
// BinarySnapshot.WakeupKinds.
type PackedWakeup struct {
	TS, Enqueued int64
	Wakee, Waker uint32
	Kind         uint32
	CPU          int32
}

// BinarySnapshot is a version 3 snapshot read up to its records: the
// header fields, Threads, DiskIOs, Follow and Truncated of Snapshot are
// set; Intervals and Wakeups are not, and are read with EachInterval and
// EachWakeup (a reader that indexes them its own way need not build
// Interval values).
type BinarySnapshot struct {
	Snapshot
	IntervalKinds []IntervalKind
	WakeupKinds   []WakeupKind
	// NumIntervals and NumWakeups are the records' counts.
	NumIntervals, NumWakeups int
	ivChunks, wkChunks       [][]byte
}

// IsBinarySnapshot reports whether data starts as a version 3 snapshot
// (a zstd frame, or the uncompressed content), not a gzipped JSON one.
func IsBinarySnapshot(data []byte) bool {
	return bytes.HasPrefix(data, zstdMagic) || bytes.HasPrefix(data, []byte(binMagic))
}

// Encode writes s in the binary format (version 3), zstd-compressed.
func (s *Snapshot) Encode(w io.Writer) error {
	return s.encodeBinary(w, sliceIntervals(s.Intervals), true)
}

// EncodeUncompressed writes s in the binary format without compression
// (DecodeSnapshot reads it too).
func (s *Snapshot) EncodeUncompressed(w io.Writer) error {
	return s.encodeBinary(w, sliceIntervals(s.Intervals), false)
}

// binWriter builds a snapshot's content section by section.
type binWriter struct {
	w    io.Writer
	sec  []byte // the section being built
	hdr  []byte
	strs map[string]uint64
	list []string
}

func (b *binWriter) uv(v uint64) { b.sec = binary.AppendUvarint(b.sec, v) }
func (b *binWriter) sv(v int64)  { b.sec = binary.AppendVarint(b.sec, v) }

// zz32 is the zigzag form of a 32-bit difference.
func zz32(v uint32) uint64 { return uint64(uint32(int32(v)<<1) ^ uint32(int32(v)>>31)) }

func (b *binWriter) str(s string) {
	i, ok := b.strs[s]
	if !ok {
		i = uint64(len(b.list))
		b.strs[s] = i
		b.list = append(b.list, s)
	}
	b.uv(i)
}

func boolByte(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// flush writes the section built so far under tag.
func (b *binWriter) flush(tag uint64) error {
	b.hdr = binary.AppendUvarint(binary.AppendUvarint(b.hdr[:0], tag), uint64(len(b.sec)))
	if _, err := b.w.Write(b.hdr); err != nil {
		return err
	}
	_, err := b.w.Write(b.sec)
	b.sec = b.sec[:0]
	return err
}

// encodeBinary writes s with the intervals of ivs (s.Intervals is not read).
func (s *Snapshot) encodeBinary(w io.Writer, ivs intervalSource, compress bool) error {
	var zw *zstd.Encoder
	if compress {
		var err error
		// One goroutine: the recorder's dump should not take every CPU
		// of the node it observes.
		zw, err = zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(binWindow))
		if err != nil {
			return err
		}
		w = zw
	}
	b := &binWriter{w: w, sec: make([]byte, 0, binChunk+64), strs: map[string]uint64{"": 0}, list: []string{""}}
	b.sec = binary.AppendUvarint(append(b.sec, binMagic...), BinaryVersion)
	if _, err := w.Write(b.sec); err != nil {
		return err
	}
	b.sec = b.sec[:0]

	nIv := ivs.Len()
	b.uv(uint64(s.PID))
	b.sv(s.Start)
	b.sv(s.End)
	b.uv(s.Lost)
	b.uv(uint64(max(s.Events, 0)))
	b.uv(uint64(nIv))
	b.uv(uint64(len(s.Wakeups)))
	flags := uint64(0)
	if s.Follow != nil {
		flags |= 1
	}
	if s.Truncated != nil {
		flags |= 2
	}
	b.uv(flags)
	if f := s.Follow; f != nil {
		b.sv(int64(f.MaxDepth))
		b.sv(int64(f.MaxThreads))
		b.uv(boolByte(f.Recording))
	}
	if t := s.Truncated; t != nil {
		b.sv(int64(t.Depth))
		b.sv(int64(t.Count))
	}
	if err := b.flush(secMeta); err != nil {
		return err
	}

	b.uv(uint64(len(s.Threads)))
	for _, t := range s.Threads {
		b.uv(uint64(t.TID))
		b.uv(uint64(t.PID))
		b.str(t.Comm)
		b.uv(boolByte(t.Target) | boolByte(t.Kernel)<<1 | boolByte(t.Recorded)<<2 | boolByte(t.Observer)<<3)
		b.sv(int64(t.Depth))
		b.sv(t.Since)
		b.str(t.Unrecorded)
	}
	if err := b.flush(secThreads); err != nil {
		return err
	}

	// Wakeups, their kinds interned as they come; the kinds are written
	// after the records.
	wkinds := map[WakeupKind]uint64{}
	var wkList []WakeupKind
	var prevTS int64
	var prevWakee uint32
	n := 0
	flushChunk := func(tag uint64, force bool) error {
		if n == 0 || !force && len(b.sec) < binChunk {
			return nil
		}
		// The count goes before the records: tag, length, count, records.
		cnt := binary.AppendUvarint(nil, uint64(n))
		b.hdr = binary.AppendUvarint(binary.AppendUvarint(b.hdr[:0], tag), uint64(len(cnt)+len(b.sec)))
		b.hdr = append(b.hdr, cnt...)
		n = 0
		if _, err := b.w.Write(b.hdr); err != nil {
			return err
		}
		_, err := b.w.Write(b.sec)
		b.sec = b.sec[:0]
		return err
	}
	for _, wk := range s.Wakeups {
		k := WakeupKind{Context: wk.Context, Detail: wk.Detail, Device: wk.Device, Causal: wk.Causal}
		ki, ok := wkinds[k]
		if !ok {
			ki = uint64(len(wkList))
			wkinds[k] = ki
			wkList = append(wkList, k)
		}
		b.sv(wk.TS - prevTS)
		b.uv(zz32(wk.Wakee - prevWakee))
		b.uv(zz32(wk.Waker - wk.Wakee))
		enq := wk.Enqueued != 0
		b.uv(ki<<1 | boolByte(enq))
		b.sv(int64(wk.CPU))
		if enq {
			b.sv(wk.Enqueued - wk.TS)
		}
		prevTS, prevWakee = wk.TS, wk.Wakee
		n++
		if err := flushChunk(secWakeups, false); err != nil {
			return err
		}
	}
	if err := flushChunk(secWakeups, true); err != nil {
		return err
	}

	ikinds := map[IntervalKind]uint64{}
	var ikList []IntervalKind
	var last IntervalKind
	lastK := uint64(math.MaxUint64)
	var prevTID uint32
	prevEnd, prevWake := s.Start, int64(0)
	for i := range nIv {
		iv := ivs.At(i)
		k := IntervalKind{State: iv.State, Reason: iv.Reason, Syscall: iv.Syscall, Device: iv.Device}
		ki := lastK
		if k != last || lastK == math.MaxUint64 {
			var ok bool
			if ki, ok = ikinds[k]; !ok {
				ki = uint64(len(ikList))
				ikinds[k] = ki
				ikList = append(ikList, k)
			}
			last, lastK = k, ki
		}
		b.uv(zz32(iv.TID - prevTID))
		hasWake := iv.Wakeup >= 0
		b.uv(ki<<1 | boolByte(hasWake))
		b.sv(iv.Start - prevEnd)
		b.sv(iv.End - iv.Start)
		b.sv(int64(iv.CPU))
		if hasWake {
			b.sv(int64(iv.Wakeup) - prevWake)
			prevWake = int64(iv.Wakeup)
		}
		prevTID, prevEnd = iv.TID, iv.End
		n++
		if err := flushChunk(secIntervals, false); err != nil {
			return err
		}
	}
	if err := flushChunk(secIntervals, true); err != nil {
		return err
	}

	if len(s.DiskIOs) > 0 {
		b.uv(uint64(len(s.DiskIOs)))
		for _, d := range s.DiskIOs {
			b.uv(uint64(d.TID))
			b.sv(d.Issue)
			b.sv(d.Complete - d.Issue)
			b.uv(uint64(d.Bytes))
			b.str(d.Device)
		}
		if err := b.flush(secDiskIOs); err != nil {
			return err
		}
	}

	b.uv(uint64(len(ikList)))
	for _, k := range ikList {
		b.str(k.State)
		b.str(k.Reason)
		b.str(k.Syscall)
		b.str(k.Device)
	}
	if err := b.flush(secIntervalKinds); err != nil {
		return err
	}
	b.uv(uint64(len(wkList)))
	for _, k := range wkList {
		b.str(k.Context)
		b.str(k.Detail)
		b.str(k.Device)
		b.uv(boolByte(k.Causal))
	}
	if err := b.flush(secWakeupKinds); err != nil {
		return err
	}

	// The strings last: every section above added to them.
	b.uv(uint64(len(b.list)))
	for _, s := range b.list {
		b.uv(uint64(len(s)))
		b.sec = append(b.sec, s...)
	}
	if err := b.flush(secStrings); err != nil {
		return err
	}
	if zw != nil {
		return zw.Close()
	}
	return nil
}

// binReader reads varints from a section, remembering the first error.
type binReader struct {
	b   []byte
	i   int
	err error
	sec string // the section, for errors
}

func (r *binReader) fail(format string, a ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s section: %s", ErrBadBinarySnapshot, r.sec, fmt.Sprintf(format, a...))
	}
}

func (r *binReader) uv() uint64 {
	if r.i < len(r.b) && r.b[r.i] < 0x80 {
		v := uint64(r.b[r.i])
		r.i++
		return v
	}
	return r.uvSlow()
}

func (r *binReader) uvSlow() uint64 {
	v, n := binary.Uvarint(r.b[min(r.i, len(r.b)):])
	if n <= 0 {
		if n == 0 {
			r.fail("truncated at byte %d", r.i)
		} else {
			r.fail("varint overflows at byte %d", r.i)
		}
		r.i = len(r.b)
		return 0
	}
	r.i += n
	return v
}

// sv reads a zigzag varint.
func (r *binReader) sv() int64 {
	u := r.uv()
	return int64(u>>1) ^ -int64(u&1)
}

// u32 reads a uvarint that must fit 32 bits.
func (r *binReader) u32(what string) uint32 {
	v := r.uv()
	if v > math.MaxUint32 {
		r.fail("%s %d out of range", what, v)
		return 0
	}
	return uint32(v)
}

// d32 reads a 32-bit zigzag difference.
func (r *binReader) d32() uint32 {
	v := r.uv()
	if v > math.MaxUint32 {
		r.fail("difference %d out of range", v)
		return 0
	}
	u := uint32(v)
	return (u >> 1) ^ -(u & 1)
}

// i32 reads a zigzag varint that must fit an int32.
func (r *binReader) i32(what string) int32 {
	v := r.sv()
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.fail("%s %d out of range", what, v)
		return 0
	}
	return int32(v)
}

// count reads a count of records of at least minBytes each: it cannot
// exceed what the rest of the section holds.
func (r *binReader) count(what string, minBytes int) int {
	v := r.uv()
	if r.err == nil && v > uint64(len(r.b)-r.i)/uint64(minBytes) {
		r.fail("%d %s in %d bytes", v, what, len(r.b)-r.i)
		return 0
	}
	return int(v)
}

// end checks that the section was read to its last byte.
func (r *binReader) end() error {
	if r.err == nil && r.i != len(r.b) {
		r.fail("%d bytes left over", len(r.b)-r.i)
	}
	return r.err
}

// inflateBinary returns the content of a version 3 snapshot: data itself,
// or its zstd frames decompressed, at most MaxBinarySnapshotBytes.
func inflateBinary(data []byte) ([]byte, error) {
	if !bytes.HasPrefix(data, zstdMagic) {
		if len(data) > MaxBinarySnapshotBytes {
			return nil, fmt.Errorf("%w: larger than %d bytes", ErrBadBinarySnapshot, MaxBinarySnapshotBytes)
		}
		return data, nil
	}
	zr, err := zstd.NewReader(bytes.NewReader(data), zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(maxBinWindow), zstd.WithDecoderMaxMemory(MaxBinarySnapshotBytes))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	// The buffer grows with what the frames actually hold, not with
	// the size they claim; a first guess from the compressed size saves
	// most of the regrowth.
	out := bytes.NewBuffer(make([]byte, 0, min(4*len(data), MaxBinarySnapshotBytes)+bytes.MinRead))
	if _, err := out.ReadFrom(io.LimitReader(zr, MaxBinarySnapshotBytes+1)); err != nil {
		return nil, fmt.Errorf("%w: zstd: %v", ErrBadBinarySnapshot, err)
	}
	if out.Len() > MaxBinarySnapshotBytes {
		return nil, fmt.Errorf("%w: decompresses to more than %d bytes", ErrBadBinarySnapshot, MaxBinarySnapshotBytes)
	}
	return out.Bytes(), nil
}

// ReadBinarySnapshot reads a version 3 snapshot (Encode's output) up to its
// records; errors wrap ErrBadBinarySnapshot, or ErrSnapshotVersion for a
// later version. Every count, length and index is checked against the
// bytes that hold it and the tables it refers to.
func ReadBinarySnapshot(data []byte) (*BinarySnapshot, error) {
	body, err := inflateBinary(data)
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(body, []byte(binMagic)) {
		return nil, fmt.Errorf("%w: no %q magic", ErrBadBinarySnapshot, binMagic[:7])
	}
	hr := &binReader{b: body, i: len(binMagic), sec: "header"}
	version := hr.uv()
	if hr.err != nil {
		return nil, hr.err
	}
	if version != BinaryVersion {
		return nil, fmt.Errorf("%w %d (this build reads 1, 2 and 3)", ErrSnapshotVersion, version)
	}
	secs := map[uint64][]byte{}
	bs := &BinarySnapshot{}
	for hr.i < len(body) {
		tag := hr.uv()
		n := hr.uv()
		if hr.err != nil {
			return nil, hr.err
		}
		if n > uint64(len(body)-hr.i) {
			return nil, fmt.Errorf("%w: section %d of %d bytes, %d left", ErrBadBinarySnapshot, tag, n, len(body)-hr.i)
		}
		sec := body[hr.i : hr.i+int(n)]
		hr.i += int(n)
		switch tag {
		case secIntervals:
			bs.ivChunks = append(bs.ivChunks, sec)
		case secWakeups:
			bs.wkChunks = append(bs.wkChunks, sec)
		case secMeta, secStrings, secThreads, secIntervalKinds, secWakeupKinds, secDiskIOs:
			if _, dup := secs[tag]; dup {
				return nil, fmt.Errorf("%w: section %d twice", ErrBadBinarySnapshot, tag)
			}
			secs[tag] = sec
		}
	}
	for _, tag := range []uint64{secMeta, secStrings, secThreads, secIntervalKinds, secWakeupKinds} {
		if _, ok := secs[tag]; !ok {
			return nil, fmt.Errorf("%w: no section %d", ErrBadBinarySnapshot, tag)
		}
	}
	s := &bs.Snapshot
	s.Version = BinaryVersion

	r := &binReader{b: secs[secStrings], sec: "strings"}
	strs := make([]string, r.count("strings", 1))
	for i := range strs {
		n := r.uv()
		if n > maxBinString || n > uint64(len(r.b)-r.i) {
			r.fail("string %d of %d bytes, %d left", i, n, len(r.b)-r.i)
			break
		}
		strs[i] = string(r.b[r.i : r.i+int(n)])
		r.i += int(n)
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	str := func(r *binReader) string {
		i := r.uv()
		if i >= uint64(len(strs)) {
			r.fail("string %d of %d", i, len(strs))
			return ""
		}
		return strs[i]
	}

	r = &binReader{b: secs[secMeta], sec: "meta"}
	s.PID = r.u32("pid")
	s.Start, s.End = r.sv(), r.sv()
	s.Lost = r.uv()
	events := r.uv()
	nIv, nWk := r.uv(), r.uv()
	flags := r.uv()
	if flags&1 != 0 {
		s.Follow = &Follow{MaxDepth: int(r.sv()), MaxThreads: int(r.sv()), Recording: r.uv() != 0}
	}
	if flags&2 != 0 {
		s.Truncated = &Truncation{Depth: int(r.sv()), Count: int(r.sv())}
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	s.Events = int(min(events, math.MaxInt))
	var ivBytes, wkBytes int
	for _, c := range bs.ivChunks {
		ivBytes += len(c)
	}
	for _, c := range bs.wkChunks {
		wkBytes += len(c)
	}
	if nIv > MaxBinaryRecords || nWk > MaxBinaryRecords {
		return nil, fmt.Errorf("%w: %d intervals, %d wakeups: more than %d", ErrBadBinarySnapshot, nIv, nWk, MaxBinaryRecords)
	}
	if nIv > uint64(ivBytes/minIntervalBytes) || nWk > uint64(wkBytes/minWakeupBytes) {
		return nil, fmt.Errorf("%w: %d intervals in %d bytes, %d wakeups in %d bytes", ErrBadBinarySnapshot, nIv, ivBytes, nWk, wkBytes)
	}
	bs.NumIntervals, bs.NumWakeups = int(nIv), int(nWk)

	r = &binReader{b: secs[secThreads], sec: "threads"}
	s.Threads = make([]Thread, r.count("threads", minThreadBytes))
	for i := range s.Threads {
		t := &s.Threads[i]
		t.TID, t.PID = r.u32("tid"), r.u32("pid")
		t.Comm = str(r)
		f := r.uv()
		t.Target, t.Kernel, t.Recorded, t.Observer = f&1 != 0, f&2 != 0, f&4 != 0, f&8 != 0
		t.Depth = int(r.sv())
		t.Since = r.sv()
		t.Unrecorded = str(r)
		if r.err != nil {
			break
		}
	}
	if err := r.end(); err != nil {
		return nil, err
	}

	r = &binReader{b: secs[secIntervalKinds], sec: "interval kinds"}
	bs.IntervalKinds = make([]IntervalKind, r.count("kinds", minKindBytes))
	for i := range bs.IntervalKinds {
		bs.IntervalKinds[i] = IntervalKind{State: str(r), Reason: str(r), Syscall: str(r), Device: str(r)}
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	r = &binReader{b: secs[secWakeupKinds], sec: "wakeup kinds"}
	bs.WakeupKinds = make([]WakeupKind, r.count("kinds", minKindBytes))
	for i := range bs.WakeupKinds {
		bs.WakeupKinds[i] = WakeupKind{Context: str(r), Detail: str(r), Device: str(r), Causal: r.uv() != 0}
	}
	if err := r.end(); err != nil {
		return nil, err
	}

	if sec, ok := secs[secDiskIOs]; ok {
		r = &binReader{b: sec, sec: "disk I/O"}
		s.DiskIOs = make([]DiskIO, r.count("disk I/Os", minDiskBytes))
		for i := range s.DiskIOs {
			d := &s.DiskIOs[i]
			d.TID = r.u32("tid")
			d.Issue = r.sv()
			d.Complete = d.Issue + r.sv()
			d.Bytes = r.u32("bytes")
			d.Device = str(r)
		}
		if err := r.end(); err != nil {
			return nil, err
		}
	}
	return bs, nil
}

// eachRecord reads the records of chunks (each: a count, then records of
// at least minBytes), declared of them in all, calling rec for each (k: its
// index) until one fails.
func eachRecord(chunks [][]byte, declared int, what string, minBytes int, rec func(r *binReader, k int)) error {
	k := 0
	for _, c := range chunks {
		r := &binReader{b: c, sec: what}
		n := r.count(what, minBytes)
		if k+n > declared {
			r.fail("more than the %d %s declared", declared, what)
		}
		for ; n > 0 && r.err == nil; n-- {
			rec(r, k)
			k++
		}
		if err := r.end(); err != nil {
			return err
		}
	}
	if k != declared {
		return fmt.Errorf("%w: %d %s of the %d declared", ErrBadBinarySnapshot, k, what, declared)
	}
	return nil
}

// EachWakeup calls fn with each wakeup, in order (k: its index). It stops
// at the first malformed record and returns its error.
func (bs *BinarySnapshot) EachWakeup(fn func(k int, w *PackedWakeup)) error {
	var w PackedWakeup
	nk := uint64(len(bs.WakeupKinds))
	return eachRecord(bs.wkChunks, bs.NumWakeups, "wakeups", minWakeupBytes, func(r *binReader, k int) {
		w.TS += r.sv()
		w.Wakee += r.d32()
		w.Waker = w.Wakee + r.d32()
		ki := r.uv()
		w.Kind = uint32(ki >> 1)
		if ki>>1 >= nk {
			r.fail("wakeup %d: kind %d of %d", k, ki>>1, nk)
		}
		w.CPU = r.i32("cpu")
		w.Enqueued = 0
		if ki&1 != 0 {
			w.Enqueued = w.TS + r.sv()
		}
		if r.err == nil {
			fn(k, &w)
		}
	})
}

// EachInterval calls fn with each interval, in order (k: its index). It
// stops at the first malformed record (a wakeup index out of range
// included) and returns its error.
func (bs *BinarySnapshot) EachInterval(fn func(k int, iv *PackedInterval)) error {
	var iv PackedInterval
	nk := uint64(len(bs.IntervalKinds))
	nw := int64(bs.NumWakeups)
	iv.End = bs.Start
	var wake int64
	return eachRecord(bs.ivChunks, bs.NumIntervals, "intervals", minIntervalBytes, func(r *binReader, k int) {
		iv.TID += r.d32()
		ki := r.uv()
		iv.Kind = uint32(ki >> 1)
		if ki>>1 >= nk {
			r.fail("interval %d: kind %d of %d", k, ki>>1, nk)
		}
		iv.Start = iv.End + r.sv()
		iv.End = iv.Start + r.sv()
		iv.CPU = r.i32("cpu")
		iv.Wakeup = -1
		if ki&1 != 0 {
			wake += r.sv()
			if wake < 0 || wake >= nw {
				r.fail("interval %d: wakeup %d of %d", k, wake, nw)
			}
			iv.Wakeup = int32(wake)
		}
		if r.err == nil {
			fn(k, &iv)
		}
	})
}

// decodeBinary reads a whole version 3 snapshot.
func decodeBinary(data []byte) (*Snapshot, error) {
	bs, err := ReadBinarySnapshot(data)
	if err != nil {
		return nil, err
	}
	s := bs.Snapshot
	s.Wakeups = make([]Wakeup, bs.NumWakeups)
	if err := bs.EachWakeup(func(k int, w *PackedWakeup) {
		kind := &bs.WakeupKinds[w.Kind]
		s.Wakeups[k] = Wakeup{TS: w.TS, Wakee: w.Wakee, Waker: w.Waker, Context: kind.Context, Detail: kind.Detail,
			Causal: kind.Causal, Device: kind.Device, CPU: int(w.CPU), Enqueued: w.Enqueued}
	}); err != nil {
		return nil, err
	}
	s.Intervals = make([]Interval, bs.NumIntervals)
	if err := bs.EachInterval(func(k int, iv *PackedInterval) {
		kind := &bs.IntervalKinds[iv.Kind]
		s.Intervals[k] = Interval{TID: iv.TID, State: kind.State, Reason: kind.Reason, Syscall: kind.Syscall, Device: kind.Device,
			Start: iv.Start, End: iv.End, CPU: int(iv.CPU), Wakeup: int(iv.Wakeup)}
	}); err != nil {
		return nil, err
	}
	return &s, nil
}
