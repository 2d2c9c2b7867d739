package query

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/rootline/rootline/internal/diagnosis"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// errNoIncidents answers the incident endpoints of a server whose store
// keeps none.
var errNoIncidents = errors.New("this server's store keeps no incidents")

// SetIncidents enables the incident endpoints over st (nil: they answer
// 501). Call it before serving.
func (a *API) SetIncidents(st store.IncidentStore) { a.incidents = st }

// incidentsJSON is the answer of GET /api/v1/incidents.
type incidentsJSON struct {
	Incidents []diagnosis.Incident `json:"incidents"`
}

// getIncidents implements GET /api/v1/incidents?service=&since=&until=&limit=:
// open and recent incidents, newest first (docs/api.md).
func (a *API) getIncidents(w http.ResponseWriter, r *http.Request) {
	if a.incidents == nil {
		a.v1Error(w, r, http.StatusNotImplemented, errNoIncidents)
		return
	}
	q := r.URL.Query()
	iq := store.IncidentQuery{Service: q.Get(paramService)}
	var err error
	if s := q.Get(paramSince); s != "" {
		if iq.From, err = parseSince(s, a.now()); err != nil {
			a.v1Error(w, r, http.StatusBadRequest, err)
			return
		}
	}
	if s := q.Get("until"); s != "" {
		if iq.To, err = parseSince(s, a.now()); err != nil {
			a.v1Error(w, r, http.StatusBadRequest, badParam("until", errors.Unwrap(err)))
			return
		}
	}
	if iq.Limit, err = a.parseLimit(q, 100); err != nil {
		a.v1Error(w, r, http.StatusBadRequest, err)
		return
	}
	list, err := a.incidents.FindIncidents(r.Context(), iq)
	if err != nil {
		a.v1StoreError(w, r, err)
		return
	}
	out := incidentsJSON{Incidents: make([]diagnosis.Incident, 0, len(list))}
	for _, s := range list {
		inc, err := diagnosis.FromStored(s)
		if err != nil {
			a.logger.Warn("stored incident unreadable", "err", err)
			continue
		}
		out.Incidents = append(out.Incidents, inc)
	}
	a.writeJSON(w, r, http.StatusOK, out)
}

// getIncident implements GET /api/v1/incidents/{id}.
func (a *API) getIncident(w http.ResponseWriter, r *http.Request) {
	if a.incidents == nil {
		a.v1Error(w, r, http.StatusNotImplemented, errNoIncidents)
		return
	}
	s, err := a.incidents.GetIncident(r.Context(), r.PathValue("id"))
	if err != nil {
		a.v1StoreError(w, r, err)
		return
	}
	inc, err := diagnosis.FromStored(s)
	if err != nil {
		a.v1Error(w, r, http.StatusInternalServerError, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, inc)
}

// getTraceDiagnosis implements GET /api/v1/traces/{traceID}/diagnosis: the
// incident the trace belongs to (its root span's entry point, started while
// the incident was open), with its verdict.
func (a *API) getTraceDiagnosis(w http.ResponseWriter, r *http.Request) {
	if a.incidents == nil {
		a.v1Error(w, r, http.StatusNotImplemented, errNoIncidents)
		return
	}
	id, err := model.ParseTraceID(r.PathValue(paramTraceID))
	if err != nil {
		a.v1Error(w, r, http.StatusBadRequest, badParam(paramTraceID, err))
		return
	}
	spans, err := a.spans.GetTrace(r.Context(), id)
	if err == nil && len(spans) == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			a.v1Error(w, r, http.StatusNotFound, errors.New("trace not found"))
			return
		}
		a.v1StoreError(w, r, err)
		return
	}
	root := diagnosis.RootOf(spans)
	list, err := a.incidents.FindIncidents(r.Context(), store.IncidentQuery{Entry: diagnosis.EntryKey(root), From: root.Start, To: root.Start, Limit: 1})
	if err != nil {
		a.v1StoreError(w, r, err)
		return
	}
	if len(list) == 0 {
		a.v1Error(w, r, http.StatusNotFound, fmt.Errorf("trace %s belongs to no incident (its entry point %q had none when it started)", id, diagnosis.EntryKey(root)))
		return
	}
	inc, err := diagnosis.FromStored(list[0])
	if err != nil {
		a.v1Error(w, r, http.StatusInternalServerError, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, inc)
}
