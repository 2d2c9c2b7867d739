package capture

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/httpjson"
	"github.com/rootline/rootline/internal/store"
)

// Handler serves the agent and capture API (docs/api.md):
//
//	POST   /api/v1/agents                         register
//	PUT    /api/v1/agents/{id}                    heartbeat (replaces the process list)
//	DELETE /api/v1/agents/{id}                    deregister
//	GET    /api/v1/agents                         list
//	GET    /api/v1/captures?limit=                recent captures
//	GET    /api/v1/captures/{id}                  one capture
//	POST   /api/v1/captures/{id}/artifacts?kind=  upload one artifact (raw body)
//	POST   /api/v1/captures/{id}/complete         end a capture
//
// With an AuthToken configured every route requires "Authorization: Bearer <token>".
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/agents", m.register)
	mux.HandleFunc("GET /api/v1/agents", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, m.Agents()) })
	mux.HandleFunc("PUT /api/v1/agents/{id}", m.heartbeat)
	mux.HandleFunc("DELETE /api/v1/agents/{id}", m.deregister)
	mux.HandleFunc("GET /api/v1/captures", m.listCaptures)
	mux.HandleFunc("GET /api/v1/captures/{id}", m.getCapture)
	mux.HandleFunc("POST /api/v1/captures/{id}/artifacts", m.upload)
	mux.HandleFunc("POST /api/v1/captures/{id}/complete", m.complete)
	return m.authorize(mux)
}

func (m *Manager) authorize(next http.Handler) http.Handler {
	return httpjson.RequireBearer(m.cfg.AuthToken, next)
}

func (m *Manager) register(w http.ResponseWriter, r *http.Request) {
	var reg agentapi.Registration
	if err := decodeJSON(w, r, &reg); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	client, err := m.validateRegistration(reg)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	m.mu.Lock()
	if reg.AgentID == "" {
		reg.AgentID = newID()
	}
	if old := m.agents[reg.AgentID]; old != nil {
		old.client.CloseIdleConnections()
	}
	m.agents[reg.AgentID] = &agent{Registration: reg, lastSeen: m.now(), client: client}
	m.mu.Unlock()
	m.mirrored(reg, false)
	m.logger.Info("agent registered", "agent", reg.AgentID, "host", reg.Host, "processes", len(reg.Processes), "kinds", reg.Kinds)
	writeJSON(w, http.StatusOK, m.reply(reg.AgentID))
}

func (m *Manager) heartbeat(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var reg agentapi.Registration
	if err := decodeJSON(w, r, &reg); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	reg.AgentID = id
	client, err := m.validateRegistration(reg)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	m.mu.Lock()
	a, ok := m.agents[id]
	if ok {
		if a.DumpURL == reg.DumpURL {
			client = a.client // keeps its connections
		} else {
			a.client.CloseIdleConnections()
		}
		a.Registration, a.client = reg, client
		a.lastSeen = m.now()
	}
	m.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "unknown agent "+id+": register again")
		return
	}
	m.mirrored(reg, false)
	writeJSON(w, http.StatusOK, m.reply(id))
}

// reply is the answer to a registration or heartbeat of agent id.
func (m *Manager) reply(id string) agentapi.RegistrationReply {
	return agentapi.RegistrationReply{AgentID: id, HeartbeatSeconds: int(m.cfg.Heartbeat / time.Second),
		OTLPHTTPPort: int(m.otlpPort.Load()), OTLPHTTPTLS: m.otlpTLS.Load()}
}

// SetOTLPHTTP names the server's OTLP/HTTP receiver to the agents (its
// port; whether it takes TLS): they relay their node's spans there.
func (m *Manager) SetOTLPHTTP(port int, tls bool) {
	m.otlpPort.Store(int32(port))
	m.otlpTLS.Store(tls)
}

func (m *Manager) deregister(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	m.mu.Lock()
	if a := m.agents[id]; a != nil {
		a.client.CloseIdleConnections()
		delete(m.agents, id)
	}
	m.mu.Unlock()
	m.mirrored(agentapi.Registration{AgentID: id}, true)
	w.WriteHeader(http.StatusNoContent)
}

// validateRegistration checks a registration and returns the client of its
// dump URL.
func (m *Manager) validateRegistration(reg agentapi.Registration) (*agentapi.AgentClient, error) {
	if reg.Host == "" {
		return nil, errors.New("registration: host is required")
	}
	for i, p := range reg.Processes {
		if p.PID <= 0 {
			return nil, fmt.Errorf("registration: processes[%d].pid must be positive", i)
		}
	}
	client, err := agentapi.NewDumpClient(reg.DumpURL, m.dumpOpts)
	if err != nil {
		return nil, fmt.Errorf("registration: dumpUrl: %w", err)
	}
	return client, nil
}

