package query

import (
	"errors"
	"net/http"

	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// getCriticalPath implements GET /api/v1/traces/{traceID}/critical-path: the
// critical path of each span of the trace that a kernel snapshot explains
// (critpath.TraceResult; docs/api.md). Paths stored when the capture
// completed are served as they are; a snapshot without them is analysed
// now, one request at a time (a large snapshot takes seconds of CPU).
func (a *API) getCriticalPath(w http.ResponseWriter, r *http.Request) {
	id, err := model.ParseTraceID(r.PathValue(paramTraceID))
	if err != nil {
		a.v1Error(w, r, http.StatusBadRequest, badParam(paramTraceID, err))
		return
	}
	if a.artifacts == nil {
		a.v1Error(w, r, http.StatusNotFound, critpath.ErrNoSnapshot)
		return
	}
	an := &critpath.Analyzer{Spans: a.spans, Artifacts: a.artifacts, Logger: a.logger, Slots: a.critpathSlot}
	res, err := an.Trace(r.Context(), id)
	switch {
	case errors.Is(err, critpath.ErrNoSnapshot):
		a.v1Error(w, r, http.StatusNotFound, err)
		return
	case errors.Is(err, store.ErrNotFound):
		a.v1Error(w, r, http.StatusNotFound, errors.New("trace not found"))
		return
	case err != nil:
		a.v1StoreError(w, r, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, res)
}
