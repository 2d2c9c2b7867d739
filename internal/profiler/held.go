package profiler

import "context"

// Holder is a Profiler whose recording of a window can be copied at once
// and encoded later. A profiler that keeps a short history (the kernel
// flight recorder keeps a minute) would otherwise lose a window while its
// dump waits for a free slot: copying the window is cheap, encoding and
// compressing it is what takes the time.
type Holder interface {
	Profiler
	// Hold copies what the recording holds of w for t. The copy MUST NOT
	// change when the recording moves on (evicts, forgets threads); it is
	// encoded by Held.Dump, which returns what Dump would have returned
	// for w at the time of Hold. w MUST have ended (a later end is cut at
	// the time of Hold).
	Hold(ctx context.Context, t Target, w Window) (Held, error)
}

// Held is a window copied by Holder.Hold, waiting to be encoded.
type Held interface {
	// Bytes is the memory the copy holds until Dump returns.
	Bytes() int64
	// Dump encodes the copy into the artifacts Profiler.Dump returns, with
	// the same errors. It MUST be called at most once; the copy's memory is
	// free when it returns.
	Dump(ctx context.Context) ([]Artifact, error)
}
