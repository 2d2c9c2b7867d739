package diagnosis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/sqlite"
)

// linkTrace is shopTrace with gapMs more between the frontend's call to cart
// and cart's SERVER span (half before it, half after): time outside cart,
// on the link or in whatever carries the call.
func linkTrace(n int, at time.Time, gapMs float64, anomalous bool) []*model.Span {
	tr := shopTrace(n, at, 2, 6, 3, anomalous)
	gap := int64(gapMs * 1e6)
	tr[0].Duration += gap
	tr[1].Duration += gap
	tr[2].Start += gap / 2
	tr[3].Start += gap / 2
	return tr
}

// counter is a cumulative kernel counter of one container, one point a
// second over [from, to): rate before the onset, rateAfter from it on. A
// named container (ctr) is one of svc's pod, labelled as the agent labels
// the demo mesh's: the cgroup and container.name.
func counter(name, svc, ctr, reason string, from, onset, to time.Time, rate, rateAfter float64) []store.MetricPoint {
	var out []store.MetricPoint
	var v float64
	labels := map[string]string{"container": "/rootline-demo/" + svc}
	if ctr != "" {
		labels = map[string]string{"container": "/rootline-demo/" + svc + "/" + ctr, "container.name": ctr}
	}
	if reason != "" {
		labels["reason"] = reason
	}
	for at := from; at.Before(to); at = at.Add(time.Second) {
		if at.Before(onset) {
			v += rate
		} else {
			v += rateAfter
		}
		out = append(out, store.MetricPoint{Name: name, Service: svc, Kind: store.MetricSum, Unit: "1", Labels: labels,
			StartTime: from.UnixNano(), Time: at.UnixNano(), Value: v})
	}
	return out
}

// runqHist is a container's cumulative run-queue latency histogram, one
// point a second over [from, to): 100 waits a second of meanMs on average
// before the onset, of meanAfter from it on.
func runqHist(svc string, from, onset, to time.Time, meanMs, meanAfter float64) []store.MetricPoint {
	var out []store.MetricPoint
	var count uint64
	var sum float64
	for at := from; at.Before(to); at = at.Add(time.Second) {
		m := meanMs
		if !at.Before(onset) {
			m = meanAfter
		}
		count += 100
		sum += 100 * m / 1e3
		out = append(out, store.MetricPoint{Name: metricRunq, Service: svc, Kind: store.MetricHistogram, Unit: "s",
			Labels: map[string]string{"container": "/rootline-demo/" + svc}, StartTime: from.UnixNano(), Time: at.UnixNano(),
			Count: count, Sum: sum, Bounds: []float64{0.001}, Buckets: []uint64{count, 0}})
	}
	return out
}

