package jfr

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/grafana/jfr-parser/parser"
)

// Pause is a stop-the-world pause of a JVM: while it lasts, no Java thread
// runs.
type Pause struct {
	Start, End int64 // Unix ns
}

// pauseEvent is the JFR event of a whole GC pause (its sub-phases are the
// jdk.GCPhasePauseLevel* events). The default and profile settings record
// it with no threshold.
const pauseEvent = "jdk.GCPhasePause"

// maxPauses bounds the pauses read from one recording.
const maxPauses = 1 << 20

// GCPauses reads the garbage-collection pauses (jdk.GCPhasePause events) of
// a JFR recording, sorted by start (threads' buffers reach the file out of
// order). The JFR parser used for
// profiles skips GC events, so the chunks' events are walked here with
// their metadata's layout. A recording cut short (the JVM died mid-dump)
// yields the pauses before the damage along with the error.
func GCPauses(data []byte) (pauses []Pause, err error) {
	defer func() {
		// The metadata parser trusts its input; a corrupt file must not
		// take the caller down.
		if r := recover(); r != nil {
			err = fmt.Errorf("jfr: reading GC pauses: %v", r)
		}
	}()
	for pos := 0; pos < len(data); {
		if len(data)-pos < chunkHeaderLen {
			return pauses, fmt.Errorf("jfr: truncated chunk header at byte %d", pos)
		}
		h := data[pos : pos+chunkHeaderLen]
		if string(h[:4]) != "FLR\x00" {
			return pauses, fmt.Errorf("jfr: no chunk at byte %d", pos)
		}
		size := int64(binary.BigEndian.Uint64(h[8:]))
		if size < chunkHeaderLen || size > int64(len(data)-pos) {
			return pauses, fmt.Errorf("jfr: chunk at byte %d: size %d past the file's end", pos, size)
		}
		chunk := data[pos : pos+int(size)]
		got, err := chunkPauses(chunk, h)
		pauses = append(pauses, got...)
		if err != nil {
			return pauses, err
		}
		if len(pauses) > maxPauses {
			return pauses[:maxPauses], fmt.Errorf("jfr: more than %d GC pauses", maxPauses)
		}
		pos += int(size)
	}
	slices.SortFunc(pauses, func(a, b Pause) int { return cmp.Compare(a.Start, b.Start) })
	return pauses, nil
}

const chunkHeaderLen = 68

func chunkPauses(chunk, h []byte) ([]Pause, error) {
	startNanos := int64(binary.BigEndian.Uint64(h[32:]))
	startTicks := binary.BigEndian.Uint64(h[48:])
	tps := binary.BigEndian.Uint64(h[56:])
	if h[67]&1 == 0 { // features: compressed integers, written by every JDK since 11
		return nil, errors.New("jfr: a chunk without compressed integers is not supported")
	}
	// The metadata of the chunk, through the profile parser: it resolves
	// event names to type ids and lists their fields.
	p := parser.NewParser(chunk, parser.Options{})
	if _, err := p.ParseEvent(); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("jfr: chunk metadata: %w", err)
	}
	cls := p.TypeMap.NameMap[pauseEvent]
	if cls == nil {
		return nil, nil // not recorded in this chunk
	}
	if len(cls.Fields) < 2 || cls.Fields[0].Name != "startTime" || cls.Fields[1].Name != "duration" {
		return nil, fmt.Errorf("jfr: %s does not start with startTime and duration", pauseEvent)
	}
	hdr := parser.ChunkHeader{StartNanos: uint64(startNanos), StartTicks: startTicks, TicksPerSecond: tps}
	var out []Pause
	for pos := chunkHeaderLen; pos < len(chunk); {
		size, n := varint(chunk[pos:])
		if n == 0 || size == 0 || size > uint64(len(chunk)-pos) {
			return out, fmt.Errorf("jfr: bad event size at byte %d of a chunk", pos)
		}
		ev := chunk[pos : pos+int(size)]
		pos += int(size)
		typ, n1 := varint(ev[n:])
		if n1 == 0 || int64(typ) != int64(cls.ID) {
			continue
		}
		rest := ev[n+n1:]
		st, n2 := varint(rest)
		dur, n3 := varint(rest[n2:])
		if n2 == 0 || n3 == 0 {
			return out, fmt.Errorf("jfr: truncated %s event", pauseEvent)
		}
		start := ticksToUnixNs(&hdr, st)
		out = append(out, Pause{Start: start, End: start + ticksToNs(&hdr, dur)})
	}
	return out, nil
}

// varint reads a JFR compressed integer (LEB128, at most 9 bytes, the
// ninth carrying 8 bits); n is 0 when b is too short.
func varint(b []byte) (v uint64, n int) {
	for i := 0; i < 9; i++ {
		if i >= len(b) {
			return 0, 0
		}
		c := b[i]
		if i == 8 {
			return v | uint64(c)<<56, 9
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, i + 1
		}
	}
	return v, 9
}
