// Package diagnosis turns the server's anomalous spans into incidents and
// gives each a verdict: the culprit service, the cause, how sure, from which
// evidence, and what evidence is missing.
//
// A Tracker is a pipeline sink. It counts the committed root spans of each
// entry point (the service and operation of a trace's root span) in
// one-second buckets and opens an incident when, over the last Window, at
// least MinAnomalies of them were anomalous and they were at least MinShare
// of the entry point's root spans: a surge over the detector's baseline,
// not the few spans any healthy service has beyond its threshold. A root
// span counts as anomalous when the detector flagged it, or when it flagged
// a span of the same trace whose time over its baseline is at least
// MinImpact of the request's latency (a service deep in the call graph that
// slowed the request that much). The incident closes once the anomalous share has stayed under CloseShare for
// Quiet. While an incident is open, and for EvidenceWait after it closed
// (kernel snapshots and profiles arrive seconds after the spans), its
// verdict is computed again when evidence came for it (a flagged span of its
// requests, stored artifacts: Tracker.Evidence), at most every VerdictEvery,
// and stored.
//
// A verdict names the culprit from the spans (package analysis ranks the
// services by how much their time per trace grew against the traces before
// the onset) and the cause from what was measured of the culprit's slow
// spans: the kernel critical path of each (package critpath) restricted to
// the span's exclusive time, where its own threads ran, waited for a CPU,
// were throttled, blocked on a lock, the disk, the network, a page fault or
// a GC pause; without a kernel snapshot, from CPU profiles and JFR
// (analysis.Profiles) and the run-queue wait rootline run puts on spans.
// docs/diagnosis.md says how each cause is reached.
package diagnosis

import (
	"errors"
	"flag"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/mirage"
	"github.com/rootline/rootline/internal/model"
)

// Causes a Verdict names.
const (
	CauseCPU           = "cpu"            // the culprit's own threads ran on a CPU for its slow time
	CauseCPUContention = "cpu-contention" // they were runnable, waiting for a CPU others held
	CauseCPUThrottle   = "cpu-throttle"   // they were runnable, held off by their cgroup's CPU quota
	CauseLock          = "lock"           // they were blocked on a lock (futex, Java monitor)
	CauseDisk          = "disk"           // they were blocked on block I/O
	CauseNetwork       = "network"        // a link: calls took longer outside the callee, or its threads were blocked on the network
	CauseGC            = "gc"             // they were stopped by the JVM's garbage collector
	CauseMemory        = "memory"         // they were blocked in page faults, reclaim or swap
	CauseDownstream    = "downstream"     // calls to a dependency that sends no spans took longer
	CauseUnknown       = "unknown"        // the evidence does not tell (see Missing)
)

// Causes lists every cause in display order.
var Causes = []string{CauseCPU, CauseCPUContention, CauseCPUThrottle, CauseLock, CauseDisk, CauseNetwork, CauseGC, CauseMemory, CauseDownstream, CauseUnknown}

// Incident triggers.
const (
	TriggerAnomalies = "anomalies"
	TriggerShift     = "shift"
)

// Shift is an entry point's latency over the window that opened an
// incident, against its baseline, in ms.
type Shift struct {
	P50Ms     float64 `json:"p50Ms"`
	P90Ms     float64 `json:"p90Ms"`
	BaseP50Ms float64 `json:"baseP50Ms"`
	BaseP90Ms float64 `json:"baseP90Ms"`
	Requests  int     `json:"requests"`
}

// Incident states.
const (
	StateOpen   = "open"
	StateClosed = "closed"
)

