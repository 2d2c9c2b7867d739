package bpfring_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/rootline/rootline/internal/bpfring"
	"github.com/rootline/rootline/internal/bpftest"
)

// producer is a ring buffer and a socket filter that writes one 8-byte
// record into it per run: the first 8 bytes after the input's Ethernet header, with the
// wake-up flags given when it was built.
type producer struct {
	ring *ebpf.Map
	prog *ebpf.Program
}

func newProducer(t *testing.T, ring *ebpf.Map, flags int64) *producer {
	t.Helper()
	insns := asm.Instructions{
		// r6 = skb; load skb bytes 0..7 to the stack with bpf_skb_load_bytes.
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, 0),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -8),
		asm.Mov.Imm(asm.R4, 8),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "out"),
		// bpf_ringbuf_output(ring, fp-8, 8, flags)
		asm.LoadMapPtr(asm.R1, ring.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.Mov.Imm(asm.R3, 8),
		asm.Mov.Imm(asm.R4, int32(flags)),
		asm.FnRingbufOutput.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: insns})
	if err != nil {
		t.Fatalf("load producer: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return &producer{ring: ring, prog: prog}
}

// put writes the record v.
func (p *producer) put(t *testing.T, v uint64) {
	t.Helper()
	// The program sees the packet after its Ethernet header (14 bytes).
	pkt := make([]byte, 64)
	binary.LittleEndian.PutUint64(pkt[14:], v)
	if _, err := p.prog.Run(&ebpf.RunOptions{Data: pkt}); err != nil {
		t.Errorf("run producer: %v", err)
	}
}

const noWakeup = 1 // BPF_RB_NO_WAKEUP

func newRing(t *testing.T) *ebpf.Map {
	t.Helper()
	bpftest.RequireBPF(t)
	ring, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: uint32(os.Getpagesize())})
	if err != nil {
		bpftest.Missing(t, "ring buffer map: "+err.Error())
	}
	t.Cleanup(func() { ring.Close() })
	return ring
}

func setup(t *testing.T) (*bpfring.Reader, *ebpf.Map) {
	t.Helper()
	ring := newRing(t)
	rd, err := bpfring.NewReader(ring)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	return rd, ring
}

func value(t *testing.T, rec ringbuf.Record) uint64 {
	t.Helper()
	if len(rec.RawSample) < 8 {
		t.Fatalf("record of %d bytes", len(rec.RawSample))
	}
	return binary.LittleEndian.Uint64(rec.RawSample)
}

// A submission that wakes the reader ends its wait long before the deadline.
func TestWakeup(t *testing.T) {
	rd, ring := setup(t)
	p := newProducer(t, ring, 0)
	rd.SetDeadline(time.Now().Add(20 * time.Second))
	done := make(chan struct{})
	defer func() { <-done }()
	go func() {
		defer close(done)
		time.Sleep(100 * time.Millisecond)
		p.put(t, 42)
	}()
	begun := time.Now()
	var rec ringbuf.Record
	if err := rd.ReadInto(&rec); err != nil {
		t.Fatal(err)
	}
	if v := value(t, rec); v != 42 {
		t.Errorf("record %d, want 42", v)
	}
	if took := time.Since(begun); took < 90*time.Millisecond || took > 10*time.Second {
		t.Errorf("record read after %v, want ~100 ms (woken by the submission)", took)
	}
}

// Records submitted without a wake-up are read at the deadline, all of them
// and in order, before os.ErrDeadlineExceeded.
func TestNoWakeupAtDeadline(t *testing.T) {
	rd, ring := setup(t)
	p := newProducer(t, ring, noWakeup)
	begun := time.Now()
	rd.SetDeadline(begun.Add(300 * time.Millisecond))
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(50 * time.Millisecond)
		for i := range 5 {
			p.put(t, uint64(i))
		}
	}()
	var rec ringbuf.Record
	for i := range 5 {
		if err := rd.ReadInto(&rec); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if v := value(t, rec); v != uint64(i) {
			t.Errorf("record %d = %d", i, v)
		}
	}
	<-done
	if took := time.Since(begun); took < 290*time.Millisecond {
		t.Errorf("records read after %v, before the deadline (300 ms), with no wake-up sent", took)
	}
	if err := rd.ReadInto(&rec); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("after the records: %v, want os.ErrDeadlineExceeded", err)
	}
	// Records already there are read at once, even with the deadline past.
	p.put(t, 7)
	if err := rd.ReadInto(&rec); err != nil || value(t, rec) != 7 {
		t.Errorf("pending record: err %v", err)
	}
}

