package goroutine

// Goroutine statuses of the Go runtime (runtime/runtime2.go), as events
// carry them.
const (
	Idle     = 0
	Runnable = 1
	Running  = 2
	Syscall  = 3
	Waiting  = 4
	Dead     = 6
)

// Event is one goroutine status change.
type Event struct {
	TS       int64 // Unix ns
	PID, TID uint32
	Goid     uint64
	Old, New uint32
	// Reason is why it waits (the runtime's waitReason string: "sync.Mutex.Lock",
	// "chan receive", "IO wait"…) when New is Waiting.
	Reason string
}