// writeIncident stores 60 traces a second apart, then from the onset 30
// slow ones 200 ms apart, made by trace; now is a second after the last.
func writeIncident(t *testing.T, st store.SpanWriter, trace func(n int, at time.Time, slow bool) []*model.Span) (onset, now time.Time) {
	t.Helper()
	var batch []*model.Span
	onset = t0.Add(60 * time.Second)
	for i := range 60 {
		batch = append(batch, trace(i, t0.Add(time.Duration(i)*time.Second), false)...)
	}
	var end int64
	for i := range 30 {
		tr := trace(100+i, onset.Add(time.Duration(i)*200*time.Millisecond), true)
		batch = append(batch, tr...)
		end = tr[0].End()
	}
	if err := st.WriteSpans(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	return onset, time.Unix(0, end).Add(time.Second)
}

// TestDiagnoseLink: calls into cart grow by 40 ms outside it while its own
// time stays. The verdict names the network only when the kernel counted
// retransmissions on cart's sockets growing with the slowdown; from span
// timing alone (a CPU-starved node gives the same timing) the cause is
// unknown, with the network as runner-up and what is missing said.
func TestDiagnoseLink(t *testing.T) {
	type series struct {
		name, svc, reason string
		rate, rateAfter   float64
	}
	// podSeries is a series of a named container of svc's pod.
	type podSeries struct {
		series
		container string
	}
	for _, tc := range []struct {
		name      string
		noMetrics bool // the Diagnoser reads no kernel metrics
		series    []series
		pod       []podSeries
		// runq: run-queue latency of each service's container, mean ms
		// per wait before and from the onset.
		runq map[string][2]float64
		// throttled: ms a second each service's CPU quota held its
		// containers before and from the onset (cpu.stat).
		throttled   map[string][2]float64
		wantCause   string
		wantRunner  string
		wantText    string // in the evidence or what is missing
		wantMissing bool
	}{
		{name: "timing only, no metrics read", noMetrics: true, wantCause: CauseUnknown, wantRunner: CauseNetwork,
			wantText: "kernel metrics (TCP retransmissions, drops) are not read here", wantMissing: true},
		{name: "timing only, no series of cart", series: []series{{metricRetransmits, "payment", "", 0, 2}},
			wantCause: CauseUnknown, wantRunner: CauseNetwork, wantText: "no kernel metrics of its containers", wantMissing: true},
		{name: "timing only, counters flat", series: []series{{metricRetransmits, "cart", "", 0, 0}, {metricDrops, "cart", "no_socket", 0.5, 0.5}},
			wantCause: CauseUnknown, wantRunner: CauseNetwork, wantText: "no sign of a lossy link"},
		{name: "unrelated drops grew", series: []series{{metricRetransmits, "cart", "", 0, 0}, {metricDrops, "cart", "no_socket", 0, 5}},
			wantCause: CauseUnknown, wantRunner: CauseNetwork, wantText: "0 TCP retransmissions"},
		{name: "retransmissions as before", series: []series{{metricRetransmits, "cart", "", 1, 1}},
			wantCause: CauseUnknown, wantRunner: CauseNetwork, wantText: "no sign of a lossy link"},
		{name: "retransmissions grew", series: []series{{metricRetransmits, "cart", "", 0.05, 2}, {metricDrops, "cart", "tc_egress", 0, 1}},
			wantCause: CauseNetwork, wantText: "packets dropped by a queue or tc program"},
		{name: "retransmissions grew in a shared container", series: []series{{metricRetransmits, "cart,frontend", "", 0, 1}},
			wantCause: CauseNetwork, wantText: "TCP retransmissions"},
		// In a mesh the traffic between pods is on the sidecars' sockets:
		// the retransmissions of cart's pod are its sidecar's, and count.
		{name: "retransmissions grew on the sidecar", pod: []podSeries{
			{series{metricRetransmits, "cart", "", 0, 0}, "app"},
			{series{metricRetransmits, "cart", "", 0.05, 2}, "envoy"}},
			wantCause: CauseNetwork, wantText: "by container: envoy 12"},
		{name: "retransmissions grew on the app and the sidecar", pod: []podSeries{
			{series{metricRetransmits, "cart", "", 0, 0.5}, "app"},
			{series{metricRetransmits, "cart", "", 0, 1}, "envoy"}},
			wantCause: CauseNetwork, wantText: "9 TCP retransmissions in 6s (0 in the 2m0s before) on the sockets of cart's containers; retransmissions in the incident by container: envoy 6, app 3"},
		// A sidecar of another service (a caller's) does not count for cart.
		{name: "retransmissions grew on another pod's sidecar", pod: []podSeries{
			{series{metricRetransmits, "cart", "", 0, 0}, "envoy"},
			{series{metricRetransmits, "frontend", "", 0, 2}, "envoy"}},
			wantCause: CauseUnknown, wantRunner: CauseNetwork, wantText: "0 TCP retransmissions"},
		// No loss, and no wait for a CPU that could make 40 ms: a delay
		// on the path (10 × 0.3 ms < 10 ms).
		{name: "delay: no loss, no CPU wait", series: []series{{metricRetransmits, "cart", "", 0, 0}},
			runq:      map[string][2]float64{"cart": {0.1, 0.2}, "frontend": {0.1, 0.3}},
			wantCause: CauseNetwork, wantText: "no wait for a CPU either"},
		// The pod's threads waited 2 ms per wakeup: the CPU may be it.
		{name: "no loss, a starved pod", series: []series{{metricRetransmits, "cart", "", 0, 0}},
			runq:      map[string][2]float64{"cart": {0.1, 2}, "frontend": {0.1, 0.1}},
			wantCause: CauseUnknown, wantRunner: CauseNetwork, wantText: "no sign of a lossy link"},
		// The same starved pod, and its CPU quota held it off the CPUs:
		// the quota delayed the calls' ends in it (its threads and its
		// sidecar reading and answering them).
		{name: "no loss, a throttled pod", series: []series{{metricRetransmits, "cart", "", 0, 0}},
			runq: map[string][2]float64{"cart": {0.1, 2}, "frontend": {0.1, 0.1}}, throttled: map[string][2]float64{"cart": {0, 300}},
			wantCause: CauseCPUThrottle, wantText: "the quota delayed the calls"},
		// Throttled a little, as before: the quota is not what changed.
		{name: "no loss, a starved pod throttled as before", series: []series{{metricRetransmits, "cart", "", 0, 0}},
			runq: map[string][2]float64{"cart": {0.1, 2}, "frontend": {0.1, 0.1}}, throttled: map[string][2]float64{"cart": {40, 45}},
			wantCause: CauseUnknown, wantRunner: CauseNetwork, wantText: "not the quota"},
		// No wait for a CPU: the link, whatever the quota did.
		{name: "delay, a pod throttled too", series: []series{{metricRetransmits, "cart", "", 0, 0}},
			runq: map[string][2]float64{"cart": {0.1, 0.2}, "frontend": {0.1, 0.3}}, throttled: map[string][2]float64{"cart": {0, 300}},
			wantCause: CauseNetwork, wantText: "no wait for a CPU either"},
		// The pod's own waits are short but the node is starved (the
		// caller's sidecar on the link may be what waits).
		{name: "no loss, a starved node", series: []series{{metricRetransmits, "cart", "", 0, 0}},
			runq:      map[string][2]float64{"cart": {0.1, 0.1}, "frontend": {0.1, 20}},
			wantCause: CauseUnknown, wantRunner: CauseNetwork, wantText: "no sign of a lossy link"},
		// The caller's pod is starved (its CPU quota spent: the link
		// starts at its threads and egress proxy), the node at large is
		// not (ten idle bystanders): the CPU may be it.
		{name: "no loss, a starved caller", series: []series{{metricRetransmits, "cart", "", 0, 0}},
			runq: map[string][2]float64{"cart": {0.1, 0.1}, "frontend": {0.1, 5}, "x0": {0.05, 0.05}, "x1": {0.05, 0.05},
				"x2": {0.05, 0.05}, "x3": {0.05, 0.05}, "x4": {0.05, 0.05}, "x5": {0.05, 0.05}, "x6": {0.05, 0.05},
				"x7": {0.05, 0.05}, "x8": {0.05, 0.05}, "x9": {0.05, 0.05}},
			wantCause: CauseUnknown, wantRunner: CauseNetwork, wantText: "no sign of a lossy link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := openStore(t)
			onset, now := writeIncident(t, st, func(i int, at time.Time, slow bool) []*model.Span {
				if slow {
					return linkTrace(i, at, 40, true)
				}
				return linkTrace(i, at, 0, false)
			})
			var pts []store.MetricPoint
			from := onset.Add(-DefaultConfig().Lookback)
			for _, s := range tc.series {
				pts = append(pts, counter(s.name, s.svc, "", s.reason, from, onset, now, s.rate, s.rateAfter)...)
			}
			for _, s := range tc.pod {
				pts = append(pts, counter(s.name, s.svc, s.container, s.reason, from, onset, now, s.rate, s.rateAfter)...)
			}
			for svc, m := range tc.runq {
				pts = append(pts, runqHist(svc, from, onset, now, m[0], m[1])...)
			}
			for svc, m := range tc.throttled {
				pts = append(pts, counter(metricThrottled, svc, "app", "", from, onset, now, m[0]/1e3, m[1]/1e3)...)
			}
			if len(pts) > 0 {
				if err := st.WriteMetrics(ctx, pts); err != nil {
					t.Fatal(err)
				}
			}
			v := diagnoseWritten(t, st, onset, now, !tc.noMetrics)
			if v.Service != "cart" || v.Cause != tc.wantCause {
				t.Fatalf("verdict %s/%s, want cart/%s", v.Service, v.Cause, tc.wantCause)
			}
			if (v.Confidence > 0) != (tc.wantCause != CauseUnknown) {
				t.Errorf("confidence %v for cause %s", v.Confidence, v.Cause)
			}
			if tc.wantRunner != "" && (v.RunnerUp == nil || v.RunnerUp.Cause != tc.wantRunner || v.RunnerUp.Service != "cart") {
				t.Errorf("runner-up %+v, want cart/%s", v.RunnerUp, tc.wantRunner)
			}
			checkSays(t, v, tc.wantMissing, tc.wantText)
		})
	}
}

