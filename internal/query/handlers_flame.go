package query

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/flame"
)

// maxProfileBytes bounds the artifact read to build a flame graph.
const maxProfileBytes = 256 << 20

// flameGraphJSON is the answer of GET /api/v1/artifacts/{id}/flamegraph.
type flameGraphJSON struct {
	ArtifactID   string      `json:"artifactId"`
	Type         string      `json:"type"`
	Unit         string      `json:"unit"`
	SamplesTotal int         `json:"samplesTotal"`
	SamplesKept  int         `json:"samplesKept"`
	ValueTotal   int64       `json:"valueTotal"`
	Filter       flameFilter `json:"filter"`
	Root         *flame.Node `json:"root"`
}

type flameFilter struct {
	TIDs  []int64 `json:"tids,omitempty"`
	Start int64   `json:"start,omitempty"`
	End   int64   `json:"end,omitempty"`
	Type  string  `json:"type,omitempty"`
}

// getFlameGraph implements GET /api/v1/artifacts/{id}/flamegraph?tid=&start=&end=&type=:
// the artifact's pprof profile as a flame-graph tree, either whole or only the
// samples of the given threads (tid, repeatable or comma-separated) in the
// given time range (start/end: Unix ns or RFC 3339) — one request's own samples.
func (a *API) getFlameGraph(w http.ResponseWriter, r *http.Request) {
	if a.artifacts == nil {
		a.v1Error(w, r, http.StatusNotFound, errors.New("not found"))
		return
	}
	q := r.URL.Query()
	f := flame.Filter{Type: q.Get("type")}
	for _, v := range q["tid"] {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			tid, err := strconv.ParseInt(s, 10, 64)
			if err != nil || tid <= 0 {
				a.v1Error(w, r, http.StatusBadRequest, badParam("tid", fmt.Errorf("%q is not a thread id", s)))
				return
			}
			f.TIDs = append(f.TIDs, tid)
		}
	}
	for _, p := range []struct {
		name string
		dst  *int64
	}{{"start", &f.Start}, {"end", &f.End}} {
		if s := q.Get(p.name); s != "" {
			v, err := parseInstant(s)
			if err != nil {
				a.v1Error(w, r, http.StatusBadRequest, badParam(p.name, err))
				return
			}
			*p.dst = v
		}
	}
	if f.Start != 0 && f.End != 0 && f.End < f.Start {
		a.v1Error(w, r, http.StatusBadRequest, badParam("end", errors.New("end is before start")))
		return
	}
	art, rc, err := a.artifacts.OpenArtifact(r.Context(), r.PathValue("id"))
	if err != nil {
		a.v1StoreError(w, r, err)
		return
	}
	defer rc.Close()
	if !isPprof(art.MediaType, art.FileName) {
		a.v1Error(w, r, http.StatusUnprocessableEntity, fmt.Errorf("artifact %s is %s, not a pprof profile: download it instead", art.ID, art.MediaType))
		return
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxProfileBytes))
	if err != nil {
		a.v1StoreError(w, r, err)
		return
	}
	root, st, err := flame.FromPprof(data, f)
	if err != nil {
		status := http.StatusUnprocessableEntity
		if errors.Is(err, flame.ErrUnknownSampleType) {
			status = http.StatusBadRequest
		}
		a.v1Error(w, r, status, fmt.Errorf("artifact %s: %w", art.ID, err))
		return
	}
	a.writeJSON(w, r, http.StatusOK, flameGraphJSON{
		ArtifactID: art.ID, Type: st.Type, Unit: st.Unit, SamplesTotal: st.SamplesTotal, SamplesKept: st.SamplesKept,
		ValueTotal: st.ValueTotal, Filter: flameFilter{TIDs: f.TIDs, Start: f.Start, End: f.End, Type: f.Type}, Root: root,
	})
}

// isPprof recognises pprof artifacts by media type or file name.
func isPprof(mediaType, fileName string) bool {
	return strings.Contains(mediaType, "protobuf") || strings.HasSuffix(fileName, ".pb.gz") || strings.HasSuffix(fileName, ".pprof")
}

// parseInstant parses Unix nanoseconds or an RFC 3339 time.
func parseInstant(s string) (int64, error) {
	if ns, err := strconv.ParseInt(s, 10, 64); err == nil && ns >= 0 {
		return ns, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixNano(), nil
	}
	return 0, fmt.Errorf("%q is neither Unix nanoseconds nor an RFC 3339 time", s)
}
