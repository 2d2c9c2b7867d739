// Package capture turns anomalous spans into evidence: it keeps the registry of
// agents, maps a span to the agent and process that served it, coalesces
// overlapping windows per process, asks the agent to dump its flight recorders
// for the window, and stores what the agent uploads as artifacts linked to the
// spans. The protocol is documented in docs/api.md; the JSON types here are it.
package capture

// Process is one process an agent serves.
type Process struct {
	PID int64 `json:"pid"`
	// Service is the process's service.name, if known.
	Service string `json:"service,omitempty"`
	// InstanceID is the process's service.instance.id, if known.
	InstanceID string `json:"serviceInstanceId,omitempty"`
	Command    string `json:"command,omitempty"`
	// Kinds the agent can capture for this process; empty means the agent's kinds.
	Kinds []string `json:"kinds,omitempty"`
}

// Registration is what an agent sends to register and on every heartbeat.
// A heartbeat replaces the agent's process list.
type Registration struct {
	// AgentID is empty on first registration; the server assigns one.
	AgentID string `json:"agentId,omitempty"`
	Host    string `json:"host"`
	// DumpURL is where the server POSTs DumpRequests (e.g. http://host:7070/api/v1/dump).
	DumpURL   string    `json:"dumpUrl"`
	Kinds     []string  `json:"kinds,omitempty"`
	Processes []Process `json:"processes"`
	Version   string    `json:"version,omitempty"`
}

// RegistrationReply answers a registration or heartbeat.
type RegistrationReply struct {
	AgentID string `json:"agentId"`
	// HeartbeatSeconds is how often the agent must heartbeat; an agent silent
	// for three intervals is forgotten.
	HeartbeatSeconds int `json:"heartbeatSeconds"`
}

// SpanRef names a span in protocol messages (hex ids).
type SpanRef struct {
	TraceID string `json:"traceId"`
	SpanID  string `json:"spanId"`
}

// DumpRequest asks an agent for evidence of one process and window. The agent
// answers 202 Accepted at once, then uploads each artifact to
// POST {server}/api/v1/captures/{captureId}/artifacts and finishes with
// POST {server}/api/v1/captures/{captureId}/complete.
type DumpRequest struct {
	CaptureID string    `json:"captureId"`
	PID       int64     `json:"pid"`
	Start     int64     `json:"start"` // Unix ns
	End       int64     `json:"end"`   // Unix ns
	Kinds     []string  `json:"kinds,omitempty"`
	Spans     []SpanRef `json:"spans"`
	// MaxBytes is what is left of the process's capture budget; uploads beyond
	// it are refused.
	MaxBytes int64 `json:"maxBytes"`
	// UploadURL, when set, is the base URL the agent uploads this capture's
	// artifacts and completion to instead of the server it registered with:
	// in a scale-out deployment the detector that asked for the capture
	// holds its state. An agent reachable beyond loopback requires the
	// token for dump requests, so only a server holding it chooses where
	// evidence goes.
	UploadURL string `json:"uploadUrl,omitempty"`
}

// Completion ends a capture.
type Completion struct {
	// Status is "complete", "partial" (e.g. the target exited mid-dump) or "failed".
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// Capture states.
const (
	StatePending   = "pending"   // waiting for its window to close
	StateRequested = "requested" // sent to the agent, uploads expected
	StateComplete  = "complete"
	StatePartial   = "partial"
	StateFailed    = "failed"
	StateExpired   = "expired" // the agent never completed it
	StateSkipped   = "skipped" // budget exhausted, or held by the rate limits past its window
)
