package agent

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/httpjson"
)

// Handler serves the agent's API:
//
//	POST   /api/v1/dump              dump request from the server (agentapi.DumpRequest) → 202
//	GET    /api/v1/processes         current targets ([]agentapi.Process)
//	POST   /api/v1/processes         register a process {pid, service, serviceInstanceId} → 201
//	DELETE /api/v1/processes/{pid}   forget a registered process → 204
//	GET    /api/v1/containers        registered containers ([]Container)
//	POST   /api/v1/containers        register a cgroup v2 (ContainerSpec) → 201
//	DELETE /api/v1/containers/{id}   forget a registered container → 204
//	POST   /api/v1/traces            span relay: an OTLP/HTTP protobuf trace request, sent on to the server (relay.go) → 200
//	GET    /api/v1/kmetrics          kernel metrics config and containers (with --kmetrics)
//	PUT    /api/v1/kmetrics/config   change it live (kmetrics.ConfigRequest)
//	GET    /metrics                  Prometheus metrics
//	GET    /healthz                  liveness
//
// The /api/ routes answer only callers authorize identifies: a holder of
// the token (over TCP or the socket) or a local user on the unix socket.
// Root and token holders may use every route; another local user may
// dump, register, forget and list only the processes it owns, and none of
// the node-wide routes (containers, components). /metrics and /healthz stay
// open.
func (a *Agent) Handler() http.Handler {
	api := http.NewServeMux()
	api.HandleFunc("POST /api/v1/dump", a.handleDump)
	api.HandleFunc("GET /api/v1/processes", a.handleListProcesses)
	api.HandleFunc("POST /api/v1/processes", a.handleAddProcess)
	api.HandleFunc("DELETE /api/v1/processes/{pid}", a.handleRemoveProcess)
	node := http.NewServeMux()
	node.HandleFunc("GET /api/v1/containers", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, a.containerList())
	})
	node.HandleFunc("POST /api/v1/containers", a.handleAddContainer)
	if a.relay != nil {
		node.HandleFunc("POST "+agentapi.TracesPath, a.relay.handle)
	}
	node.HandleFunc("DELETE /api/v1/containers/{id}", a.handleRemoveContainer)
	for _, c := range a.componentList() { // e.g. /api/v1/kmetrics (component.go)
		c.Routes(node)
	}
	api.Handle("/api/", requireTrusted(node))

	mux := http.NewServeMux()
	mux.Handle("/api/", a.authorize(api))
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

// handleListProcesses lists the targets the caller may see: all of them
// for a trusted caller, its own for another local user.
func (a *Agent) handleListProcesses(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r)
	out := a.processes()
	if !c.trusted {
		mine := out[:0]
		for _, p := range out {
			if uid, err := procOwner(a.procRoot, int(p.PID)); err == nil && uid == c.uid {
				mine = append(mine, p)
			}
		}
		out = mine
	}
	writeJSON(w, http.StatusOK, out)
}

// handleAddProcess registers a process (`rootline run` does so for the
// process it starts). It becomes a target at once and stays one until it
// exits or is deleted; its service and instance id override discovery.
// Only a trusted caller or the process's owner may register it.
func (a *Agent) handleAddProcess(w http.ResponseWriter, r *http.Request) {
	var p agentapi.Process
	if err := decodeJSON(w, r, &p, true); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if p.PID <= 0 || p.PID > 1<<22 {
		writeError(w, http.StatusBadRequest, "pid must be a positive process id")
		return
	}
	pid := int(p.PID)
	c := callerOf(r)
	st, err := readStat(a.procRoot, pid)
	if err == nil {
		err = a.mayAct(c, pid)
	}
	if err == nil {
		// The pid must not have been reused between the two reads.
		if again, serr := readStat(a.procRoot, pid); serr != nil || again.start != st.start {
			err = errNoProcess
		}
	}
	if err != nil {
		a.metrics.refused.WithLabelValues("register").Inc()
		switch {
		case errors.Is(err, errNoProcess):
			writeError(w, http.StatusNotFound, fmt.Sprintf("no process %d on this host", pid))
		case errors.Is(err, errNotOwner):
			a.logger.Info("process registration refused", "pid", pid, "uid", c.uid, "err", err)
			writeError(w, http.StatusForbidden, err.Error())
		default:
			writeError(w, http.StatusInternalServerError, err.Error())
		}
		return
	}
	by := int64(-1)
	if !c.trusted {
		by = int64(c.uid)
	}
	a.mu.Lock()
	a.registered[pid] = apiProcess{service: p.Service, instanceID: p.InstanceID, start: st.start, by: by}
	// A target known under another name is restarted with the registered one.
	if t, ok := a.targets[pid]; ok && t.start == st.start && (p.Service != "" && t.Service != p.Service || p.InstanceID != "" && t.instanceID != p.InstanceID) {
		t.start = 0 // forces reconcile to stop and start it again
	}
	a.mu.Unlock()
	a.reconcile()
	a.mu.Lock()
	t, ok := a.targets[pid]
	var out agentapi.Process
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
// (discovery may find it again if its environment names a service). A
// trusted caller may forget any; a local user those it registered.
func (a *Agent) handleRemoveProcess(w http.ResponseWriter, r *http.Request) {
	pid, err := strconv.Atoi(r.PathValue("pid"))
	if err != nil || pid <= 0 {
		writeError(w, http.StatusBadRequest, "pid must be a positive integer")
		return
	}
	c := callerOf(r)
	a.mu.Lock()
	reg, ok := a.registered[pid]
	allowed := ok && (c.trusted || reg.by == int64(c.uid))
	if allowed {
		delete(a.registered, pid)
	}
	a.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("process %d is not registered", pid))
		return
	}
	if !allowed {
		a.metrics.refused.WithLabelValues("forget").Inc()
		writeError(w, http.StatusForbidden, fmt.Sprintf("uid %d did not register process %d: only root, a holder of the agent's token or the user that registered it may forget it", c.uid, pid))
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