// Incident is a surge of anomalous requests at one entry point, as the API
// serves it (docs/api.md). Times are Unix nanoseconds.
type Incident struct {
	ID string `json:"id"`
	// Entry is the entry point: "service operation" of the traces' root span.
	Entry          string `json:"entry"`
	EntryService   string `json:"entryService"`
	EntryOperation string `json:"entryOperation"`
	State          string `json:"state"`
	// Start is the start of the first anomalous root span of the surge; End
	// the end of the last one, set when the incident closes.
	Start int64 `json:"start"`
	End   int64 `json:"end,omitempty"`
	// Opened and Closed are the server's clock when it decided.
	Opened int64 `json:"opened"`
	Closed int64 `json:"closed,omitempty"`
	// Requests counts the entry point's root spans committed while the
	// incident was open (the opening window included); Anomalous those of
	// them the detector flagged (or, by MinImpact, one of their spans), and
	// for an incident a shift opened also those slower than SlowAboveMs.
	Requests  int `json:"requests"`
	Anomalous int `json:"anomalous"`
	// BaselineMs is the detector's baseline for the entry point when the
	// incident opened (rootline.baseline_ms of its anomalous spans).
	BaselineMs float64 `json:"baselineMs"`
	// Trigger is the rule that opened it: TriggerAnomalies or TriggerShift.
	Trigger string `json:"trigger,omitempty"`
	// Shift is the entry point's latency against its baseline when a
	// shift opened the incident.
	Shift *Shift `json:"shift,omitempty"`
	// SlowAboveMs, for an incident a shift opened, is the latency over
	// which a request counts as anomalous (and its trace as slow for the
	// verdict) besides the detector's flags: the baseline's 90th percentile.
	SlowAboveMs float64 `json:"slowAboveMs,omitempty"`
	// Rule says the open/close rule the incident was judged by.
	Rule    string   `json:"rule"`
	Verdict *Verdict `json:"verdict,omitempty"`
}

// Verdict is the diagnosis of an incident.
type Verdict struct {
	// Service is the culprit ("" when none stood out, or the node is).
	Service string `json:"service"`
	// Node names the nodes (host.name) whose slowdown it was, when no
	// service stood out and their CPUs were stolen by the hypervisor
	// (cause cpu-contention): every service slowed, none by a fault of
	// its own.
	Node string `json:"node,omitempty"`
	// Cause is one of the Cause* constants.
	Cause string `json:"cause"`
	// Confidence in [0, 1] of service and cause together: how clearly the
	// culprit stands out among the services (ServiceConfidence) times the
	// share of its measured slow time the cause accounts for; 0 when the
	// cause is unknown.
	Confidence        float64 `json:"confidence"`
	ServiceConfidence float64 `json:"serviceConfidence"`
	// Evidence are the facts behind the verdict: which artifacts and spans,
	// and their numbers.
	Evidence []string `json:"evidence"`
	// Missing says which evidence was not there and why, where it would
	// have changed or firmed up the verdict.
	Missing []string `json:"missing,omitempty"`
	// RunnerUp is the next best explanation.
	RunnerUp *Alternative `json:"runnerUp,omitempty"`
	// ExampleTraceID is a slow trace through the culprit, one with a
	// critical path where there is one.
	ExampleTraceID string `json:"exampleTraceId,omitempty"`
	// Waits sums, in ms, what the culprit's slow spans' own threads did in
	// their exclusive time, by critical-path state, over the PathSpans spans
	// with a path; Downstream is their time in calls to dependencies that
	// send no spans.
	Waits     map[string]float64 `json:"waits,omitempty"`
	PathSpans int                `json:"pathSpans"`
	SlowSpans int                `json:"slowSpans"`
	// BaselineWaits is the same per span (ms) of BaselineSpans of the
	// culprit's spans before the onset with a stored path: what the cause
	// is weighed against (what grew); absent without such a baseline.
	BaselineWaits map[string]float64 `json:"baselineWaits,omitempty"`
	BaselineSpans int                `json:"baselineSpans,omitempty"`
	// Ranking is the services most suspect first (at most 5).
	Ranking []analysis.ServiceScore `json:"ranking,omitempty"`
	// SlowTraces and BaseTraces are the traces compared.
	SlowTraces int `json:"slowTraces"`
	BaseTraces int `json:"baseTraces"`
	// Advice is what to change, after the Mirage model (nil when there is
	// no culprit or nothing to size it with).
	Advice *mirage.Advice `json:"advice,omitempty"`
	// Updated is when it was computed (server clock).
	Updated int64 `json:"updated"`
	// capture: recent slow spans of the culprit the detector did not flag,
	// for which the tracker asks captures while the verdict lacks kernel
	// paths (Tracker.SetCapture).
	capture []*model.Span
	// byGrowth: the cause was weighed by what grew over the baseline, per
	// what (a slow span's path, or a trace's spans).
	byGrowth string
}

// Alternative is a runner-up explanation.
type Alternative struct {
	Service string  `json:"service"`
	Cause   string  `json:"cause"`
	Score   float64 `json:"score"`
	Why     string  `json:"why"`
}

