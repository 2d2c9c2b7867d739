package agent

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rootline/rootline/internal/capture"
	"github.com/rootline/rootline/internal/httpjson"
)

// Handler serves the agent's API:
//
//	POST   /api/v1/dump              dump request from the server (capture.DumpRequest) → 202
//	GET    /api/v1/processes         current targets ([]capture.Process)
//	POST   /api/v1/processes         register a process {pid, service, serviceInstanceId} → 201
//	DELETE /api/v1/processes/{pid}   forget a registered process → 204
//	GET    /api/v1/containers        registered containers ([]Container)
//	POST   /api/v1/containers        register a cgroup v2 (ContainerSpec) → 201
//	DELETE /api/v1/containers/{id}   forget a registered container → 204
//	GET    /api/v1/kmetrics          kernel metrics config and containers (with --kmetrics)
//	PUT    /api/v1/kmetrics/config   change it live (kmetrics.ConfigRequest)
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
	api.HandleFunc("GET /api/v1/containers", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, a.containerList())
	})
	api.HandleFunc("POST /api/v1/containers", a.handleAddContainer)
	api.HandleFunc("DELETE /api/v1/containers/{id}", a.handleRemoveContainer)
	for _, c := range a.componentList() { // e.g. /api/v1/kmetrics (component.go)
		c.Routes(api)
	}

	mux := http.NewServeMux()
	mux.Handle("/api/", a.authorize(api))
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

func (a *Agent) authorize(next http.Handler) http.Handler {
	return httpjson.RequireBearer(a.cfg.AuthToken, next)
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

func decodeJSON(w http.ResponseWriter, r *http.Request, v any, strict bool) error {
	return httpjson.Decode(w, r, v, strict)
}

func writeJSON(w http.ResponseWriter, status int, v any) { httpjson.Write(w, status, v) }

func writeError(w http.ResponseWriter, status int, msg string) { httpjson.Error(w, status, msg) }
