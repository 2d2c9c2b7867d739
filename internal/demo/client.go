package demo

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// APISource reads what a diagnosis needs from a running server's query API:
// analysis.Source over HTTP. Jaeger's JSON and Rootline's /api/v1 answers
// are decoded into model types here and nowhere else in the demo.
type APISource struct {
	base, token string
	client      *http.Client
}

var _ analysis.Source = (*APISource)(nil)

// NewAPISource reads the query API at base (e.g. "http://127.0.0.1:16686");
// token, when set, is sent as a bearer token.
func NewAPISource(base, token string) *APISource {
	return &APISource{base: strings.TrimRight(base, "/"), token: token, client: http.DefaultClient}
}

// maxAnswerBytes bounds a JSON answer the source decodes: a sampled search
// is at most a hundred traces.
const maxAnswerBytes = 256 << 20

// apiError is an answer of the API other than 200 OK.
type apiError struct {
	Path   string
	Status int
	Msg    string // the start of the body
}

func (e *apiError) Error() string {
	return fmt.Sprintf("GET %s: %d %s: %s", e.Path, e.Status, http.StatusText(e.Status), e.Msg)
}

// Unwrap makes a 404 an error wrapping store.ErrNotFound.
func (e *apiError) Unwrap() error {
	if e.Status == http.StatusNotFound {
		return store.ErrNotFound
	}
	return nil
}

func (c *APISource) do(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, &apiError{Path: path, Status: resp.StatusCode, Msg: strings.TrimSpace(string(b))}
	}
	return resp, nil
}

// get decodes a plain JSON answer (the /api/v1 routes).
func (c *APISource) get(ctx context.Context, path string, v any) error {
	resp, err := c.do(ctx, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// getJaeger decodes the data of a Jaeger envelope.
func (c *APISource) getJaeger(ctx context.Context, path string, data any) error {
	var env struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Msg string `json:"msg"`
		} `json:"errors"`
	}
	if err := c.get(ctx, path, &env); err != nil {
		return err
	}
	if len(env.Data) == 0 || string(env.Data) == "null" {
		if len(env.Errors) > 0 {
			return fmt.Errorf("GET %s: %s", path, env.Errors[0].Msg)
		}
		return nil
	}
	if err := json.Unmarshal(env.Data, data); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// anomalyRec is one entry of GET /api/v1/anomalies.
type anomalyRec struct {
	TraceID    string `json:"traceID"`
	SpanID     string `json:"spanID"`
	Service    string `json:"service"`
	Operation  string `json:"operation"`
	Kind       string `json:"kind"`
	Start      int64  `json:"start"`
	DurationNs int64  `json:"durationNs"`
	Error      bool   `json:"error"`
	Artifacts  []struct {
		ID        string `json:"id"`
		Kind      string `json:"kind"`
		MediaType string `json:"mediaType"`
	} `json:"artifacts"`
}

// Anomalies implements analysis.Source (GET /api/v1/anomalies).
func (c *APISource) Anomalies(ctx context.Context, since time.Time, limit int) ([]analysis.Anomaly, error) {
	q := url.Values{"since": {strconv.FormatInt(since.UnixNano(), 10)}, "limit": {strconv.Itoa(limit)}}
	path := "/api/v1/anomalies?" + q.Encode()
	var recs []anomalyRec
	if err := c.get(ctx, path, &recs); err != nil {
		return nil, err
	}
	out := make([]analysis.Anomaly, 0, len(recs))
	for _, r := range recs {
		tid, err := model.ParseTraceID(r.TraceID)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", path, err)
		}
		sid, err := model.ParseSpanID(r.SpanID)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", path, err)
		}
		s := &model.Span{TraceID: tid, SpanID: sid, Service: r.Service, Name: r.Operation, Kind: spanKind(r.Kind),
			Start: r.Start, Duration: r.DurationNs, Attributes: []model.KeyValue{model.Bool(model.AttrAnomaly, true)}}
		if r.Error {
			s.StatusCode = model.StatusError
		}
		a := analysis.Anomaly{Span: s}
		for _, art := range r.Artifacts {
			a.Artifacts = append(a.Artifacts, store.Artifact{ID: art.ID, Kind: art.Kind, MediaType: art.MediaType, Service: r.Service,
				Spans: []store.SpanRef{{TraceID: tid, SpanID: sid}}})
		}
		out = append(out, a)
	}
	return out, nil
}

// Trace implements analysis.Source (GET /api/traces?traceID=).
func (c *APISource) Trace(ctx context.Context, id model.TraceID) ([]*model.Span, error) {
	ts, err := c.traces(ctx, url.Values{"traceID": {id.String()}})
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("trace %s: %w", id, store.ErrNotFound)
	}
	return ts[0], nil
}

// Services implements analysis.Source (GET /api/services).
func (c *APISource) Services(ctx context.Context) ([]string, error) {
	var services []string
	err := c.getJaeger(ctx, "/api/services", &services)
	return services, err
}

// SearchTraces implements analysis.Source (GET /api/traces, times in µs as
// Jaeger's API takes them).
func (c *APISource) SearchTraces(ctx context.Context, service string, from, to time.Time, limit int) ([][]*model.Span, error) {
	return c.traces(ctx, url.Values{
		"service": {service},
		"start":   {strconv.FormatInt(from.UnixMicro(), 10)},
		"end":     {strconv.FormatInt(to.UnixMicro(), 10)},
		"limit":   {strconv.Itoa(limit)},
	})
}

