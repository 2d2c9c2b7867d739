package query

import (
	"cmp"
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// Rootline's API answers plain JSON (no Jaeger envelope) with camelCase
// fields. Times are Unix nanoseconds, with an RFC 3339 twin where a person
// reads them.

// Evidence states of an anomaly.
const (
	evidenceCaptured = "captured" // at least one artifact is linked to the span
	evidencePending  = "pending"  // none yet: the capture may still be running
)

// defaultAnomalyLimit matches store.AnomalyQuery's default.
const defaultAnomalyLimit = 100

// v1ErrorBody is the error body of Rootline's API.
type v1ErrorBody struct {
	Code  int    `json:"code"`
	Error string `json:"error"`
}

type anomalyJSON struct {
	TraceID    string        `json:"traceID"`
	SpanID     string        `json:"spanID"`
	Service    string        `json:"service"`
	Operation  string        `json:"operation"`
	Kind       string        `json:"kind,omitempty"`
	Start      int64         `json:"start"` // Unix ns
	StartTime  string        `json:"startTime"`
	DurationNs int64         `json:"durationNs"`
	BaselineNs int64         `json:"baselineNs"` // 0 when unknown
	Threshold  float64       `json:"threshold"`  // 0 when unknown
	Error      bool          `json:"error"`
	Artifacts  []artifactRef `json:"artifacts"`
	Evidence   string        `json:"evidence"`
}

type artifactRef struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	MediaType string `json:"mediaType"`
	URL       string `json:"url"`
}

type artifactJSON struct {
	ID          string            `json:"id"`
	Kind        string            `json:"kind"`
	MediaType   string            `json:"mediaType"`
	FileName    string            `json:"fileName"`
	SHA256      string            `json:"sha256"`
	Size        int64             `json:"size"`
	Host        string            `json:"host"`
	Service     string            `json:"service"`
	PID         int64             `json:"pid"`
	Start       int64             `json:"start"` // Unix ns
	StartTime   string            `json:"startTime,omitempty"`
	End         int64             `json:"end"` // Unix ns
	EndTime     string            `json:"endTime,omitempty"`
	Created     int64             `json:"created"` // Unix ns
	CreatedTime string            `json:"createdTime,omitempty"`
	Partial     bool              `json:"partial"`
	CaptureID   string            `json:"captureId"`
	Attributes  map[string]string `json:"attributes"`
	Spans       []spanRefJSON     `json:"spans"`
	URL         string            `json:"url"`
}

