package goroutine

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"
)

func sampleEvents() []Event {
	return []Event{
		{TS: 1_700_000_000_000_000_000, PID: 42, TID: 43, Goid: 7, Old: Runnable, New: Running},
		{TS: 1_700_000_000_000_100_000, PID: 42, TID: 43, Goid: 7, Old: Running, New: Waiting, Reason: "sync.Mutex.Lock"},
		{TS: 1_700_000_000_000_100_000, PID: 42, TID: 44, Goid: 9, Old: Running, New: Syscall},
		{TS: 1_700_000_000_040_000_000, PID: 42, TID: 44, Goid: 7, Old: Waiting, New: Runnable},
		{TS: 1_700_000_000_041_000_000, PID: 42, TID: 45, Goid: 1 << 40, Old: Runnable, New: Running},
		{TS: 1_700_000_000_042_000_000, PID: 42, TID: 45, Goid: 1 << 40, Old: Running, New: Waiting},
		{TS: 1_700_000_000_043_000_000, PID: 42, TID: 45, Goid: 7, Old: Running, New: Waiting, Reason: "IO wait"},
	}
}

// TestEncodeDecode: what Encode writes, Decode reads back the same.
func TestEncodeDecode(t *testing.T) {
	for _, evs := range [][]Event{nil, sampleEvents()} {
		var buf bytes.Buffer
		if err := Encode(&buf, 42, evs); err != nil {
			t.Fatal(err)
		}
		pid, got, err := Decode(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if pid != 42 || len(got) != len(evs) || len(evs) > 0 && !reflect.DeepEqual(got, evs) {
			t.Fatalf("pid %d, events\n%+v\nwant\n%+v", pid, got, evs)
		}
	}
}

// TestDecodeRefuses: bad input is an error wrapping ErrBadData, never a
// panic or a huge allocation.
func TestDecodeRefuses(t *testing.T) {
	var buf bytes.Buffer
	if err := Encode(&buf, 42, sampleEvents()); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	for name, data := range map[string][]byte{
		"empty":     nil,
		"not gzip":  []byte("RLGR\x01 plain"),
		"truncated": good[:len(good)-9],
	} {
		if _, _, err := Decode(data); !errors.Is(err, ErrBadData) {
			t.Errorf("%s: %v, want ErrBadData", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	var buf bytes.Buffer
	if err := Encode(&buf, 42, sampleEvents()); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		pid, evs, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrBadData) {
				t.Fatalf("%v does not wrap ErrBadData", err)
			}
			return
		}
		var out bytes.Buffer
		if err := Encode(&out, pid, evs); err != nil {
			t.Fatal(err)
		}
		pid2, evs2, err := Decode(out.Bytes())
		if err != nil || pid2 != pid || len(evs2) != len(evs) {
			t.Fatalf("round trip: %v, pid %d/%d, %d/%d events", err, pid2, pid, len(evs2), len(evs))
		}
	})
}

// TestWindowSorted: the ring buffer holds events in the order they were
// reserved, dated after; a dump (and Decode, for older agents' dumps) puts
// them in time order, a thread's own events keeping theirs.
func TestWindowSorted(t *testing.T) {
	evs := sampleEvents()
	ring := slices.Clone(evs)
	ring[2], ring[3] = ring[3], ring[2] // reserved on CPU 1 first, dated later
	ring[0].TS, ring[1].TS = evs[0].TS+5, evs[0].TS+5
	got := inWindow(ring, evs[0].TS, evs[5].TS)
	if !slices.IsSortedFunc(got, byTS) || len(got) != 6 || got[0].New != Running || got[1].New != Waiting {
		t.Fatalf("window %+v", got)
	}
	var buf bytes.Buffer
	if err := Encode(&buf, 42, ring); err != nil {
		t.Fatal(err)
	}
	_, dec, err := Decode(buf.Bytes())
	if err != nil || !slices.IsSortedFunc(dec, byTS) || len(dec) != len(ring) {
		t.Fatalf("decode %v: %+v", err, dec)
	}
}
