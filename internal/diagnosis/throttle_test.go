package diagnosis

import (
	"context"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// TestFallbackThrottle: cart's threads wait 30 ms more per request for a
// CPU (rootline.wait.local_ms) and no kernel snapshot covers its spans.
// The cgroup's throttled time says whether its quota held it (cpu-throttle)
// or other programs did (cpu-contention); without it the verdict says what
// is missing.
func TestFallbackThrottle(t *testing.T) {
	for _, tc := range []struct {
		name string
		// ms of throttling per second before and since the onset; nil:
		// no series.
		throttled   *[2]float64
		noMetrics   bool
		wantCause   string
		wantText    string
		wantMissing bool
	}{
		{name: "the quota ran out", throttled: &[2]float64{0, 600}, wantCause: CauseCPUThrottle, wantText: "the quota, not other programs"},
		{name: "throttled as much as before", throttled: &[2]float64{200, 220}, wantCause: CauseCPUContention, wantText: "not the quota"},
		{name: "a little throttling", throttled: &[2]float64{0, 5}, wantCause: CauseCPUContention, wantText: "not the quota"},
		{name: "no quota statistics", wantCause: CauseCPUContention, wantText: "no cpu_throttled kernel metric", wantMissing: true},
		{name: "no kernel metrics read", noMetrics: true, wantCause: CauseCPUContention, wantText: "a kernel snapshot or the agent's kernel metrics", wantMissing: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := openStore(t)
			onset, now := writeIncident(t, st, func(i int, at time.Time, slow bool) []*model.Span {
				cart, wait := 6.0, 1.0
				if slow {
					cart, wait = 36, 31
				}
				tr := shopTrace(i, at, 2, cart, 3, slow)
				tr[2].Attributes = append(tr[2].Attributes, model.Float(model.AttrWaitLocalMs, wait))
				return tr
			})
			from := onset.Add(-DefaultConfig().Lookback)
			if tc.throttled != nil {
				pts := counter(metricThrottled, "cart", "app", "", from, onset, now, tc.throttled[0]/1e3, tc.throttled[1]/1e3)
				if err := st.WriteMetrics(ctx, pts); err != nil {
					t.Fatal(err)
				}
			} else if err := st.WriteMetrics(ctx, counter(metricRetransmits, "cart", "", "", from, onset, now, 0, 0)); err != nil {
				t.Fatal(err)
			}
			v := diagnoseWritten(t, st, onset, now, !tc.noMetrics)
			if v.Service != "cart" || v.Cause != tc.wantCause {
				t.Fatalf("verdict %s/%s, want cart/%s", v.Service, v.Cause, tc.wantCause)
			}
			checkSays(t, v, tc.wantMissing, tc.wantText)
		})
	}
}

// TestReadThrottleWindows: the windows are what the points cover, so a
// push interval longer than the time since the onset does not dilute the
// rate.
func TestReadThrottleWindows(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	onset := t0.Add(60 * time.Second)
	var pts []store.MetricPoint
	// A push every 15 s; the last one 5 s after the onset, 2 s of it
	// throttled; 10 s more pass before the verdict.
	for i, v := range []float64{0, 0, 0, 0, 0.1, 2.1} {
		at := t0.Add(time.Duration(i*15-10) * time.Second)
		pts = append(pts, store.MetricPoint{Name: metricThrottled, Service: "cart", Kind: store.MetricSum, Unit: "s",
			Labels: map[string]string{"container": "/cart"}, StartTime: t0.UnixNano(), Time: at.UnixNano(), Value: v})
	}
	if err := st.WriteMetrics(ctx, pts); err != nil {
		t.Fatal(err)
	}
	e, err := readThrottle(ctx, st, "cart", t0.Add(-15*time.Second), onset, onset.Add(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	before, during := e.perSec()
	if !e.seen || e.beforeWin != 60*time.Second || e.duringWin != 15*time.Second || before < 1.6 || before > 1.7 || during < 133 || during > 134 || !e.throttled() {
		t.Errorf("%+v: %.2f ms/s before, %.2f since", e, before, during)
	}
}
