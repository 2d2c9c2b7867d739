package diagnosis

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store/sqlite"
)

// t0 is the tests' epoch.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func tid(n int) model.TraceID {
	var id model.TraceID
	binary.BigEndian.PutUint64(id[8:], uint64(n)+1)
	return id
}

func sid(trace, n int) model.SpanID {
	var id model.SpanID
	binary.BigEndian.PutUint32(id[:4], uint32(trace)+1)
	binary.BigEndian.PutUint32(id[4:], uint32(n)+1)
	return id
}

// shopTrace is one request as an instrumented shop reports it: the
// frontend's SERVER span, its CLIENT call to cart, cart's SERVER span, and
// cart's CLIENT call to its database, which sends no spans. Durations in ms;
// anomalous marks the spans the detector flagged (root and cart's).
func shopTrace(n int, at time.Time, frontMs, cartMs, dbMs float64, anomalous bool) []*model.Span {
	ms := func(f float64) int64 { return int64(f * 1e6) }
	start := at.UnixNano()
	flag := func(s *model.Span) *model.Span {
		s.Resource = []model.KeyValue{model.Int(model.AttrProcessPID, 4000), model.String(model.AttrServiceName, s.Service)}
		if anomalous && s.Kind == model.KindServer {
			s.Attributes = append(s.Attributes, model.Bool(model.AttrAnomaly, true), model.Float(model.AttrBaselineMs, 12))
		}
		return s
	}
	total := frontMs + cartMs + dbMs
	return []*model.Span{
		flag(&model.Span{TraceID: tid(n), SpanID: sid(n, 0), Service: "frontend", Name: "GET /checkout", Kind: model.KindServer, Start: start, Duration: ms(total)}),
		flag(&model.Span{TraceID: tid(n), SpanID: sid(n, 1), ParentSpanID: sid(n, 0), Service: "frontend", Name: "POST cart", Kind: model.KindClient,
			Start: start + ms(frontMs/2), Duration: ms(cartMs + dbMs)}),
		flag(&model.Span{TraceID: tid(n), SpanID: sid(n, 2), ParentSpanID: sid(n, 1), Service: "cart", Name: "POST /cart", Kind: model.KindServer,
			Start: start + ms(frontMs/2), Duration: ms(cartMs + dbMs), Attributes: []model.KeyValue{model.Int(model.AttrThreadID, 4001)}}),
		flag(&model.Span{TraceID: tid(n), SpanID: sid(n, 3), ParentSpanID: sid(n, 2), Service: "cart", Name: "SELECT", Kind: model.KindClient,
			Start: start + ms(frontMs/2+cartMs), Duration: ms(dbMs), Attributes: []model.KeyValue{model.String(model.AttrServerAddress, "db:5432")}}),
	}
}

// fakePaths serves critical paths made by path per span; it stands in for
// critpath.Analyzer, whose own tests compute paths from real snapshots.
type fakePaths struct {
	spans map[model.TraceID][]*model.Span
	path  func(s *model.Span) *critpath.SpanPath // nil: no path for it
}

func (f *fakePaths) Trace(_ context.Context, id model.TraceID) (*critpath.TraceResult, error) {
	res := &critpath.TraceResult{TraceID: id.String()}
	for _, s := range f.spans[id] {
		if p := f.path(s); p != nil {
			res.Spans = append(res.Spans, *p)
		}
	}
	if len(res.Spans) == 0 {
		return nil, critpath.ErrNoSnapshot
	}
	return res, nil
}

// segmentsPath is a path for s made of consecutive segments of the given
// states and lengths (ms) from its start, as critpath renders them.
func segmentsPath(s *model.Span, segs ...any) *critpath.SpanPath {
	p := &critpath.SpanPath{TraceID: s.TraceID.String(), SpanID: s.SpanID.String(), Service: s.Service, Operation: s.Name, Start: s.Start, End: s.End()}
	at := s.Start
	for i := 0; i+2 < len(segs)+1; i += 3 {
		state, wait, ms := segs[i].(string), segs[i+1].(string), segs[i+2].(float64)
		end := at + int64(ms*1e6)
		p.Segments = append(p.Segments, critpath.SegmentJSON{TID: 4001, Start: at, End: end, Ms: ms, State: state, Wait: wait})
		at = end
	}
	return p
}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(sqlite.Config{Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	})
	return st
}

// gzipJSON is v as a "critical-path" artifact holds a document: gzipped
// JSON.
func gzipJSON(t testing.TB, v any) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(v); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// shopIncident stores a minute of the shop's normal traffic from t0 (cart
// 6 ms, the database 3 ms), then 30 requests every 200 ms from the onset
// t0+60s with cart's own time cartMs and the database's dbMs, flagged by
// the detector or not. It returns the traces by id, the slow requests' cart
// SERVER spans and the end of the last one.
func shopIncident(t testing.TB, st *sqlite.Store, cartMs, dbMs float64, flagged bool) (byTrace map[model.TraceID][]*model.Span, slowCart []*model.Span, end int64) {
	t.Helper()
	byTrace = map[model.TraceID][]*model.Span{}
	var batch []*model.Span
	for i := range 60 {
		tr := shopTrace(i, t0.Add(time.Duration(i)*time.Second), 2, 6, 3, false)
		byTrace[tr[0].TraceID] = tr
		batch = append(batch, tr...)
	}
	onset := t0.Add(60 * time.Second)
	for i := range 30 {
		tr := shopTrace(100+i, onset.Add(time.Duration(i)*200*time.Millisecond), 2, cartMs, dbMs, flagged)
		byTrace[tr[0].TraceID] = tr
		batch = append(batch, tr...)
		slowCart = append(slowCart, tr[2])
		end = tr[0].End()
	}
	if err := st.WriteSpans(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	return byTrace, slowCart, end
}

// diagnoseShop diagnoses the incident shopIncident stored in st (the slow
// requests from t0+60s to end) with the critical paths cartPath gives cart's
// anomalous SERVER spans (nil for others).
func diagnoseShop(t *testing.T, st *sqlite.Store, byTrace map[model.TraceID][]*model.Span, end int64, cartPath func(s *model.Span) *critpath.SpanPath) *Verdict {
	t.Helper()
	d := &Diagnoser{Source: &analysis.StoreSource{Spans: st, Artifacts: st}, Config: DefaultConfig(),
		Now: func() time.Time { return time.Unix(0, end).Add(time.Second) },
		Paths: &fakePaths{spans: byTrace, path: func(s *model.Span) *critpath.SpanPath {
			if s.Service != "cart" || s.Kind != model.KindServer || !s.IsAnomalous() {
				return nil
			}
			return cartPath(s)
		}}}
	v, err := d.Diagnose(context.Background(), &Incident{ID: "x", Entry: "frontend GET /checkout", EntryService: "frontend", Start: t0.Add(60 * time.Second).UnixNano(), End: end})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// pprofBytes is p as a profile artifact holds it.
func pprofBytes(t *testing.T, p *profile.Profile) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