type spanRefJSON struct {
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

func (a *API) v1Error(w http.ResponseWriter, r *http.Request, status int, err error) {
	a.writeJSON(w, r, status, v1ErrorBody{Code: status, Error: err.Error()})
}

func (a *API) v1StoreError(w http.ResponseWriter, r *http.Request, err error) {
	a.v1Error(w, r, a.storeStatus(r, err), err)
}

// getAnomalies implements GET /api/v1/anomalies?service=&since=&limit=:
// anomalous spans, newest first, with the evidence captured for each.
func (a *API) getAnomalies(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	aq := store.AnomalyQuery{Service: q.Get(paramService)}
	var err error
	if s := q.Get(paramSince); s != "" {
		if aq.Since, err = parseSince(s, a.now()); err != nil {
			a.v1Error(w, r, http.StatusBadRequest, err)
			return
		}
	}
	if aq.Limit, err = a.parseLimit(q, min(defaultAnomalyLimit, a.cfg.MaxLimit)); err != nil {
		a.v1Error(w, r, http.StatusBadRequest, err)
		return
	}
	spans, err := a.spans.Anomalies(r.Context(), aq)
	if err != nil {
		a.v1StoreError(w, r, err)
		return
	}
	spans = slices.DeleteFunc(slices.Clone(spans), func(s *model.Span) bool { return s == nil })
	// The store returns newest first; sorting again makes it a guarantee of
	// this API rather than of each backend.
	slices.SortStableFunc(spans, func(x, y *model.Span) int { return cmp.Compare(y.Start, x.Start) })

	// One artifact lookup per trace, not per span, and one that does not
	// read the artifacts' links to other traces (store.SpanArtifacts).
	byTrace := make(map[model.TraceID]map[model.SpanID][]store.Artifact)
	out := make([]anomalyJSON, 0, len(spans))
	for _, s := range spans {
		arts, ok := byTrace[s.TraceID]
		if !ok && a.artifacts != nil {
			var err error
			if arts, err = store.SpanArtifacts(r.Context(), a.artifacts, s.TraceID); err != nil {
				a.v1StoreError(w, r, err)
				return
			}
			byTrace[s.TraceID] = arts
		}
		var refs []artifactRef
		for _, art := range arts[s.SpanID] {
			if !slices.ContainsFunc(refs, func(x artifactRef) bool { return x.ID == art.ID }) {
				refs = append(refs, toArtifactRef(art))
			}
		}
		out = append(out, toAnomalyJSON(s, refs))
	}
	a.writeJSON(w, r, http.StatusOK, out)
}

func toArtifactRef(art store.Artifact) artifactRef {
	return artifactRef{ID: art.ID, Kind: art.Kind, MediaType: art.MediaType, URL: artifactURL(art.ID)}
}

func toAnomalyJSON(s *model.Span, arts []artifactRef) anomalyJSON {
	out := anomalyJSON{
		TraceID:    s.TraceID.String(),
		SpanID:     s.SpanID.String(),
		Service:    s.Service,
		Operation:  s.Name,
		Kind:       s.Kind.String(),
		Start:      s.Start,
		StartTime:  rfc3339(s.Start),
		DurationNs: s.Duration,
		Error:      s.IsError(),
		Artifacts:  arts,
		Evidence:   evidencePending,
	}
	if out.Artifacts == nil {
		out.Artifacts = []artifactRef{}
	} else {
		out.Evidence = evidenceCaptured
	}
	if v, ok := s.Attr(model.AttrBaselineMs); ok {
		if ms, ok := v.Number(); ok {
			out.BaselineNs = int64(math.Round(ms * 1e6))
		}
	}
	if v, ok := s.Attr(model.AttrThreshold); ok {
		if t, ok := v.Number(); ok {
			out.Threshold = t
		}
	}
	return out
}

// getTraceArtifacts implements GET /api/v1/traces/{traceID}/artifacts.
func (a *API) getTraceArtifacts(w http.ResponseWriter, r *http.Request) {
	id, err := model.ParseTraceID(r.PathValue(paramTraceID))
	if err != nil {
		a.v1Error(w, r, http.StatusBadRequest, badParam(paramTraceID, err))
		return
	}
	arts, err := a.traceArtifacts(r.Context(), id)
	if err != nil {
		a.v1StoreError(w, r, err)
		return
	}
	out := make([]artifactJSON, 0, len(arts))
	for _, art := range arts {
		out = append(out, toArtifactJSON(art))
	}
	a.writeJSON(w, r, http.StatusOK, out)
}

// getArtifactMeta implements GET /api/v1/artifacts/{id}/meta.
func (a *API) getArtifactMeta(w http.ResponseWriter, r *http.Request) {
	if a.artifacts == nil {
		a.v1Error(w, r, http.StatusNotFound, store.ErrNotFound)
		return
	}
	art, err := a.artifacts.GetArtifact(r.Context(), r.PathValue("id"))
	if err != nil {
		a.v1StoreError(w, r, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, toArtifactJSON(art))
}

// getArtifactContent implements GET /api/v1/artifacts/{id}: the raw bytes, as
// a download. Range and conditional requests work when the store's reader can
// seek.
func (a *API) getArtifactContent(w http.ResponseWriter, r *http.Request) {
	if a.artifacts == nil {
		a.v1Error(w, r, http.StatusNotFound, store.ErrNotFound)
		return
	}
	art, rc, err := a.artifacts.OpenArtifact(r.Context(), r.PathValue("id"))
	if err != nil {
		a.v1StoreError(w, r, err)
		return
	}
	defer rc.Close()

	h := w.Header()
	h.Set("Content-Type", cmp.Or(art.MediaType, "application/octet-stream"))
	h.Set("Content-Disposition", contentDisposition(cmp.Or(art.FileName, art.ID)))
	// The media type comes from the producer: never let a browser sniff the
	// content into something executable.
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "private")
	etag := ""
	if art.SHA256 != "" {
		etag = `"` + art.SHA256 + `"`
		h.Set("ETag", etag)
	}

	if rs, ok := rc.(io.ReadSeeker); ok {
		var modtime time.Time
		if art.Created > 0 {
			modtime = time.Unix(0, art.Created)
		}
		http.ServeContent(w, r, "", modtime, rs)
		return
	}

	// No seeking: no ranges, but a matching ETag still saves the transfer.
	if etag != "" && etagMatches(r.Header.Get("If-None-Match"), etag) {
		h.Del("Content-Type")
		h.Del("Content-Disposition")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if art.Size > 0 {
		h.Set("Content-Length", strconv.FormatInt(art.Size, 10))
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := io.Copy(w, rc); err != nil {
		// Usually the client went away; the status line is already sent.
		a.logger.Debug("artifact download interrupted", "artifact", art.ID, "err", err)
	}
}

// etagMatches implements the weak comparison of If-None-Match.
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

// getDetector implements GET /api/v1/detector?key=: every key's detector
// state, or one key's (404 when the detector has never seen it).
func (a *API) getDetector(w http.ResponseWriter, r *http.Request) {
	states := []anomaly.KeyState{}
	if a.detector != nil {
		if s := a.detector(); s != nil {
			states = s
		}
	}
	key := r.URL.Query().Get(paramKey)
	if key == "" {
		a.writeJSON(w, r, http.StatusOK, states)
		return
	}
	for _, s := range states {
		if s.Key == key {
			a.writeJSON(w, r, http.StatusOK, s)
			return
		}
	}
	a.v1Error(w, r, http.StatusNotFound, errors.New("unknown detector key "+strconv.Quote(key)))
}

func toArtifactJSON(art store.Artifact) artifactJSON {
	out := artifactJSON{
		ID:          art.ID,
		Kind:        art.Kind,
		MediaType:   art.MediaType,
		FileName:    art.FileName,
		SHA256:      art.SHA256,
		Size:        art.Size,
		Host:        art.Host,
		Service:     art.Service,
		PID:         art.PID,
		Start:       art.Start,
		StartTime:   rfc3339(art.Start),
		End:         art.End,
		EndTime:     rfc3339(art.End),
		Created:     art.Created,
		CreatedTime: rfc3339(art.Created),
		Partial:     art.Partial,
		CaptureID:   art.CaptureID,
		Attributes:  art.Attributes,
		Spans:       make([]spanRefJSON, 0, len(art.Spans)),
		URL:         artifactURL(art.ID),
	}
	if out.Attributes == nil {
		out.Attributes = map[string]string{}
	}
	for _, ref := range art.Spans {
		out.Spans = append(out.Spans, spanRefJSON{TraceID: ref.TraceID.String(), SpanID: ref.SpanID.String()})
	}
	return out
}

// artifactURL is the download path of an artifact, relative to the server root.
func artifactURL(id string) string {
	return "/api/v1/artifacts/" + url.PathEscape(id)
}

// rfc3339 formats Unix ns in UTC; 0 (unknown) is "".
func rfc3339(ns int64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}

// contentDisposition builds an attachment header. The quoted filename keeps
// only safe ASCII; a name that needed changes is also sent in full as
// filename* (RFC 6266 / RFC 8187), which current browsers prefer.
func contentDisposition(name string) string {
	name = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' {
			return '_' // a download name, never a path
		}
		return r
	}, name)
	ascii := strings.Map(func(r rune) rune {
		if r < 0x20 || r >= 0x7f || r == '"' {
			return '_'
		}
		return r
	}, name)
	v := `attachment; filename="` + ascii + `"`
	if ascii != name {
		v += "; filename*=UTF-8''" + rfc8187Escape(name)
	}
	return v
}

// rfc8187Escape percent-encodes every byte outside RFC 8187's attr-char.
func rfc8187Escape(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$&+-.^_`|~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
