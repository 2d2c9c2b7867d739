// Package agentapi is the wire protocol between a Rootline agent and the two
// programs that talk to it — the server (registration, heartbeats, dump
// requests, artifact uploads) and `rootline run` (process registration) —
// and a small client for each direction (client.go). docs/api.md describes
// the protocol; the JSON types here are it.
//
// The package depends on nothing of the server: the agent links it without
// linking the store, the pipeline or the query API.
package agentapi

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
	// DumpURL is where the server sends DumpRequests: the agent's address
	// (see ParseAddress) with DumpPath appended for http(s), such as
	// "http://10.0.0.5:7070/api/v1/dump", or the agent's unix socket,
	// "unix:/run/rootline/agent.sock", where the request goes to DumpPath.
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
	// OTLPHTTPPort is the port of the server's OTLP/HTTP receiver (0: it
	// runs none in this process) and OTLPHTTPTLS whether it takes TLS: the
	// agent relays its node's spans there, on the host of the server's
	// URL.
	OTLPHTTPPort int  `json:"otlpHttpPort,omitempty"`
	OTLPHTTPTLS  bool `json:"otlpHttpTls,omitempty"`
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
	CaptureID string `json:"captureId"`
	// AgentID is the registration the server resolved the spans to. An
	// agent refuses a request that names another registration than its
	// own: a registration that merely gives another agent's dump URL (any
	// local user can register with a server that has no token) cannot
	// have that agent dump for it.
	AgentID string `json:"agentId,omitempty"`
	PID     int64  `json:"pid"`
	// Service is the service the process was registered under; an agent
	// refuses a request whose service is not the process's.
	Service string    `json:"service,omitempty"`
	Start   int64     `json:"start"` // Unix ns
	End     int64     `json:"end"`   // Unix ns
	Kinds   []string  `json:"kinds,omitempty"`
	Spans   []SpanRef `json:"spans"`
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

// DumpAccepted is the agent's 202 answer to a DumpRequest.
type DumpAccepted struct {
	CaptureID string   `json:"captureId"`
	Kinds     []string `json:"kinds"`
}

// Completion ends a capture.
type Completion struct {
	// Status is StatusComplete, StatusPartial (e.g. the target exited
	// mid-dump) or StatusFailed.
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// Completion statuses.
const (
	StatusComplete = "complete"
	StatusPartial  = "partial"
	StatusFailed   = "failed"
)

// UploadReply is the server's 201 answer to an artifact upload.
type UploadReply struct {
	ID     string `json:"id"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// DefaultSocket is the agent's unix socket unless configured otherwise, and
// where `rootline run` registers the processes it starts.
const DefaultSocket = "/run/rootline/agent.sock"

// Paths of the protocol. The server's routes take the agent and capture id
// as the last path element ({id}).
const (
	// DumpPath is the agent's dump route.
	DumpPath = "/api/v1/dump"
	// ProcessesPath is the agent's process registration route; DELETE
	// ProcessesPath/{pid} forgets one.
	ProcessesPath = "/api/v1/processes"
	// TracesPath is the agent's span relay: OTLP/HTTP trace requests
	// (protobuf, as a collector's /v1/traces) of the node's processes,
	// sent on to the server in one request a second.
	TracesPath = "/api/v1/traces"
	// AgentsPath is the server's agent registration route; PUT and DELETE
	// AgentsPath/{agentId} heartbeat and deregister.
	AgentsPath = "/api/v1/agents"
	// CapturesPath is the server's capture route: uploads go to
	// CapturesPath/{captureId}/artifacts, completions to
	// CapturesPath/{captureId}/complete.
	CapturesPath = "/api/v1/captures"
)