// Captures implements analysis.Source (GET /api/v1/captures).
func (c *APISource) Captures(ctx context.Context, limit int) ([]analysis.Capture, error) {
	var caps []analysis.Capture
	err := c.get(ctx, "/api/v1/captures?limit="+strconv.Itoa(limit), &caps)
	return caps, err
}

// ArtifactContent implements analysis.Source (GET /api/v1/artifacts/{id}).
func (c *APISource) ArtifactContent(ctx context.Context, id string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, "/api/v1/artifacts/"+url.PathEscape(id))
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

func (c *APISource) traces(ctx context.Context, q url.Values) ([][]*model.Span, error) {
	path := "/api/traces?" + q.Encode()
	var jts []jaegerTrace
	if err := c.getJaeger(ctx, path, &jts); err != nil {
		return nil, err
	}
	out := make([][]*model.Span, 0, len(jts))
	for i := range jts {
		spans, err := jts[i].spans()
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", path, err)
		}
		out = append(out, spans)
	}
	return out, nil
}

// Jaeger JSON, as served by /api/traces.
type jaegerTrace struct {
	TraceID string       `json:"traceID"`
	Spans   []jaegerSpan `json:"spans"`
	// Processes are keyed by the spans' processID.
	Processes map[string]struct {
		ServiceName string     `json:"serviceName"`
		Tags        []jaegerKV `json:"tags"`
	} `json:"processes"`
}

type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64      `json:"startTime"` // µs
	Duration  int64      `json:"duration"`  // µs
	Tags      []jaegerKV `json:"tags"`
	Logs      []struct {
		Timestamp int64      `json:"timestamp"` // µs
		Fields    []jaegerKV `json:"fields"`
	} `json:"logs"`
	ProcessID string `json:"processID"`
}

type jaegerKV struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// spans converts a Jaeger trace back into model spans: the parent is the
// first CHILD_OF reference (else the first reference), other references are
// links, tags are typed attributes (but for those internal/query/jaeger.go
// derives from the span's kind, status and scope, which go back into their
// fields), and times are µs as Jaeger's are.
func (jt *jaegerTrace) spans() ([]*model.Span, error) {
	tid, err := model.ParseTraceID(jt.TraceID)
	if err != nil {
		return nil, err
	}
	out := make([]*model.Span, 0, len(jt.Spans))
	for _, js := range jt.Spans {
		s := &model.Span{TraceID: tid, Name: js.OperationName, Start: js.StartTime * 1000, Duration: js.Duration * 1000}
		if s.SpanID, err = model.ParseSpanID(js.SpanID); err != nil {
			return nil, err
		}
		parent := -1
		for i, r := range js.References {
			if r.RefType == "CHILD_OF" {
				parent = i
				break
			}
		}
		if parent < 0 && len(js.References) > 0 {
			parent = 0
		}
		for i, r := range js.References {
			sid, err := model.ParseSpanID(r.SpanID)
			if err != nil {
				return nil, err
			}
			if i == parent {
				s.ParentSpanID = sid
				continue
			}
			ltid, err := model.ParseTraceID(r.TraceID)
			if err != nil {
				return nil, err
			}
			s.Links = append(s.Links, model.Link{TraceID: ltid, SpanID: sid})
		}
		for _, kv := range js.Tags {
			switch kv.Key {
			case "span.kind":
				s.Kind = spanKind(fmt.Sprint(kv.Value))
			case "otel.status_code":
				switch kv.Value {
				case "OK":
					s.StatusCode = model.StatusOK
				case "ERROR":
					s.StatusCode = model.StatusError
				}
			case "otel.status_description":
				s.StatusMessage = fmt.Sprint(kv.Value)
			case "otel.scope.name":
				s.Scope = fmt.Sprint(kv.Value)
			default:
				s.Attributes = append(s.Attributes, kv.model())
			}
		}
		for _, l := range js.Logs {
			ev := model.Event{Time: l.Timestamp * 1000}
			for _, f := range l.Fields {
				if f.Key == "event" && ev.Name == "" {
					ev.Name = fmt.Sprint(f.Value)
					continue
				}
				ev.Attributes = append(ev.Attributes, f.model())
			}
			s.Events = append(s.Events, ev)
		}
		p := jt.Processes[js.ProcessID]
		s.Service = p.ServiceName
		s.Resource = append(s.Resource, model.String(model.AttrServiceName, p.ServiceName))
		for _, kv := range p.Tags {
			s.Resource = append(s.Resource, kv.model())
		}
		out = append(out, s)
	}
	return out, nil
}

// model converts a Jaeger tag to a typed attribute: int64 values come as
// JSON numbers, or as strings past 2^53; binary ones in base64.
func (kv jaegerKV) model() model.KeyValue {
	switch v := kv.Value.(type) {
	case bool:
		return model.Bool(kv.Key, v)
	case float64:
		if kv.Type == "int64" {
			return model.Int(kv.Key, int64(v))
		}
		return model.Float(kv.Key, v)
	case string:
		switch kv.Type {
		case "int64":
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return model.Int(kv.Key, n)
			}
		case "float64":
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return model.Float(kv.Key, f)
			}
		case "binary":
			if b, err := base64.StdEncoding.DecodeString(v); err == nil {
				return model.KeyValue{Key: kv.Key, Value: model.Value{Type: model.TypeBytes, Str: string(b)}}
			}
		}
		return model.String(kv.Key, v)
	}
	return model.String(kv.Key, fmt.Sprint(kv.Value))
}

// spanKind parses the names model.SpanKind.String gives.
func spanKind(name string) model.SpanKind {
	for k := model.KindInternal; k <= model.KindConsumer; k++ {
		if k.String() == name {
			return k
		}
	}
	return model.KindUnspecified
}
