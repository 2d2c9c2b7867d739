// Package anomaly holds Rootline's span anomaly detectors. The default is
// Protractor's sliding-window median (the Protractor thesis, KTH 2018,
// §5.2.3): a span is anomalous when its duration exceeds threshold × the
// median of the last W durations of its key; every span then enters the
// window, pushing out the oldest.
package anomaly

// Verdict is a detector's answer for one observed duration.
type Verdict struct {
	// Ready is false while the key's window holds fewer than MinFill durations;
	// no span is called anomalous before that.
	Ready bool
	// Anomalous is true when the duration exceeded Threshold × Baseline;
	// always false while not Ready.
	Anomalous bool
	// Baseline is the statistic the duration was compared to (the window's
	// median for the median detector), in ns, taken before the span entered.
	Baseline int64
	// Threshold is the factor the detector applied, carried along so that an
	// annotated span records the rule it was judged by.
	Threshold float64
}

// KeyState describes one key's detector state (for the API).
type KeyState struct {
	Key       string  `json:"key"`
	Fill      int     `json:"fill"`       // durations in the window
	Window    int     `json:"window"`     // window capacity W
	Baseline  int64   `json:"baselineNs"` // current median (ns); 0 when empty
	Threshold float64 `json:"threshold"`
	Observed  uint64  `json:"observed"`  // spans seen for this key
	Anomalies uint64  `json:"anomalies"` // spans found anomalous
	LastSeen  int64   `json:"lastSeen"`  // Unix ns of the last Observe
}

// Detector classifies span durations per key. Implementations MUST be safe for
// concurrent use (the pipeline observes from one goroutine, the API reads state
// from others) and cost O(log W) per Observe.
type Detector interface {
	// Observe classifies duration d (ns) against key's history, then adds it.
	// The key's LastSeen is read from the detector's clock.
	Observe(key string, d int64) Verdict
	// ObserveAt is Observe with the observation's time (Unix ns) given, e.g.
	// the span's end: the pipeline uses it to avoid a clock read per span.
	ObserveAt(key string, d, at int64) Verdict
	// State returns the state of one key.
	State(key string) (KeyState, bool)
	// States returns all keys' states, sorted by key.
	States() []KeyState
}

// Checker is a Detector that can also judge a duration without observing it:
// the verdict ObserveAt would give, with no change to the key's window,
// counters or recency. The pipeline judges a span that is still in flight
// (model.AttrInFlight, a lower bound of its duration) this way, so that a
// partial duration never enters the baseline; the span is observed once,
// when its final copy arrives.
type Checker interface {
	Check(key string, d int64) Verdict
}
