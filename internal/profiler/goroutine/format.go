package goroutine

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Kind and MediaType of the artifact a dump produces: a process's goroutine
// status changes over the window (Encode).
const (
	Kind      = "goroutines"
	MediaType = "application/vnd.rootline.goroutines.v1+gzip"
	FileName  = "goroutines.bin.gz"
)

// ErrBadData: an artifact that is not an encoding of Encode.
var ErrBadData = errors.New("malformed goroutine events")

const magic = "RLGR\x01"

// maxDecoded bounds what Decode inflates.
const maxDecoded = 256 << 20

// Encode writes a process's events (in time order; Decode sorts them) gzipped: a header, the
// wait reasons used, then per event the time since the previous one, the
// thread, the goroutine, the statuses and the reason's index.
func Encode(w io.Writer, pid uint32, events []Event) error {
	zw := gzip.NewWriter(w)
	var b []byte
	b = append(b, magic...)
	b = binary.AppendUvarint(b, uint64(pid))
	var reasons []string
	index := map[string]int{}
	for i := range events {
		if r := events[i].Reason; r != "" {
			if _, ok := index[r]; !ok {
				index[r] = len(reasons)
				reasons = append(reasons, r)
			}
		}
	}
	b = binary.AppendUvarint(b, uint64(len(reasons)))
	for _, r := range reasons {
		b = binary.AppendUvarint(b, uint64(len(r)))
		b = append(b, r...)
	}
	b = binary.AppendUvarint(b, uint64(len(events)))
	var last int64
	for i := range events {
		e := &events[i]
		b = binary.AppendVarint(b, e.TS-last)
		last = e.TS
		b = binary.AppendUvarint(b, uint64(e.TID))
		b = binary.AppendUvarint(b, e.Goid)
		b = append(b, byte(e.Old), byte(e.New))
		if e.New == Waiting {
			r := 0
			if e.Reason != "" {
				r = index[e.Reason] + 1
			}
			b = binary.AppendUvarint(b, uint64(r))
		}
		if len(b) > 64<<10 {
			if _, err := zw.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	if _, err := zw.Write(b); err != nil {
		return err
	}
	return zw.Close()
}

// Decode reads what Encode wrote: the process and its events.
func Decode(data []byte) (uint32, []Event, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrBadData, err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxDecoded+1))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrBadData, err)
	}
	if len(raw) > maxDecoded {
		return 0, nil, fmt.Errorf("%w: over %d bytes inflated", ErrBadData, maxDecoded)
	}
	d := decoder{b: raw}
	if !bytes.HasPrefix(raw, []byte(magic)) {
		return 0, nil, fmt.Errorf("%w: not a goroutine events artifact (version)", ErrBadData)
	}
	d.i = len(magic)
	pid := d.uvarint(1<<32 - 1)
	nr := d.uvarint(256)
	reasons := make([]string, 0, nr)
	for range nr {
		n := d.uvarint(256)
		reasons = append(reasons, string(d.bytes(n)))
	}
	// Each event takes at least 5 bytes.
	ne := d.uvarint(uint64(len(raw)) / 5)
	events := make([]Event, 0, ne)
	var ts int64
	for range ne {
		var e Event
		ts += d.varint()
		e.TS, e.PID = ts, uint32(pid)
		e.TID = uint32(d.uvarint(1<<32 - 1))
		e.Goid = d.uvarint(1<<64 - 1)
		st := d.bytes(2)
		if len(st) == 2 {
			e.Old, e.New = uint32(st[0]), uint32(st[1])
		}
		if e.New == Waiting {
			if r := d.uvarint(uint64(len(reasons))); r > 0 {
				e.Reason = reasons[r-1]
			}
		}
		if d.err != nil {
			break
		}
		events = append(events, e)
	}
	if d.err != nil {
		return 0, nil, d.err
	}
	// Agents before the dump sorted its events wrote two CPUs' events in
	// the order the ring buffer held them, microseconds apart.
	slices.SortStableFunc(events, byTS)
	return uint32(pid), events, nil
}

func byTS(a, b Event) int { return cmp.Compare(a.TS, b.TS) }

type decoder struct {
	b   []byte
	i   int
	err error
}

func (d *decoder) uvarint(max uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.i:])
	if n <= 0 || v > max {
		d.err = fmt.Errorf("%w: bad number at byte %d", ErrBadData, d.i)
		return 0
	}
	d.i += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.i:])
	if n <= 0 {
		d.err = fmt.Errorf("%w: bad number at byte %d", ErrBadData, d.i)
		return 0
	}
	d.i += n
	return v
}

func (d *decoder) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if uint64(len(d.b)-d.i) < n {
		d.err = fmt.Errorf("%w: cut short at byte %d", ErrBadData, d.i)
		return nil
	}
	out := d.b[d.i : d.i+int(n)]
	d.i += int(n)
	return out
}
