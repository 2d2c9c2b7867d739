package agent

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rootline/rootline/internal/capture"
)

// maxJSONBody bounds request bodies.
const maxJSONBody = 1 << 20

// Handler serves the agent's API:
//
//	POST   /api/v1/dump              dump request from the server (capture.DumpRequest) → 202
//	GET    /api/v1/processes         current targets ([]capture.Process)
//	POST   /api/v1/processes         register a process {pid, service, serviceInstanceId} → 201
//	DELETE /api/v1/processes/{pid}   forget a registered process → 204
//	GET    /metrics                  Prometheus metrics
//	GET    /healthz                  liveness
//
// With an AuthToken configured the /api/ routes require
// "Authorization: Bearer <token>"; /metrics and /healthz stay open.
func (a *Agent) Handler() http.Handler {
	api := http.NewServeMux()
	api.HandleFunc("POST /api/v1/dump", a.handleDump)
	api.HandleFunc("GET /api/v1/processes", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, a.processes())
	})
	api.HandleFunc("POST /api/v1/processes", a.handleAddProcess)
	api.HandleFunc("DELETE /api/v1/processes/{pid}", a.handleRemoveProcess)

	mux := http.NewServeMux()
	mux.Handle("/api/", a.authorize(api))
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

func (a *Agent) authorize(next http.Handler) http.Handler {
	if a.cfg.AuthToken == "" {
		return next
	}
	want := []byte("Bearer " + a.cfg.AuthToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="rootline"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// handleAddProcess registers a process (`rootline run` does so for the
// process it starts). It becomes a target at once and stays one until it
// exits or is deleted; its service and instance id override discovery.
func (a *Agent) handleAddProcess(w http.ResponseWriter, r *http.Request) {
	var p capture.Process
	if err := decodeJSON(w, r, &p, true); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if p.PID <= 0 || p.PID > 1<<22 {
		writeError(w, http.StatusBadRequest, "pid must be a positive process id")
		return
	}
	pid := int(p.PID)
	st, err := readStat(a.procRoot, pid)
	if err != nil {
		if errors.Is(err, errNoProcess) {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no process %d on this host", pid))
		} else {
			writeError(w, http.StatusInternalServerError, err.Error())
		}
		return
	}
	a.mu.Lock()
	a.registered[pid] = apiProcess{service: p.Service, instanceID: p.InstanceID, start: st.start}
	// A target known under another name is restarted with the registered one.
	if t, ok := a.targets[pid]; ok && t.start == st.start && (p.Service != "" && t.Service != p.Service || p.InstanceID != "" && t.instanceID != p.InstanceID) {
		t.start = 0 // forces reconcile to stop and start it again
	}
	a.mu.Unlock()
	a.reconcile()
	a.mu.Lock()
	t, ok := a.targets[pid]
	var out capture.Process
	if ok {
		out = t.process()
	}
	a.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("process %d exited", pid))
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

// handleRemoveProcess forgets a registered process and stops recording it
// (discovery may find it again if its environment names a service).
func (a *Agent) handleRemoveProcess(w http.ResponseWriter, r *http.Request) {
	pid, err := strconv.Atoi(r.PathValue("pid"))
	if err != nil || pid <= 0 {
		writeError(w, http.StatusBadRequest, "pid must be a positive integer")
		return
	}
	a.mu.Lock()
	_, ok := a.registered[pid]
	delete(a.registered, pid)
	a.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("process %d is not registered", pid))
		return
	}
	a.reconcile()
	w.WriteHeader(http.StatusNoContent)
}

// decodeJSON reads a JSON body. strict refuses unknown fields; dump requests
// are read leniently so a newer server can add fields.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, strict bool) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("content type must be application/json, got %q", ct)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed JSON body: %v", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
