package kernel

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/profiler"
)

// TestFollowExpires: a waker that wakes no tracked thread for FollowTTL
// stops being followed — its states are unknown from then on, not made up —
// and is followed again at its next wakeup of the target.
func TestFollowExpires(t *testing.T) {
	r := newTestRecorder(t, Config{FollowTTL: time.Second})
	bin := buildC(t, "critpath")
	w := startWorkload(t, bin, "recv", "2")
	if err := r.Start(context.Background(), profiler.Target{PID: w.pid()}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := w.stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	// Two messages 2.5 s apart: the sender sleeps through a sweep after
	// its TTL, between them.
	sender := startHelper(t, bin, "send", strconv.Itoa(w.port), "2", "2500")
	w.waitFor(t, "done")
	end := time.Now()
	snap, _ := dumpSnapshot(t, r, w.pid(), start, end)
	st := r.Stats()
	tid := sender.tids["sender"]
	th, ok := snap.Thread(tid)
	var covered int64
	var ivs []Interval
	for _, iv := range snap.Intervals {
		if iv.TID == tid {
			covered += iv.End - iv.Start
			ivs = append(ivs, iv)
		}
	}
	t.Logf("sender %+v: %d intervals covering %v of the %v between its first wakeup and the end; unfollowed %v",
		th, len(ivs), time.Duration(covered), time.Duration(snap.End-th.Since), st["unfollowed_threads"])
	if !ok || !th.Recorded || th.Depth != 1 {
		t.Fatalf("sender thread %+v (listed %v): want a recorded waker at depth 1", th, ok)
	}
	if st["unfollowed_threads"] < 1 {
		t.Errorf("no thread stopped being followed (stats %v)", st)
	}
	// Followed from its first causal wakeup of the receiver (its connect
	// wakes the receiver's accept, when the receiver already waits in it;
	// else the first message, 2.5 s in) until its TTL ran out: 1–2 s later,
	// as the sweep runs once a second. The next message comes 2.5 s after
	// the previous one, so it was unfollowed for 0.5–1.5 s before it
	// followed the sender again: that time is absent, not one long interval.
	if span := snap.End - th.Since; covered > span-int64(400*time.Millisecond) {
		t.Errorf("the sender's intervals cover %v of %v: no gap while it was not followed", time.Duration(covered), time.Duration(span))
	}
	var woke []int64
	for _, wk := range snap.Wakeups {
		if wk.Waker == tid && wk.Wakee == w.tids["receiver"] && wk.Causal {
			woke = append(woke, wk.TS)
		}
	}
	// The last message's wakeup, after the gap, is recorded: the sender
	// was followed again.
	if len(woke) < 2 || woke[len(woke)-1]-woke[0] < int64(2*time.Second) {
		t.Errorf("causal wakeups of the receiver by the sender at %v: want one for each message, 2.5 s apart", woke)
	}
}
