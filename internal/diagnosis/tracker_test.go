package diagnosis

import (
	"context"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// roots returns n root spans of the entry point "frontend GET /checkout",
// the first anomalous ones flagged, ending at at.
func roots(first, n, anomalous int, at time.Time) []*model.Span {
	var out []*model.Span
	for i := range n {
		s := &model.Span{TraceID: tid(first + i), SpanID: sid(first+i, 0), Service: "frontend", Name: "GET /checkout", Kind: model.KindServer,
			Start: at.Add(-20 * time.Millisecond).UnixNano(), Duration: int64(20 * time.Millisecond)}
		if i < anomalous {
			s.Attributes = []model.KeyValue{model.Bool(model.AttrAnomaly, true), model.Float(model.AttrBaselineMs, 8)}
		}
		out = append(out, s)
	}
	// A child span is no entry point, anomalous or not.
	out = append(out, &model.Span{TraceID: tid(first), SpanID: sid(first, 1), ParentSpanID: sid(first, 0), Service: "cart", Name: "POST /cart",
		Attributes: []model.KeyValue{model.Bool(model.AttrAnomaly, true)}})
	return out
}

// TestTrackerRule: the open/close rule on a clock the test moves, one
// second at a time as Run's ticker would, with a real store.
func TestTrackerRule(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	cfg := DefaultConfig()
	tr, err := NewTracker(cfg, st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	tr.now = func() time.Time { return now }
	n := 0
	// second feeds one second of traffic: total root spans, anomalous of
	// them, then applies the rule and stores what changed.
	second := func(total, anomalous int) {
		tr.OnCommitted(roots(n, total, anomalous, now))
		n += total
		for _, inc := range tr.step(now) {
			tr.put(ctx, inc)
		}
		now = now.Add(time.Second)
	}
	list := func() []store.Incident {
		l, err := st.FindIncidents(ctx, store.IncidentQuery{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// 30 s of healthy traffic with the few anomalies any service has (2 %),
	// then 30 s of a slowdown that flags 10 % of requests: under MinShare,
	// too small to be an incident.
	for range 30 {
		second(50, 1)
	}
	for range 30 {
		second(50, 5)
	}
	if l := list(); len(l) != 0 {
		t.Fatalf("%d incidents opened by anomalies under the rule's share: %+v", len(l), l)
	}
	// A surge: 40 % of requests anomalous.
	onset := now
	for range 15 {
		second(50, 20)
	}
	l := list()
	if len(l) != 1 || l[0].End != 0 {
		t.Fatalf("after a surge: %+v, want one open incident", l)
	}
	inc, err := FromStored(l[0])
	if err != nil {
		t.Fatal(err)
	}
	if inc.Entry != "frontend GET /checkout" || inc.State != StateOpen || inc.BaselineMs != 8 {
		t.Errorf("incident %+v", inc)
	}
	if inc.Start < onset.Add(-10*time.Second).UnixNano() || inc.Start > onset.UnixNano() {
		t.Errorf("start %v, want within the window before the surge began at %v", time.Unix(0, inc.Start).UTC(), onset)
	}
	// Back to healthy: it closes once the share has stayed under
	// CloseShare for Quiet (the window must drain first).
	for range int((cfg.Window + cfg.Quiet) / time.Second) {
		second(50, 0)
	}
	l = list()
	if len(l) != 1 || l[0].End == 0 {
		t.Fatalf("after recovery: %+v, want the incident closed", l)
	}
	if inc, err = FromStored(l[0]); err != nil {
		t.Fatal(err)
	}
	if inc.State != StateClosed || inc.End < inc.Start {
		t.Errorf("closed incident %+v", inc)
	}
	// Its counts: the opening window's root spans and every one while open.
	if inc.Anomalous < 15*20 || inc.Anomalous > 15*20+5*10 || inc.Requests < 15*50 || inc.Anomalous > inc.Requests {
		t.Errorf("counts: %d anomalous of %d requests", inc.Anomalous, inc.Requests)
	}
	// A second surge opens a second incident.
	for range 5 {
		second(50, 40)
	}
	if l := list(); len(l) != 2 || l[0].End != 0 {
		t.Fatalf("after a second surge: %d incidents, newest %+v", len(l), l[0])
	}
}

// TestTrackerResume: an incident a previous server left open is taken back
// and closed by the rule.
func TestTrackerResume(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	inc := Incident{ID: "abc", Entry: "frontend GET /checkout", EntryService: "frontend", State: StateOpen, Start: t0.UnixNano()}
	if err := st.PutIncident(ctx, ToStored(inc)); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	tr, err := NewTracker(cfg, st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Minute)
	tr.now = func() time.Time { return now }
	tr.resume(ctx)
	for range int(cfg.Quiet/time.Second) + 2 {
		tr.OnCommitted(roots(0, 10, 0, now))
		for _, inc := range tr.step(now) {
			tr.put(ctx, inc)
		}
		now = now.Add(time.Second)
	}
	got, err := st.GetIncident(ctx, "abc")
	if err != nil || got.End == 0 {
		t.Fatalf("resumed incident %+v, %v: want closed", got, err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	c := DefaultConfig()
	c.CloseShare = c.MinShare
	if err := c.Validate(); err == nil {
		t.Error("close_share = min_share accepted")
	}
}

// TestTrackerRun: Run opens an incident from committed spans and stores its
// verdict, computed in the background, and stops with its context.
func TestTrackerRun(t *testing.T) {
	st := openStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := DefaultConfig()
	cfg.VerdictEvery = time.Second
	// The shop's traffic, normal then slow, stored as the pipeline would.
	var batch []*model.Span
	base := time.Now().Add(-2 * time.Minute)
	for i := range 60 {
		batch = append(batch, shopTrace(i, base.Add(time.Duration(i)*time.Second), 2, 6, 3, false)...)
	}
	var slow []*model.Span
	for i := range 30 {
		slow = append(slow, shopTrace(100+i, time.Now().Add(-3*time.Second+time.Duration(i)*50*time.Millisecond), 2, 60, 3, true)...)
	}
	if err := st.WriteSpans(ctx, append(batch, slow...)); err != nil {
		t.Fatal(err)
	}
	d := &Diagnoser{Source: &analysis.StoreSource{Spans: st, Artifacts: st}, Config: cfg}
	tr, err := NewTracker(cfg, st, d, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan int64, 10)
	tr.SetOnOpen(func(start int64) { opened <- start })
	if tr.Active() {
		t.Fatal("active before any incident")
	}
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	tr.OnCommitted(slow)
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := st.FindIncidents(ctx, store.IncidentQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 {
			inc, err := FromStored(list[0])
			if err != nil {
				t.Fatal(err)
			}
			if inc.Verdict != nil {
				if inc.Verdict.Service != "cart" || inc.Anomalous != 30 || inc.Requests != 30 {
					t.Fatalf("incident %+v, verdict %+v", inc, inc.Verdict)
				}
				if len(opened) != 1 || !tr.Active() {
					t.Fatalf("on open called %d times, active %v; want once, and active", len(opened), tr.Active())
				}
				if start := <-opened; start != inc.Start {
					t.Fatalf("on open called with start %d, want the incident's %d", start, inc.Start)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no incident with a verdict after 30 s: %+v", list)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestTrackerImpact: requests whose root span the detector did not flag
// count as anomalous when a flagged span of theirs added at least
// MinImpact of their latency, whichever of root and span comes first; a
// flagged span that added little opens nothing.
func TestTrackerImpact(t *testing.T) {
	// request is one trace: a 100 ms root (not flagged) and an inner span
	// of the given duration, flagged over a 10 ms baseline.
	request := func(n int, at time.Time, innerMs float64) (root, inner *model.Span) {
		root = &model.Span{TraceID: tid(n), SpanID: sid(n, 0), Service: "frontend", Name: "GET /checkout", Kind: model.KindServer,
			Start: at.Add(-100 * time.Millisecond).UnixNano(), Duration: int64(100 * time.Millisecond)}
		inner = &model.Span{TraceID: tid(n), SpanID: sid(n, 1), ParentSpanID: sid(n, 0), Service: "inventory", Name: "GET /stock", Kind: model.KindServer,
			Start: root.Start + int64(time.Millisecond), Duration: int64(innerMs * 1e6),
			Attributes: []model.KeyValue{model.Bool(model.AttrAnomaly, true), model.Float(model.AttrBaselineMs, 10)}}
		return root, inner
	}
	for _, tc := range []struct {
		name      string
		innerMs   float64 // 10 ms over 100 ms: impact = (innerMs-10)/100
		rootFirst bool
		minImpact float64
		want      int // incidents
	}{
		{"inner first, 40% impact", 50, false, 0.2, 1},
		{"root first, 40% impact", 50, true, 0.2, 1},
		{"inner first, 5% impact", 15, false, 0.2, 0},
		{"root first, 5% impact", 15, true, 0.2, 0},
		{"impact rule off", 50, true, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := openStore(t)
			cfg := DefaultConfig()
			cfg.MinImpact = tc.minImpact
			tr, err := NewTracker(cfg, st, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			now := t0
			tr.now = func() time.Time { return now }
			n := 0
			for range 20 {
				// Ten requests a second, half of them slowed in the inner
				// service; roots and inner spans in separate batches.
				var roots, inners []*model.Span
				for i := range 10 {
					r, in := request(n, now, 10)
					if i%2 == 0 {
						r, in = request(n, now, tc.innerMs)
					}
					n++
					roots = append(roots, r)
					if in.Duration > int64(10*time.Millisecond) {
						inners = append(inners, in)
					}
				}
				if tc.rootFirst {
					tr.OnCommitted(roots)
					tr.OnCommitted(inners)
				} else {
					tr.OnCommitted(inners)
					tr.OnCommitted(roots)
				}
				for _, inc := range tr.step(now) {
					tr.put(ctx, inc)
				}
				now = now.Add(time.Second)
			}
			l, err := st.FindIncidents(ctx, store.IncidentQuery{})
			if err != nil {
				t.Fatal(err)
			}
			if len(l) != tc.want {
				t.Fatalf("%d incidents, want %d: %+v", len(l), tc.want, l)
			}
			if tc.want == 1 {
				inc, err := FromStored(l[0])
				if err != nil {
					t.Fatal(err)
				}
				if inc.Anomalous*2 > inc.Requests+2 || inc.Anomalous*2 < inc.Requests-10 {
					t.Errorf("%d anomalous of %d requests, want about half", inc.Anomalous, inc.Requests)
				}
			}
		})
	}
}

// TestPathsStoredDue: stored critical paths make an incident's verdict due
// at the next tick, where other evidence waits VerdictEvery after the last.
func TestPathsStoredDue(t *testing.T) {
	cfg := DefaultConfig()
	tr, err := NewTracker(cfg, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	inc := &tracked{inc: Incident{ID: "x", Entry: "a op"}}
	tr.open["a op"] = inc
	tr.verdict(context.Background(), inc, now)
	next := now.Add(time.Second) // within VerdictEvery (2 s)
	tr.Evidence()
	if tr.isDue(inc, next) {
		t.Fatal("due a second after the last verdict on evidence other than paths")
	}
	tr.PathsStored()
	if !tr.isDue(inc, next) {
		t.Fatal("not due at the next tick after critical paths were stored")
	}
	// … and the verdict loop's turn starts at once, not at its next tick.
	select {
	case <-tr.wake:
	default:
		t.Fatal("storing critical paths did not wake the verdict loop")
	}
	tr.verdict(context.Background(), inc, next)
	if tr.isDue(inc, next.Add(time.Second)) {
		t.Fatal("still urgent after the verdict was computed")
	}
}

// TestVerdictAging: a young incident's verdict is due VerdictEvery after
// the last, an old one's after a tenth of its age (up to maxVerdictAge);
// stored critical paths make it due at once only while it is young or its
// verdict has none.
func TestVerdictAging(t *testing.T) {
	cfg := DefaultConfig()
	tr, err := NewTracker(cfg, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	opened := t0
	for _, tc := range []struct {
		name      string
		age, last time.Duration // since the incident opened; since its last verdict
		paths     int           // its verdict's critical paths
		fresh     bool
		urgent    bool
		want      bool
	}{
		{name: "young, fresh, VerdictEvery since", age: 10 * time.Second, last: cfg.VerdictEvery, fresh: true, want: true},
		{name: "young, fresh, a second since", age: 10 * time.Second, last: time.Second, fresh: true, want: false},
		{name: "a minute old, fresh, 3 s since", age: time.Minute, last: 3 * time.Second, fresh: true, want: false},
		{name: "a minute old, fresh, 6 s since", age: time.Minute, last: 6 * time.Second, fresh: true, want: true},
		{name: "ten minutes old, fresh, 20 s since", age: 10 * time.Minute, last: 20 * time.Second, fresh: true, want: false},
		{name: "ten minutes old, fresh, 30 s since", age: 10 * time.Minute, last: maxVerdictAge, fresh: true, want: true},
		{name: "ten minutes old, nothing new, 30 s since", age: 10 * time.Minute, last: maxVerdictAge, want: true},
		{name: "young, paths stored", age: 10 * time.Second, last: time.Second, paths: 5, urgent: true, want: true},
		{name: "old, paths stored, verdict has paths", age: 5 * time.Minute, last: 5 * time.Second, paths: 5, urgent: true, want: false},
		{name: "old, paths stored, verdict has paths, 30 s since", age: 5 * time.Minute, last: maxVerdictAge, paths: 5, urgent: true, want: true},
		{name: "old, paths stored, verdict has none", age: 5 * time.Minute, last: time.Second, urgent: true, want: true},
	} {
		now := opened.Add(tc.age)
		inc := &tracked{inc: Incident{ID: "x", Entry: "a op", Opened: opened.UnixNano(), Verdict: &Verdict{PathSpans: tc.paths}},
			lastVerdict: now.Add(-tc.last), fresh: tc.fresh, urgent: tc.urgent}
		if got := tr.isDue(inc, now); got != tc.want {
			t.Errorf("%s: due %v, want %v (every %v)", tc.name, got, tc.want, tr.verdictEvery(inc, now))
		}
	}
}

// TestTrackerInFlight: provisional copies of roots still in flight
// (model.AttrInFlight) count once, and only when slow; a later report and
// the final copy are not counted again; a root never counted in flight
// counts when it ends. Slow requests still open make an incident open.
func TestTrackerInFlight(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	tr, err := NewTracker(DefaultConfig(), st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	tr.now = func() time.Time { return now }
	totals := func() (total, anom int) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, e := range tr.entries {
			for _, b := range e.buckets {
				total += b.total
				anom += b.anom
			}
		}
		return total, anom
	}
	// provisional returns the roots of traces first…first+k-1 still in
	// flight for age, flagged by the detector or not.
	provisional := func(first, k int, age time.Duration, flagged bool) []*model.Span {
		out := roots(first, k, 0, now)[:k]
		for _, s := range out {
			s.Start, s.Duration = now.Add(-age).UnixNano(), int64(age)
			s.SetAttr(model.Bool(model.AttrInFlight, true))
			if flagged {
				s.SetAttr(model.Bool(model.AttrAnomaly, true))
				s.SetAttr(model.Float(model.AttrBaselineMs, 8))
			}
		}
		return out
	}
	n := 0
	second := func(spans ...[]*model.Span) {
		var all []*model.Span
		for _, s := range spans {
			all = append(all, s...)
		}
		all = append(all, roots(n, 25, 0, now)[:25]...) // healthy traffic beside them
		n += 25
		tr.OnCommitted(all)
		for _, inc := range tr.step(now) {
			tr.put(ctx, inc)
		}
		now = now.Add(time.Second)
	}
	for range 2 { // the sums below read every bucket: stay within the window's 10
		second()
	}
	const slow = 1_000_000 // traces of the slow requests
	total0, anom0 := totals()
	// Three seconds of 20 requests a second that stay open: each second's
	// are reported flagged, and the earlier ones again; 5 others are
	// reported while not yet slow.
	for i := range 3 {
		var spans [][]*model.Span
		for j := 0; j <= i; j++ {
			spans = append(spans, provisional(slow+20*j, 20, time.Duration(i-j+1)*time.Second, true))
		}
		spans = append(spans, provisional(slow+100+5*i, 5, 10*time.Millisecond, false))
		second(spans...)
	}
	total1, anom1 := totals()
	if got, want := total1-total0, 3*25+60; got != want {
		t.Errorf("requests counted while the slow ones were open: %d, want %d (25 healthy a second and each slow one once)", got, want)
	}
	if got := anom1 - anom0; got != 60 {
		t.Errorf("anomalous requests counted: %d, want 60", got)
	}
	l, err := st.FindIncidents(ctx, store.IncidentQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 1 || l[0].End != 0 {
		t.Fatalf("incidents: %+v, want one open, opened by requests still in flight", l)
	}
	// The requests end: their final copies count only where no copy was
	// counted in flight (the 15 reported while not slow yet).
	var finals []*model.Span
	for j := range 3 {
		finals = append(finals, roots(slow+20*j, 20, 20, now)[:20]...)
		finals = append(finals, roots(slow+100+5*j, 5, 0, now)[:5]...)
	}
	second(finals)
	total2, anom2 := totals()
	if got, want := total2-total1, 25+15; got != want {
		t.Errorf("requests counted when they ended: %d, want %d", got, want)
	}
	if got := anom2 - anom1; got != 0 {
		t.Errorf("anomalous requests counted again when they ended: %d", got)
	}
	tr.mu.Lock()
	left := len(tr.inflight)
	tr.mu.Unlock()
	if left != 0 {
		t.Errorf("%d roots still remembered as in flight after their final copies", left)
	}
}
