package query

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// jaegerOK writes a successful Jaeger envelope.
func (a *API) jaegerOK(w http.ResponseWriter, r *http.Request, data any, total int, errs []envelopeError) {
	a.writeJSON(w, r, http.StatusOK, envelope{Data: data, Total: total, Errors: errs})
}

// jaegerError writes a Jaeger error envelope with status.
func (a *API) jaegerError(w http.ResponseWriter, r *http.Request, status int, err error) {
	a.writeJSON(w, r, status, envelope{Errors: []envelopeError{{Code: status, Msg: err.Error()}}})
}

// jaegerStoreError answers a failed store call.
func (a *API) jaegerStoreError(w http.ResponseWriter, r *http.Request, err error) {
	a.jaegerError(w, r, a.storeStatus(r, err), err)
}

// getServices implements GET /api/services: sorted service names.
func (a *API) getServices(w http.ResponseWriter, r *http.Request) {
	services, err := a.spans.GetServices(r.Context())
	if err != nil {
		a.jaegerStoreError(w, r, err)
		return
	}
	services = slices.Compact(slices.Sorted(slices.Values(services)))
	if services == nil {
		services = []string{}
	}
	a.jaegerOK(w, r, services, len(services), nil)
}

// getServiceOperations implements GET /api/services/{service}/operations, the
// legacy endpoint the Jaeger UI uses: unique operation names of all kinds.
func (a *API) getServiceOperations(w http.ResponseWriter, r *http.Request) {
	ops, err := a.spans.GetOperations(r.Context(), r.PathValue(paramService))
	if err != nil {
		a.jaegerStoreError(w, r, err)
		return
	}
	names := make([]string, 0, len(ops))
	for _, op := range ops {
		names = append(names, op.Name)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	a.jaegerOK(w, r, names, len(names), nil)
}

// getOperations implements GET /api/operations?service=&spanKind=.
func (a *API) getOperations(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	service := q.Get(paramService)
	if service == "" {
		a.jaegerError(w, r, http.StatusBadRequest, errServiceRequired)
		return
	}
	kind := strings.ToLower(q.Get(paramSpanKind))
	ops, err := a.spans.GetOperations(r.Context(), service)
	if err != nil {
		a.jaegerStoreError(w, r, err)
		return
	}
	out := make([]jOperation, 0, len(ops))
	for _, op := range ops {
		if kind != "" && op.Kind.String() != kind {
			continue
		}
		out = append(out, jOperation{Name: op.Name, SpanKind: op.Kind.String()})
	}
	slices.SortFunc(out, func(x, y jOperation) int {
		return cmp.Or(strings.Compare(x.Name, y.Name), strings.Compare(x.SpanKind, y.SpanKind))
	})
	out = slices.Compact(out)
	a.jaegerOK(w, r, out, len(out), nil)
}

// searchTraces implements GET /api/traces.
func (a *API) searchTraces(w http.ResponseWriter, r *http.Request) {
	ts, err := a.parseTraceSearch(r.URL.Query())
	if err != nil {
		a.jaegerError(w, r, http.StatusBadRequest, err)
		return
	}
	ctx := r.Context()
	out := []jTrace{}
	var errs []envelopeError
	if len(ts.traceIDs) > 0 {
		// As Jaeger does: the traces found, and one error per missing id.
		for _, id := range ts.traceIDs {
			spans, err := a.spans.GetTrace(ctx, id)
			if errors.Is(err, store.ErrNotFound) {
				errs = append(errs, envelopeError{Msg: "trace not found", TraceID: id.String()})
				continue
			}
			if err != nil {
				a.jaegerStoreError(w, r, err)
				return
			}
			out = append(out, a.jaegerTrace(ctx, id, spans))
		}
	} else {
		traces, err := a.spans.FindTraces(ctx, ts.query)
		if err != nil {
			a.jaegerStoreError(w, r, err)
			return
		}
		for _, spans := range traces {
			if len(spans) == 0 {
				continue
			}
			out = append(out, a.jaegerTrace(ctx, model.TraceID{}, spans))
		}
	}
	a.jaegerOK(w, r, out, len(out), errs)
}

// getTrace implements GET /api/traces/{traceID}.
func (a *API) getTrace(w http.ResponseWriter, r *http.Request) {
	id, err := model.ParseTraceID(r.PathValue(paramTraceID))
	if err != nil {
		a.jaegerError(w, r, http.StatusBadRequest, badParam(paramTraceID, err))
		return
	}
	spans, err := a.spans.GetTrace(r.Context(), id)
	if err == nil && len(spans) == 0 {
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		a.jaegerError(w, r, http.StatusNotFound, errors.New("trace not found"))
		return
	}
	if err != nil {
		a.jaegerStoreError(w, r, err)
		return
	}
	t := a.jaegerTrace(r.Context(), id, spans)
	a.jaegerOK(w, r, []jTrace{t}, 1, nil)
}

// jaegerTrace converts one trace, tagging the spans its artifacts explain. An
// artifact lookup failure degrades to a trace warning rather than an error:
// the spans are still worth showing.
func (a *API) jaegerTrace(ctx context.Context, id model.TraceID, spans []*model.Span) jTrace {
	if id.IsZero() {
		for _, s := range spans {
			if s != nil {
				id = s.TraceID
				break
			}
		}
	}
	var warnings []string
	arts, err := a.traceArtifacts(ctx, id)
	if err != nil {
		a.logger.Warn("cannot read trace artifacts", "trace", id.String(), "err", err)
		warnings = append(warnings, "Rootline artifacts unavailable: "+err.Error())
	}
	return toJaegerTrace(id, spans, arts, warnings)
}

// traceArtifacts returns the artifacts of a trace; none without a store.
func (a *API) traceArtifacts(ctx context.Context, id model.TraceID) ([]store.Artifact, error) {
	if a.artifacts == nil {
		return nil, nil
	}
	arts, err := a.artifacts.TraceArtifacts(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return arts, err
}

// getDependencies implements GET /api/dependencies?endTs=&lookback= (both in
// ms; Jaeger's defaults are now and 24h), optionally restricted to edges
// touching service.
func (a *API) getDependencies(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	end := a.now().UnixNano()
	if s := q.Get(paramEndTs); s != "" {
		var err error
		if end, err = parseMillis(s); err != nil {
			a.jaegerError(w, r, http.StatusBadRequest, badParam(paramEndTs, err))
			return
		}
	}
	lookback := int64(defaultDependencyLookback)
	if s := q.Get(paramLookback); s != "" {
		var err error
		if lookback, err = parseMillis(s); err != nil {
			a.jaegerError(w, r, http.StatusBadRequest, badParam(paramLookback, err))
			return
		}
	}
	start := max(0, end-lookback)

	links, err := a.spans.Dependencies(r.Context(), start, end)
	if err != nil {
		a.jaegerStoreError(w, r, err)
		return
	}
	service := q.Get(paramService)
	type edge struct{ parent, child string }
	// Backends may return an edge more than once (e.g. per time bucket);
	// Jaeger sums them.
	index := make(map[edge]int)
	out := []jDependencyLink{}
	for _, l := range links {
		if service != "" && l.Parent != service && l.Child != service {
			continue
		}
		k := edge{l.Parent, l.Child}
		if i, ok := index[k]; ok {
			out[i].CallCount += l.CallCount
			out[i].Anomalies += l.Anomalies
			continue
		}
		index[k] = len(out)
		out = append(out, jDependencyLink{Parent: l.Parent, Child: l.Child, CallCount: l.CallCount, Anomalies: l.Anomalies})
	}
	slices.SortFunc(out, func(x, y jDependencyLink) int {
		return cmp.Or(strings.Compare(x.Parent, y.Parent), strings.Compare(x.Child, y.Child))
	})
	a.jaegerOK(w, r, out, len(out), nil)
}
