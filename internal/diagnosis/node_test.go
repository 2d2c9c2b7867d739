package diagnosis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// chain4Trace is a request through services a → b → c → d, each spending
// self[k] ms of its own time (half before its call, half after).
func chain4Trace(n int, at time.Time, self [4]float64, anomalous bool) []*model.Span {
	ms := func(f float64) int64 { return int64(f * 1e6) }
	names := [4]string{"a", "b", "c", "d"}
	var total float64
	for _, s := range self {
		total += s
	}
	var out []*model.Span
	start, parent := at.UnixNano(), model.SpanID{}
	left := total
	for k, svc := range names {
		srv := &model.Span{TraceID: tid(n), SpanID: sid(n, 2*k), ParentSpanID: parent, Service: svc, Name: "GET /" + svc, Kind: model.KindServer,
			Start: start, Duration: ms(left),
			Resource: []model.KeyValue{model.Int(model.AttrProcessPID, int64(4000+k)), model.String(model.AttrServiceName, svc)}}
		if anomalous {
			srv.Attributes = append(srv.Attributes, model.Bool(model.AttrAnomaly, true), model.Float(model.AttrBaselineMs, 12))
		}
		out = append(out, srv)
		left -= self[k]
		if k == len(names)-1 {
			break
		}
		start += ms(self[k] / 2)
		cli := &model.Span{TraceID: tid(n), SpanID: sid(n, 2*k+1), ParentSpanID: srv.SpanID, Service: svc, Name: "GET " + names[k+1], Kind: model.KindClient,
			Start: start, Duration: ms(left), Resource: srv.Resource}
		out = append(out, cli)
		parent = cli.SpanID
	}
	return out
}

// nodePoints is a node's cumulative counter name, one point per second
// from from to to: rate seconds per second before onset, rateAfter since.
func nodePoints(name, host string, from, onset, to time.Time, rate, rateAfter float64) []store.MetricPoint {
	var out []store.MetricPoint
	var v float64
	for at := from; at.Before(to); at = at.Add(time.Second) {
		if at.Before(onset) {
			v += rate
		} else {
			v += rateAfter
		}
		out = append(out, store.MetricPoint{Name: name, Kind: store.MetricSum, Unit: "s",
			Labels: map[string]string{"host.name": host, "container": "node"}, StartTime: from.UnixNano(), Time: at.UnixNano(), Value: v})
	}
	return out
}

// TestDiagnoseNode: the node's CPUs stolen by the hypervisor make every
// service slower, each by its own time; the verdict is the node's, cause
// cpu-contention, with no culprit service. The same steal while one
// service's own fault grows its time leaves the verdict to that service,
// and says the steal. Without steal, or with steal that grew only with
// what the node asked of its CPUs (a hog inside it), a uniform slowdown is
// not the node's.
func TestDiagnoseNode(t *testing.T) {
	base := [4]float64{4, 6, 5, 8}
	for _, tc := range []struct {
		name       string
		slow       [4]float64
		steal      *[2]float64 // ms per second before and since the onset; nil: no series
		busy       [2]float64  // the same of busy time; zero: 800 ms per second throughout
		burst      []float64   // seconds from the onset of bursts of 300 ms stolen in one second (on top of steal)
		wantNode   bool
		wantSvc    string
		wantText   string
		wantAbsent string
	}{
		{name: "stolen, every service slower", slow: [4]float64{8, 12, 10, 16}, steal: &[2]float64{10, 300}, wantNode: true,
			wantText: "no service stands out"},
		{name: "stolen, one service's fault", slow: [4]float64{4.2, 6.2, 30, 8.2}, steal: &[2]float64{10, 300}, wantSvc: "c",
			wantText: "but c stands out"},
		{name: "every service slower, steal as before", slow: [4]float64{8, 12, 10, 16}, steal: &[2]float64{100, 120},
			wantAbsent: "hypervisor"},
		{name: "every service slower, steal grew with the node's load", slow: [4]float64{8, 12, 10, 16}, steal: &[2]float64{20, 60}, busy: [2]float64{800, 1900},
			wantAbsent: "hypervisor"},
		{name: "every service slower, no steal series", slow: [4]float64{8, 12, 10, 16},
			wantAbsent: "hypervisor"},
		{name: "a burst of steal at the onset, every service slower", slow: [4]float64{8, 12, 10, 16}, steal: &[2]float64{10, 10}, burst: []float64{2},
			wantNode: true, wantText: "more than in any second of the lookback"},
		{name: "a burst at the onset like one in the lookback", slow: [4]float64{8, 12, 10, 16}, steal: &[2]float64{10, 10}, burst: []float64{-60, 2},
			wantAbsent: "hypervisor"},
		{name: "a burst at the onset, one service's fault", slow: [4]float64{4.2, 6.2, 30, 8.2}, steal: &[2]float64{10, 10}, burst: []float64{2}, wantSvc: "c",
			wantText: "but c stands out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := openStore(t)
			onset, now := writeIncident(t, st, func(i int, at time.Time, slow bool) []*model.Span {
				if slow {
					return chain4Trace(i, at, tc.slow, true)
				}
				return chain4Trace(i, at, base, false)
			})
			if tc.steal != nil {
				from := onset.Add(-DefaultConfig().Lookback)
				busy := tc.busy
				if busy == [2]float64{} {
					busy = [2]float64{800, 800}
				}
				steal := nodePoints(metricSteal, "node1", from, onset, now, tc.steal[0]/1e3, tc.steal[1]/1e3)
				for _, b := range tc.burst {
					at := onset.Add(time.Duration(b * float64(time.Second))).UnixNano()
					for i := range steal {
						if steal[i].Time >= at {
							steal[i].Value += 0.3
						}
					}
				}
				pts := append(steal, nodePoints(metricBusy, "node1", from, onset, now, busy[0]/1e3, busy[1]/1e3)...)
				if err := st.WriteMetrics(ctx, pts); err != nil {
					t.Fatal(err)
				}
			}
			d := &Diagnoser{Source: &analysis.StoreSource{Spans: st, Artifacts: st}, Config: DefaultConfig(), Now: func() time.Time { return now }, Metrics: st}
			v, err := d.Diagnose(ctx, &Incident{ID: "x", Entry: "a GET /a", EntryService: "a", Start: onset.UnixNano(), End: now.Add(-time.Second).UnixNano()})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("verdict: %q node %q %s %.2f\nevidence: %s", v.Service, v.Node, v.Cause, v.Confidence, strings.Join(v.Evidence, "\n  "))
			text := strings.Join(v.Evidence, "\n")
			switch {
			case tc.wantNode:
				if v.Node != "node1" || v.Service != "" || v.Cause != CauseCPUContention || v.Confidence <= 0 {
					t.Errorf("verdict service %q node %q cause %s confidence %.2f, want the node node1, cpu-contention", v.Service, v.Node, v.Cause, v.Confidence)
				}
				if v.RunnerUp == nil || v.RunnerUp.Service == "" {
					t.Errorf("runner-up %+v: want the top suspect", v.RunnerUp)
				}
			case tc.wantSvc != "":
				if v.Service != tc.wantSvc || v.Node != "" {
					t.Errorf("verdict service %q node %q, want %s", v.Service, v.Node, tc.wantSvc)
				}
			default:
				if v.Node != "" || v.Service == "" {
					t.Errorf("verdict service %q node %q: want a service, not the node", v.Service, v.Node)
				}
			}
			if tc.wantText != "" && !strings.Contains(text, tc.wantText) {
				t.Errorf("evidence does not say %q", tc.wantText)
			}
			if tc.wantAbsent != "" && strings.Contains(text, tc.wantAbsent) {
				t.Errorf("evidence says %q", tc.wantAbsent)
			}
		})
	}
}

