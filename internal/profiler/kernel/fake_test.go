package kernel

import (
	"context"
	"sync"
)

// fakeSource is a Source replaying a fixed event sequence (no kernel).
type fakeSource struct {
	mu      sync.Mutex
	events  []Event
	comms   map[uint32]string
	targets map[uint32]bool
	done    chan struct{}
	fed     chan struct{}
	once    sync.Once
}

func newFakeSource(events []Event, comms map[uint32]string) *fakeSource {
	return &fakeSource{events: events, comms: comms, targets: map[uint32]bool{}, done: make(chan struct{}), fed: make(chan struct{})}
}

func (f *fakeSource) comm(tid uint32) *Comm {
	var c Comm
	copy(c[:15], f.comms[tid])
	return &c
}

func (f *fakeSource) Run(sink Sink) error {
	for i := range f.events {
		ev := f.events[i]
		sink.Event(&ev, f.comm(ev.TID), f.comm(ev.TID2))
	}
	close(f.fed)
	<-f.done
	return nil
}

func (f *fakeSource) Drain(ctx context.Context) {
	select {
	case <-f.fed:
	case <-ctx.Done():
	}
}

func (f *fakeSource) SetTarget(tgid uint32, on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets[tgid] = on
	return nil
}

func (f *fakeSource) SetCgroup(uint64, bool) error { return nil }
func (f *fakeSource) Lost() uint64                 { return 3 }
func (f *fakeSource) Stats() map[string]float64    { return map[string]float64{"lost": 3} }
func (f *fakeSource) Close() error {
	f.once.Do(func() { close(f.done) })
	return nil
}
