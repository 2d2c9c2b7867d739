package store

import (
	"testing"
	"time"

	"github.com/rootline/rootline/internal/model"
)

func TestFlagClockSkew(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	at := func(tm time.Time) int64 { return tm.UnixNano() }
	for _, tc := range []struct {
		name      string
		start     int64
		attrs     []model.KeyValue
		wantSkew  bool   // flagged
		wantRet   int64  // RetentionTime
		wantAttrs int    // attributes after flagging
		note      string // why
	}{
		{name: "on time", start: now - int64(time.Second), wantRet: now - int64(time.Second) + int64(time.Millisecond), wantAttrs: 0},
		{name: "within skew", start: now - int64(50*time.Minute), wantRet: now - int64(50*time.Minute) + int64(time.Millisecond)},
		{name: "year 2250", start: at(time.Date(2250, 1, 1, 0, 0, 0, 0, time.UTC)), wantSkew: true, wantRet: now, wantAttrs: 1},
		{name: "year 1970", start: 0, wantSkew: true, wantRet: now, wantAttrs: 1},
		{name: "year 2023", start: at(time.Date(2023, 6, 1, 0, 0, 0, 0, time.UTC)), wantSkew: true, wantRet: now, wantAttrs: 1},
		{name: "forged flag on a timely span is removed", start: now - int64(time.Second),
			attrs:   []model.KeyValue{model.Int(AttrClockSkewMs, -1e12), model.String("k", "v")},
			wantRet: now - int64(time.Second) + int64(time.Millisecond), wantAttrs: 1},
		{name: "forged flag on a skewed span is replaced", start: 0,
			attrs:    []model.KeyValue{model.Int(AttrClockSkewMs, 5)},
			wantSkew: true, wantRet: now, wantAttrs: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := &model.Span{Name: "op", Start: tc.start, Duration: int64(time.Millisecond), Attributes: tc.attrs}
			origAttrs := append([]model.KeyValue(nil), tc.attrs...)
			in := []*model.Span{orig}
			out := FlagClockSkew(in, now, time.Hour)
			sp := out[0]
			_, flagged := sp.Attr(AttrClockSkewMs)
			if flagged != tc.wantSkew {
				t.Fatalf("flagged = %v, want %v (attrs %v)", flagged, tc.wantSkew, sp.Attributes)
			}
			if got := RetentionTime(sp); got != tc.wantRet {
				t.Errorf("RetentionTime = %d, want %d (off by %v)", got, tc.wantRet, time.Duration(got-tc.wantRet))
			}
			if len(sp.Attributes) != tc.wantAttrs {
				t.Errorf("attributes %v, want %d of them", sp.Attributes, tc.wantAttrs)
			}
			// The caller's span and slice are untouched.
			if in[0] != orig || len(orig.Attributes) != len(origAttrs) {
				t.Errorf("caller's span modified: %v", orig.Attributes)
			}
			for i := range origAttrs {
				if orig.Attributes[i] != origAttrs[i] {
					t.Errorf("caller's attribute %d modified", i)
				}
			}
			if !tc.wantSkew && tc.attrs == nil && &out[0] != &in[0] {
				t.Error("a batch with nothing to change was copied")
			}
		})
	}
}

func TestFlagClockSkewDisabled(t *testing.T) {
	sp := &model.Span{Start: 0, Duration: 1}
	if out := FlagClockSkew([]*model.Span{sp}, time.Now().UnixNano(), 0); out[0] != sp {
		t.Fatal("maxSkew 0 flagged a span")
	}
}

// BenchmarkFlagClockSkew is the cost the storage adds to every written batch:
// a batch of 1000 timely spans with 8 attributes each (nothing to copy).
func BenchmarkFlagClockSkew(b *testing.B) {
	now := time.Now().UnixNano()
	spans := make([]*model.Span, 1000)
	for i := range spans {
		sp := &model.Span{Start: now - int64(time.Second), Duration: int64(time.Millisecond)}
		for j := range 8 {
			sp.Attributes = append(sp.Attributes, model.Int("attribute.key."+string(rune('a'+j)), int64(j)))
		}
		spans[i] = sp
	}
	for b.Loop() {
		if out := FlagClockSkew(spans, now, time.Hour); &out[0] != &spans[0] {
			b.Fatal("copied")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
}