// TestReadSteal: the windows split at onset − stealLead and end at
// onset + stealEarly; a drop of the counter (the node rebooted) counts
// from zero.
func TestReadSteal(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	onset := t0.Add(120 * time.Second)
	from, to := t0, onset.Add(60*time.Second)
	var pts []store.MetricPoint
	var steal, busy float64
	for at := from; !at.After(to); at = at.Add(time.Second) {
		switch {
		case at.Equal(t0.Add(30 * time.Second)):
			steal = 0.01 // rebooted: 10 ms since boot
		case at.After(onset.Add(-stealLead)) && !at.After(onset.Add(stealEarly)):
			steal += 0.2
		case at.After(from):
			steal += 0.02
		}
		if at.After(from) {
			busy += 0.8
		}
		labels := map[string]string{"host.name": "n1"}
		pts = append(pts, store.MetricPoint{Name: metricSteal, Kind: store.MetricSum, Labels: labels, Time: at.UnixNano(), Value: steal},
			store.MetricPoint{Name: metricBusy, Kind: store.MetricSum, Labels: labels, Time: at.UnixNano(), Value: busy})
	}
	if err := st.WriteMetrics(ctx, pts); err != nil {
		t.Fatal(err)
	}
	got, err := readSteal(ctx, st, from, onset, to)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].host != "n1" {
		t.Fatalf("got %+v", got)
	}
	e := got[0]
	// before: 115 s of 20 ms/s but one second of 10 ms (the reboot);
	// during: 20 s of 200 ms/s; busy 800 ms/s throughout.
	if wantBefore := (114*20.0 + 10) / 115; e.beforeWin != 115*time.Second || abs(e.stealBefore-wantBefore) > 0.01 || abs(e.busyBefore-800) > 0.01 {
		t.Errorf("before: steal %.2f busy %.2f ms/s over %v, want %.2f and 800 over 115s", e.stealBefore, e.busyBefore, e.beforeWin, wantBefore)
	}
	if e.duringWin != 20*time.Second || abs(e.stealDuring-200) > 0.01 || abs(e.busyDuring-800) > 0.01 {
		t.Errorf("during: steal %.2f busy %.2f ms/s over %v, want 200 and 800 over 20s", e.stealDuring, e.busyDuring, e.duringWin)
	}
	if before, during := e.shares(); abs(during-0.2) > 0.001 || before > 0.03 || !e.grew() {
		t.Errorf("shares %.3f → %.3f, grew %v; want → 0.2, grown", before, during, e.grew())
	}
	// The largest share of a second: 0.2 in each second from the first
	// after the split (onset − 4 s) to onset + burstLate, 200 ms; before
	// it 20 of 820 ms (the reboot's second withheld less).
	if abs(e.peak-0.2) > 0.001 || abs(e.peakStolen-200) > 0.5 || e.peakAt < -4*time.Second || e.peakAt > burstLate || abs(e.beforePeak-0.02/0.82) > 0.001 || !e.burst() {
		t.Errorf("peak %.3f (%.0f ms at %v), before %.4f, burst %v; want 0.2 (200 ms at -4s), 0.0244, a burst", e.peak, e.peakStolen, e.peakAt, e.beforePeak, e.burst())
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