// Config holds the incident rule and the verdict's bounds. YAML keys are
// those of the server's `diagnosis:` section.
type Config struct {
	// Window is the sliding window over which a surge is measured.
	Window time.Duration `yaml:"window"`
	// MinAnomalies is the anomalous root spans of an entry point in Window
	// that open an incident (with MinShare).
	MinAnomalies int `yaml:"min_anomalies"`
	// MinShare is the share of the entry point's root spans in Window that
	// must be anomalous to open an incident.
	MinShare float64 `yaml:"min_share"`
	// MinImpact: a request whose root span the detector did not flag counts
	// as anomalous all the same when one of its spans was flagged and that
	// span's time over its own baseline is at least this share of the
	// request's latency. A service deep in the call graph can triple its
	// time (and be flagged) while the request grows by far less than the
	// root's own threshold; what it added to the request is what decides
	// whether it matters. 0 counts flagged root spans only.
	MinImpact float64 `yaml:"min_impact"`
	// CloseShare and Quiet: the incident closes once the anomalous share
	// over Window has stayed below CloseShare (or no root span came) for
	// Quiet.
	CloseShare float64       `yaml:"close_share"`
	Quiet      time.Duration `yaml:"quiet"`
	// VerdictEvery is how often at most an incident's verdict is computed
	// again, when new evidence came, while it is open and for EvidenceWait
	// after it closed, as long as the incident is young: then at most every
	// tenth of its age, up to 30 s (Tracker.verdictEvery).
	VerdictEvery time.Duration `yaml:"verdict_every"`
	EvidenceWait time.Duration `yaml:"evidence_wait"`
	// Lookback is how far before the onset baseline traces are read.
	Lookback time.Duration `yaml:"lookback"`
	// MaxTraces bounds the traces read on each side of the onset; MaxPaths
	// the slow traces whose critical paths are read per verdict.
	MaxTraces int `yaml:"max_traces"`
	MaxPaths  int `yaml:"max_paths"`
	// MaxEntries bounds the entry points tracked (past it new ones are not
	// counted until retention drops idle ones).
	MaxEntries int `yaml:"max_entries"`
	// MinShift, ShiftFor and ShiftBaseline are the shift rule (shift.go):
	// an incident opens also when the entry point's median or 90th
	// percentile over Window has stayed at least MinShift above its
	// baseline for ShiftFor, the baseline being its latency before, decayed
	// with time constant ShiftBaseline. 0 turns the rule off.
	MinShift      float64       `yaml:"min_shift"`
	ShiftFor      time.Duration `yaml:"shift_for"`
	ShiftBaseline time.Duration `yaml:"shift_baseline"`
	// ShiftWindow is a shorter window the shift rule also judges (the
	// newest seconds of Window, when they hold enough requests to compare):
	// a shift fills its half sooner than Window's. 0 judges Window alone.
	ShiftWindow time.Duration `yaml:"shift_window"`
	// ShiftConfidence: a shift counts only when the window's requests above
	// the bar (1+MinShift times the baseline's median or 90th percentile)
	// are more than a window at the bar would hold with probability
	// 1−ShiftConfidence (a binomial test, shift.sure): a 5-s window's 90th
	// percentile is a handful of requests, and moves by chance. 0: the
	// quantiles alone decide.
	ShiftConfidence float64 `yaml:"shift_confidence"`
	// Disabled turns incidents off.
	Disabled bool `yaml:"disabled"`
}

// DefaultConfig returns the defaults docs/diagnosis.md explains.
func DefaultConfig() Config {
	return Config{
		Window:        10 * time.Second,
		MinAnomalies:  5,
		MinShare:      0.2,
		MinImpact:     0.2,
		CloseShare:    0.05,
		Quiet:         20 * time.Second,
		VerdictEvery:  2 * time.Second,
		EvidenceWait:  60 * time.Second,
		Lookback:      2 * time.Minute,
		MaxTraces:     200,
		MaxPaths:      20,
		MaxEntries:    1000,
		MinShift:      0.25,
		ShiftFor:      2 * time.Second,
		ShiftBaseline: time.Minute,
		ShiftWindow:   5 * time.Second,
		// bench/RESULTS.md, "A binomial test on the shift rule": on one
		// demo's stored spans it removed two small-effect incidents and one
		// with nothing injected, and opened two effective faults 1 s later.
		ShiftConfidence: 0.99,
	}
}