// diagnoseWritten diagnoses the incident writeIncident stored (its onset,
// now a second after its last trace), reading the store's kernel metrics
// when metrics is set, and logs the verdict.
func diagnoseWritten(t *testing.T, st *sqlite.Store, onset, now time.Time, metrics bool) *Verdict {
	t.Helper()
	d := &Diagnoser{Source: &analysis.StoreSource{Spans: st, Artifacts: st}, Config: DefaultConfig(), Now: func() time.Time { return now }}
	if metrics {
		d.Metrics = st
	}
	v, err := d.Diagnose(context.Background(), &Incident{ID: "x", Entry: "frontend GET /checkout", EntryService: "frontend", Start: onset.UnixNano(), End: now.Add(-time.Second).UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("verdict: %s %s %.2f runner-up %+v\nevidence: %s\nmissing: %s", v.Service, v.Cause, v.Confidence, v.RunnerUp,
		strings.Join(v.Evidence, "\n  "), strings.Join(v.Missing, "\n  "))
	return v
}

// checkSays checks that the verdict's evidence (its missing lines when
// missing) says want.
func checkSays(t *testing.T, v *Verdict, missing bool, want string) {
	t.Helper()
	text := strings.Join(v.Evidence, "\n")
	if missing {
		text = strings.Join(v.Missing, "\n")
	}
	if !strings.Contains(text, want) {
		t.Errorf("%q does not say %q", text, want)
	}
}

// TestIncrease: a cumulative counter's growth on each side of a time, across
// a restart of its source.
func TestIncrease(t *testing.T) {
	pts := func(vs ...float64) []store.MetricPoint {
		var out []store.MetricPoint
		for i, v := range vs {
			out = append(out, store.MetricPoint{Time: int64(i), Value: v})
		}
		return out
	}
	for _, tc := range []struct {
		name                string
		points              []store.MetricPoint
		at                  int64
		wantBefore, wantNow float64
	}{
		{"empty", nil, 0, 0, 0},
		{"one point", pts(5), 0, 0, 0},
		{"steady", pts(1, 2, 3, 4, 5), 3, 2, 2},
		{"restart", pts(10, 12, 1, 4), 2, 2, 4},
		{"all after", pts(0, 0, 7), 0, 0, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, n := increase(tc.points, tc.at)
			if b != tc.wantBefore || n != tc.wantNow {
				t.Errorf("increase = %v, %v; want %v, %v", b, n, tc.wantBefore, tc.wantNow)
			}
		})
	}
}

// chainTrace is frontend → cart → payment, every hop traced, with gapCart
// ms more between frontend's call and cart's SERVER span and gapPay ms more
// between cart's call and payment's (half before, half after each).
func chainTrace(n int, at time.Time, gapCart, gapPay float64, anomalous bool) []*model.Span {
	ms := func(f float64) int64 { return int64(f * 1e6) }
	flag := func(s *model.Span) *model.Span {
		s.Resource = []model.KeyValue{model.Int(model.AttrProcessPID, 4000), model.String(model.AttrServiceName, s.Service)}
		if anomalous && s.Kind == model.KindServer {
			s.Attributes = append(s.Attributes, model.Bool(model.AttrAnomaly, true), model.Float(model.AttrBaselineMs, 12))
		}
		return s
	}
	const front, cart, pay = 1.0, 2.0, 3.0
	start := at.UnixNano()
	payCall := pay + gapPay
	cartSrv := cart + payCall
	frontCall := cartSrv + gapCart
	cartAt := start + ms(front/2) + ms(gapCart/2)
	payCallAt := cartAt + ms(cart)
	return []*model.Span{
		flag(&model.Span{TraceID: tid(n), SpanID: sid(n, 0), Service: "frontend", Name: "GET /checkout", Kind: model.KindServer, Start: start, Duration: ms(front + frontCall)}),
		flag(&model.Span{TraceID: tid(n), SpanID: sid(n, 1), ParentSpanID: sid(n, 0), Service: "frontend", Name: "POST cart", Kind: model.KindClient, Start: start + ms(front/2), Duration: ms(frontCall)}),
		flag(&model.Span{TraceID: tid(n), SpanID: sid(n, 2), ParentSpanID: sid(n, 1), Service: "cart", Name: "POST /cart", Kind: model.KindServer, Start: cartAt, Duration: ms(cartSrv)}),
		flag(&model.Span{TraceID: tid(n), SpanID: sid(n, 3), ParentSpanID: sid(n, 2), Service: "cart", Name: "POST payment", Kind: model.KindClient, Start: payCallAt, Duration: ms(payCall)}),
		flag(&model.Span{TraceID: tid(n), SpanID: sid(n, 4), ParentSpanID: sid(n, 3), Service: "payment", Name: "POST /pay", Kind: model.KindServer, Start: payCallAt + ms(gapPay/2), Duration: ms(pay)}),
	}
}

// TestDiagnoseLinkEndOnlyThroughTop: calls into cart grew more than cart's
// calls into payment, so span timing ranks cart first; payment's pod
// retransmitted more than cart's. Every connection of payment is one to
// cart: its retransmissions cannot place the loss at its end, and the
// verdict stays cart's (a bandwidth limit on cart's link, seen in the demo
// as net-bandwidth@g named its only callee h).
func TestDiagnoseLinkEndOnlyThroughTop(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	onset, now := writeIncident(t, st, func(i int, at time.Time, slow bool) []*model.Span {
		if slow {
			return chainTrace(i, at, 40, 30, true)
		}
		return chainTrace(i, at, 0, 0, false)
	})
	from := onset.Add(-DefaultConfig().Lookback)
	var pts []store.MetricPoint
	pts = append(pts, counter(metricRetransmits, "cart", "envoy", "", from, onset, now, 0.05, 1)...)
	pts = append(pts, counter(metricRetransmits, "payment", "envoy", "", from, onset, now, 0.05, 3)...)
	pts = append(pts, counter(metricRetransmits, "frontend", "envoy", "", from, onset, now, 0.05, 1)...)
	if err := st.WriteMetrics(ctx, pts); err != nil {
		t.Fatal(err)
	}
	v := diagnoseWritten(t, st, onset, now, true)
	if len(v.Ranking) < 2 || v.Ranking[0].Service != "cart" || v.Ranking[1].Service != "payment" {
		t.Fatalf("ranking %+v: want cart then payment by span timing", v.Ranking)
	}
	if v.Service != "cart" || v.Cause != CauseNetwork {
		t.Fatalf("verdict %s/%s, want cart/network", v.Service, v.Cause)
	}
	if text := strings.Join(v.Evidence, "\n"); strings.Contains(text, "so the loss is at") {
		t.Errorf("the verdict moved by the retransmissions of a pod whose only peer is the top: %q", text)
	}
}

// TestDiagnoseLinkEnd: packets lost on cart's link slow the calls into cart
// and cart's calls into payment, the latter more, so span timing ranks
// payment first. The kernel tells the ends apart: cart's pod retransmits on
// both of its connections, payment's only on its connection to cart. The
// verdict names the pod that retransmitted most above its rate before.
func TestDiagnoseLinkEnd(t *testing.T) {
	for _, tc := range []struct {
		name              string
		cartRate, payRate float64 // retransmissions per second in the incident, on each sidecar
		want, wantRunner  string
		wantText          string
	}{
		{name: "cart's pod retransmits most", cartRate: 3, payRate: 1, want: "cart", wantRunner: "payment", wantText: "so the loss is at cart's end"},
		{name: "payment's pod retransmits most", cartRate: 1, payRate: 3, want: "payment", wantRunner: "cart", wantText: "on the sockets of payment's containers"},
		{name: "only payment's pod retransmits", cartRate: 0, payRate: 2, want: "payment", wantRunner: "cart", wantText: "on the sockets of payment's containers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := openStore(t)
			onset, now := writeIncident(t, st, func(i int, at time.Time, slow bool) []*model.Span {
				if slow {
					return chainTrace(i, at, 30, 40, true)
				}
				return chainTrace(i, at, 0, 0, false)
			})
			from := onset.Add(-DefaultConfig().Lookback)
			var pts []store.MetricPoint
			pts = append(pts, counter(metricRetransmits, "cart", "envoy", "", from, onset, now, 0.05, tc.cartRate)...)
			pts = append(pts, counter(metricRetransmits, "payment", "envoy", "", from, onset, now, 0.05, tc.payRate)...)
			pts = append(pts, counter(metricRetransmits, "frontend", "envoy", "", from, onset, now, 0.05, 1)...)
			if err := st.WriteMetrics(ctx, pts); err != nil {
				t.Fatal(err)
			}
			v := diagnoseWritten(t, st, onset, now, true)
			if len(v.Ranking) < 2 || v.Ranking[0].Service != "payment" || v.Ranking[1].Service != "cart" {
				t.Fatalf("ranking %+v: want payment then cart by span timing", v.Ranking)
			}
			if v.Service != tc.want || v.Cause != CauseNetwork {
				t.Fatalf("verdict %s/%s, want %s/network", v.Service, v.Cause, tc.want)
			}
			if v.RunnerUp == nil || v.RunnerUp.Service != tc.wantRunner {
				t.Errorf("runner-up %+v, want %s", v.RunnerUp, tc.wantRunner)
			}
			if text := strings.Join(v.Evidence, "\n"); !strings.Contains(text, tc.wantText) {
				t.Errorf("%q does not say %q", text, tc.wantText)
			}
		})
	}
}