func (m *Manager) listCaptures(w http.ResponseWriter, r *http.Request) {
	limit := 100
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "limit must be a positive integer")
			return
		}
		limit = n
	}
	writeJSON(w, http.StatusOK, m.Captures(limit))
}

func (m *Manager) getCapture(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	c, ok := m.captures[r.PathValue("id")]
	var cp Capture
	if ok {
		cp = *c
		cp.SpanCount = len(c.Spans)
		cp.Artifacts = append([]string{}, c.Artifacts...)
	}
	m.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "unknown capture")
		return
	}
	writeJSON(w, http.StatusOK, cp)
}

// upload stores one artifact of a requested capture. Metadata comes from the
// query (kind, fileName, start, end, partial, attrs as a JSON object) and the
// Content-Type header; the body is the raw artifact.
func (m *Manager) upload(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	up, err := agentapi.ParseUpload(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	kind := up.Kind
	mediaType := r.Header.Get("Content-Type")
	if mediaType == "" {
		mediaType = "application/octet-stream"
	} else if _, _, err := mime.ParseMediaType(mediaType); err != nil {
		writeError(w, http.StatusBadRequest, "bad Content-Type: "+err.Error())
		return
	}
	m.mu.Lock()
	c, ok := m.captures[id]
	if !ok || (c.State != StateRequested) {
		m.mu.Unlock()
		if !ok {
			writeError(w, http.StatusNotFound, "unknown capture "+id)
		} else {
			writeError(w, http.StatusConflict, "capture "+id+" is "+c.State+", not accepting uploads")
		}
		return
	}
	meta := store.Artifact{
		Kind: kind, MediaType: mediaType, FileName: up.FileName, Host: c.Host, Service: c.Service,
		PID: c.PID, Start: c.Start, End: c.End, Partial: up.Partial, CaptureID: c.ID,
		Attributes: up.Attributes, Spans: append([]store.SpanRef(nil), c.Spans...),
	}
	left := m.cfg.BudgetBytesPerMinute - m.usedLocked(budgetKey(c.Host, c.PID), m.now())
	m.mu.Unlock()
	if up.Start != 0 {
		meta.Start = up.Start
	}
	if up.End != 0 {
		meta.End = up.End
	}
	if meta.FileName == "" {
		meta.FileName = kind + "-" + id
	}
	if left <= 0 || r.ContentLength > left {
		m.m.captures.WithLabelValues("upload_over_budget").Inc()
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("artifact exceeds the process's capture budget (%d bytes left this minute)", max(left, 0)))
		return
	}
	body := http.MaxBytesReader(w, r.Body, left)
	art, err := m.artifacts.PutArtifact(r.Context(), meta, body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("artifact exceeds the process's capture budget (%d bytes left this minute)", left))
			return
		}
		m.logger.Error("store artifact", "capture", id, "kind", kind, "err", err)
		writeError(w, http.StatusInternalServerError, "storing the artifact failed")
		return
	}
	m.m.uploadBytes.Add(float64(art.Size))
	m.mu.Lock()
	c.Artifacts = append(c.Artifacts, art.ID)
	c.Bytes += art.Size
	key := budgetKey(c.Host, c.PID)
	m.ledger[key] = append(m.ledger[key], ledgerEntry{at: m.now(), bytes: art.Size})
	// Spans that joined the capture during the upload get linked too.
	late := c.Spans[len(meta.Spans):]
	m.mu.Unlock()
	if len(late) > 0 {
		if err := m.artifacts.LinkArtifact(r.Context(), art.ID, late); err != nil {
			m.logger.Warn("link artifact to late spans", "artifact", art.ID, "err", err)
		}
	}
	writeJSON(w, http.StatusCreated, agentapi.UploadReply{ID: art.ID, SHA256: art.SHA256, Size: art.Size})
}

func (m *Manager) complete(w http.ResponseWriter, r *http.Request) {
	var cm agentapi.Completion
	if err := decodeJSON(w, r, &cm); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	state := map[string]string{agentapi.StatusComplete: StateComplete, agentapi.StatusPartial: StatePartial, agentapi.StatusFailed: StateFailed}[cm.Status]
	if state == "" {
		writeError(w, http.StatusBadRequest, `status must be "complete", "partial" or "failed"`)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.captures[r.PathValue("id")]
	if !ok {
		writeError(w, http.StatusNotFound, "unknown capture")
		return
	}
	if c.State != StateRequested {
		writeError(w, http.StatusConflict, "capture is already "+c.State)
		return
	}
	m.finishLocked(c, state, cm.Error)
	w.WriteHeader(http.StatusNoContent)
}

func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	return httpjson.Decode(w, r, v, true)
}

func writeJSON(w http.ResponseWriter, status int, v any) { httpjson.Write(w, status, v) }

func writeError(w http.ResponseWriter, status int, msg string) { httpjson.Error(w, status, msg) }