// RegisterRuleFlags registers the open/close rule's settings on fs as
// --diagnosis.* flags (the server's, and rootline analyze replay's).
func (c *Config) RegisterRuleFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.Window, "diagnosis.window", c.Window, "window over which an entry point's anomalous root spans are counted to open an incident")
	fs.IntVar(&c.MinAnomalies, "diagnosis.min-anomalies", c.MinAnomalies, "anomalous root spans of an entry point within the window that open an incident (with --diagnosis.min-share)")
	fs.Float64Var(&c.MinShare, "diagnosis.min-share", c.MinShare, "share of the entry point's root spans within the window that must be anomalous to open an incident")
	fs.Float64Var(&c.MinImpact, "diagnosis.min-impact", c.MinImpact, "a request whose root span is not anomalous counts as anomalous when a flagged span of it took at least this share of its latency over its own baseline (0: root spans only)")
	fs.Float64Var(&c.MinShift, "diagnosis.min-shift", c.MinShift, "an incident opens also when the entry point's median or 90th percentile over the window rose this share above its baseline for --diagnosis.shift-for, flagged or not (0: off)")
	fs.DurationVar(&c.ShiftFor, "diagnosis.shift-for", c.ShiftFor, "how long a latency shift must last to open an incident")
	fs.DurationVar(&c.ShiftBaseline, "diagnosis.shift-baseline", c.ShiftBaseline, "time constant of the entry point's latency baseline the shift rule compares with")
	fs.DurationVar(&c.ShiftWindow, "diagnosis.shift-window", c.ShiftWindow, "the shift rule judges also the window's newest this long (when it holds enough requests): a shift is seen sooner (0: the window alone)")
	fs.Float64Var(&c.ShiftConfidence, "diagnosis.shift-confidence", c.ShiftConfidence, "a latency shift counts only when the window holds more requests above the bar than chance would put there with this confidence (a binomial test; 0: the median and 90th percentile alone decide)")
	fs.Float64Var(&c.CloseShare, "diagnosis.close-share", c.CloseShare, "an incident closes once the anomalous share stayed under this for --diagnosis.quiet")
	fs.DurationVar(&c.Quiet, "diagnosis.quiet", c.Quiet, "how long the anomalous share must stay under --diagnosis.close-share to close an incident")
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.Window < time.Second {
		errs = append(errs, errors.New("diagnosis window must be at least 1s"))
	}
	if c.MinAnomalies < 1 {
		errs = append(errs, errors.New("diagnosis min_anomalies must be ≥ 1"))
	}
	if c.MinShare <= 0 || c.MinShare > 1 {
		errs = append(errs, errors.New("diagnosis min_share must be in (0, 1]"))
	}
	if c.MinImpact < 0 || c.MinImpact > 1 {
		errs = append(errs, errors.New("diagnosis min_impact must be in [0, 1]"))
	}
	if c.CloseShare < 0 || c.CloseShare >= c.MinShare {
		errs = append(errs, errors.New("diagnosis close_share must be in [0, min_share)"))
	}
	if c.Quiet <= 0 || c.VerdictEvery <= 0 || c.EvidenceWait < 0 || c.Lookback <= 0 {
		errs = append(errs, errors.New("diagnosis quiet, verdict_every and lookback must be > 0, evidence_wait ≥ 0"))
	}
	if c.MinShift < 0 || (c.MinShift > 0 && (c.ShiftFor < time.Second || c.ShiftBaseline < 10*time.Second)) {
		errs = append(errs, errors.New("diagnosis min_shift must be ≥ 0; with it, shift_for at least 1s and shift_baseline at least 10s"))
	}
	if c.ShiftConfidence < 0 || c.ShiftConfidence >= 1 {
		errs = append(errs, errors.New("diagnosis shift_confidence must be in [0, 1)"))
	}
	if c.ShiftWindow != 0 && (c.ShiftWindow < time.Second || c.ShiftWindow > c.Window) {
		errs = append(errs, errors.New("diagnosis shift_window must be 0 or between 1s and window"))
	}
	if c.MaxTraces < 10 || c.MaxPaths < 1 || c.MaxEntries < 1 {
		errs = append(errs, errors.New("diagnosis max_traces must be ≥ 10, max_paths and max_entries ≥ 1"))
	}
	return errors.Join(errs...)
}