// Flush and Close end a wait that has no deadline.
func TestFlushAndClose(t *testing.T) {
	rd, ring := setup(t)
	p := newProducer(t, ring, noWakeup)
	rd.SetDeadline(time.Time{})
	p.put(t, 1)
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		time.Sleep(100 * time.Millisecond)
		if err := rd.Flush(); err != nil {
			t.Error(err)
		}
	}()
	var rec ringbuf.Record
	if err := rd.ReadInto(&rec); err != nil || value(t, rec) != 1 {
		t.Fatalf("pending record: %v", err)
	}
	if err := rd.ReadInto(&rec); !errors.Is(err, ringbuf.ErrFlushed) {
		t.Fatalf("after Flush: %v, want ringbuf.ErrFlushed", err)
	}
	<-flushed
	done := make(chan error, 1)
	go func() { done <- rd.ReadInto(&rec) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("ReadInto returned %v with no record, deadline or flush", err)
	default:
	}
	if err := rd.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ringbuf.ErrClosed) {
			t.Errorf("after Close: %v, want ringbuf.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not interrupt ReadInto")
	}
	if err := rd.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// One reader of several rings: a wake-up on any ring ends the wait (every
// time, not only the first), and every ring's records are read, each
// ring's in order.
func TestMultiReader(t *testing.T) {
	rings := []*ebpf.Map{newRing(t), newRing(t), newRing(t)}
	rd, err := bpfring.NewMultiReader(rings)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	quiet0, quiet1 := newProducer(t, rings[0], noWakeup), newProducer(t, rings[1], noWakeup)
	loud1, loud2 := newProducer(t, rings[1], 0), newProducer(t, rings[2], 0)
	var rec ringbuf.Record
	for round, loud := range []*producer{loud2, loud1, loud2} {
		quiet0.put(t, 10)
		quiet0.put(t, 11)
		quiet1.put(t, 20)
		rd.SetDeadline(time.Now().Add(20 * time.Second))
		// Drain what is pending without waiting, then wait for the wake-up.
		got := map[uint64]bool{}
		var order []uint64
		for range 3 {
			if err := rd.ReadInto(&rec); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			v := value(t, rec)
			got[v], order = true, append(order, v)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(100 * time.Millisecond)
			loud.put(t, 30)
		}()
		begun := time.Now()
		if err := rd.ReadInto(&rec); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		<-done
		if v := value(t, rec); v != 30 {
			t.Errorf("round %d: record %d after the wait, want 30", round, v)
		}
		if took := time.Since(begun); took < 90*time.Millisecond || took > 10*time.Second {
			t.Errorf("round %d: woken after %v, want ~100 ms", round, took)
		}
		if !got[10] || !got[11] || !got[20] {
			t.Errorf("round %d: pending records %v, want 10 11 20", round, order)
		}
		for i, v := range order {
			if v == 11 && (i == 0 || !slices.Contains(order[:i], 10)) {
				t.Errorf("round %d: ring 0 out of order: %v", round, order)
			}
		}
	}
	rd.SetDeadline(time.Now().Add(50 * time.Millisecond))
	if err := rd.ReadInto(&rec); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("empty rings: %v, want os.ErrDeadlineExceeded", err)
	}
}

// Drain returns once the consumer has handled every record submitted
// before it, although none of them woke the reader and its deadline is far.
func TestDrain(t *testing.T) {
	rd, ring := setup(t)
	p := newProducer(t, ring, noWakeup)
	rd.SetDeadline(time.Now().Add(time.Minute))
	var mu sync.Mutex
	var seen []uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		var rec ringbuf.Record
		for {
			err := rd.ReadInto(&rec)
			switch {
			case errors.Is(err, ringbuf.ErrClosed):
				return
			case err != nil:
				continue // ErrFlushed
			}
			mu.Lock()
			seen = append(seen, value(t, rec))
			mu.Unlock()
		}
	}()
	for round := range 3 {
		for i := range 4 {
			p.put(t, uint64(round*10+i))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		begun := time.Now()
		err := rd.Drain(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: Drain: %v", round, err)
		}
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n != 4*(round+1) {
			t.Errorf("round %d: %d records handled when Drain returned, want %d", round, n, 4*(round+1))
		}
		if took := time.Since(begun); took > 5*time.Second {
			t.Errorf("round %d: Drain took %v", round, took)
		}
	}
	rd.Close()
	<-done
	if err := rd.Drain(context.Background()); !errors.Is(err, ringbuf.ErrClosed) {
		t.Errorf("Drain after Close: %v, want ErrClosed", err)
	}
}
