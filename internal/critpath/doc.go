// Package critpath computes the cross-layer critical path of requests: for a
// span, what it spent its time on, from the kernel's view of the threads
// that served it, following wakeups across threads and processes, and which
// other requests it waited for ("Combining distributed and kernel tracing",
// Gelle et al., §3.2-3.5; the thread critical path of Giraldeau and
// Dagenais, as Trace Compass computes it).
//
// # Inputs
//
// A Timeline indexes one kernel snapshot (internal/profiler/kernel): per
// thread its running, run-queue and blocked intervals, and the wakeup that
// ended each wait (a thread, or an interrupt: timer, network, disk). Requests
// come from spans (RequestFromSpan): `rootline run` gives each SERVER span the
// intervals it was active on each thread (rootline.thread.intervals); spans of
// OpenTelemetry SDKs give thread.id. Pauses are a runtime's stop-the-world
// pauses (a JVM's GC, from its JFR recording).
//
// # Thread ↔ request association (Algorithm 1)
//
// Per thread, a stack of the requests it is active for; the one that
// started most recently is the active one. A request's window is split among
// its threads (anchors): at each instant the thread it was active on that
// started last, in a gap the thread that picks it up next, after its last
// activity the thread that finished it.
//
// # Bounded critical path
//
// For each anchor piece the thread's intervals are walked backwards from the
// piece's end. Running, run-queue (preempted, woken, throttled by the cgroup
// quota) and waits not caused by another thread are copied onto the path with
// their state: the reason the thread blocked for (a futex is lock, a socket
// network, file I/O disk, a sleep sleep, a page fault or memory stall
// memory), or, for a syscall that does not tell, the interrupt that ended
// the wait (a timer is sleep, the network stack network, a block completion
// disk). A wait another thread caused (it released a lock, or sent on a
// local socket) is resolved through that thread: its intervals over the
// same time, walked backwards from the wakeup, recursively. Every recursive
// window is a sub-interval of the one it came from; one that would not
// narrow it (data describing a cycle) and waits deeper than Config.MaxDepth
// keep their own state, so the walk ends, in time proportional to the
// intervals it visits. Time before a thread was created in the snapshot
// (its first interval starts with a "fork" wakeup) is its creator's path,
// as through a wakeup. Other time a thread has no interval for is unknown
// on the request's own thread; under a waker it stays a wait of the thread that was
// woken (lock, network…), attributed to the waker's request.
//
// What the kernel cannot see is never guessed: in a process that schedules
// in user space (Go, process.runtime.name "go"), a thread parked on a futex
// or in the network poller is the runtime idling, and the request's own wait
// is unknown; so is the time its process's threads spent working for another
// request or for none (its goroutine was parked, or on another thread), which
// for a thread-per-request program would be "blocked by". Two known bugs of Trace Compass are not copied: interrupt
// contexts come from the recorder's per-CPU entry/exit tracking (IPIs
// included), and a wait's waker is the one recorded for that wait, not only
// one found at the interval's end vertex.
//
// # Requests on the path
//
// Each piece of the path is attributed, by Algorithm 1, to the request
// active on its thread then. Time on the request itself, its ancestors or its
// descendants (a callee's span in the same trace) is its own; time on another
// request is "blocked by" that request's local root (its outermost span in
// that service). Merge finds where several paths went through the same
// thread in the same state at once: the contention point. Per path the
// summary is the time per state (they add up to the span's duration), per
// thread, and per blocking request.
//
// # Reference implementation
//
// NaivePath computes the same paths from the definitions (one instant at a
// time, linear scans); TestEquivalence compares the two on random
// timelines, and TestGolden pins the corner cases of testdata/*.json.
package critpath
