package capture

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// TestNextSlotKeepsSuspectShare: with a ranking, the services it names
// get the kept share of MaxPerMinute and the last capture of every burst;
// the others are held to the rest. Times are set, not waited for.
func TestNextSlotKeepsSuspectShare(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	ago := func(s int) time.Time { return now.Add(-time.Duration(s) * time.Second) }
	others := func(secs ...int) []firing {
		var out []firing
		for _, s := range secs {
			out = append(out, firing{at: ago(s), service: "caller"})
		}
		return out
	}
	key := procKey{"agent", 7}
	cases := []struct {
		name    string
		share   float64
		ranking []string // nil: no ranking source
		fired   []firing
		last    time.Time // the process's last capture, zero: none
		service string
		asked   bool      // a verdict asked for the capture (AskedInterval)
		since   time.Time // since when its captures count for its incident (zero: when SetSuspects ran)
		wanting bool      // the verdict has no kernel path of it yet
		want    time.Time
	}{
		{name: "no ranking source: first come", share: 0.5, fired: others(2, 1), service: "caller", want: now},
		{name: "not a suspect: the last of a burst is kept", share: 0.5, ranking: []string{}, fired: others(2, 1), service: "caller", want: ago(2).Add(15 * time.Second)},
		{name: "a suspect takes the last of a burst", share: 0.5, ranking: []string{"e"}, fired: others(2, 1), service: "e", want: now},
		{name: "a full burst holds a suspect too", share: 0.5, ranking: []string{"e"}, fired: others(3, 2, 1), service: "e", want: ago(3).Add(15 * time.Second)},
		{name: "not a suspect: at most the rest of a minute", share: 0.5, ranking: []string{"e"}, fired: others(58, 57, 40, 39, 20, 19), service: "caller", want: ago(58).Add(time.Minute)},
		{name: "a suspect uses the kept share", share: 0.5, ranking: []string{"e"}, fired: others(58, 57, 40, 39, 20, 19), service: "e", want: now},
		{name: "the whole minute used: a suspect waits", share: 0.5, ranking: []string{"e"}, fired: others(59, 58, 55, 50, 45, 40, 35, 30, 25, 20, 10, 1), service: "e", want: ago(59).Add(time.Minute)},
		{name: "share 0 keeps nothing", share: 0, ranking: []string{"e"}, fired: others(58, 57, 40, 39, 20, 19), service: "caller", want: now},
		{name: "share 1: only suspects", share: 1, ranking: []string{"e"}, service: "caller", want: now.Add(15 * time.Second)},
		{name: "a suspect's capture leaves the others theirs", share: 0.5, ranking: []string{"e"}, fired: []firing{{at: ago(2), service: "e", suspect: true}, {at: ago(1), service: "caller"}}, service: "caller", want: now},
		{name: "min interval holds a suspect captured since it became one", share: 0.5, ranking: []string{"e"}, since: ago(20), last: ago(10), service: "e", want: now.Add(20 * time.Second)},
		{name: "a suspect's first capture since it became one waits the asked interval only", share: 0.5, ranking: []string{"e"}, since: ago(4), last: ago(10), service: "e", want: now},
		{name: "a new suspect within the asked interval", share: 0.5, ranking: []string{"e"}, since: ago(1), last: ago(2), service: "e", want: now.Add(3 * time.Second)},
		{name: "min interval holds who is no suspect", share: 0.5, ranking: []string{"d"}, last: ago(10), service: "e", want: now.Add(20 * time.Second)},
		{name: "a verdict's ask waits the asked interval only", share: 0.5, last: ago(10), service: "e", asked: true, want: now},
		{name: "a verdict's ask within the asked interval", share: 0.5, last: ago(2), service: "e", asked: true, want: now.Add(3 * time.Second)},
		{name: "a full burst holds a verdict's ask too", share: 0.5, fired: others(3, 2, 1), last: ago(10), service: "e", asked: true, want: ago(3).Add(15 * time.Second)},
		{name: "a culprit without paths waits the asked interval only", share: 0.5, ranking: []string{"e"}, since: ago(20), last: ago(10), wanting: true, service: "e", want: now},
		{name: "a culprit without paths: the others' burst does not hold it", share: 0.5, ranking: []string{"e"}, fired: others(3, 2, 1), wanting: true, service: "e", want: now},
		{name: "a culprit without paths: the suspects' burst does", share: 0.5, ranking: []string{"e"},
			fired: []firing{{at: ago(3), service: "d", suspect: true}, {at: ago(2), service: "e", suspect: true}, {at: ago(1), service: "d", suspect: true}}, wanting: true, service: "e", want: ago(3).Add(15 * time.Second)},
		{name: "a culprit without paths: the minute holds it", share: 0.5, ranking: []string{"e"}, fired: others(59, 58, 55, 50, 45, 40, 35, 30, 25, 20, 10, 1), wanting: true, service: "e", want: ago(59).Add(time.Minute)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxPerMinute, cfg.MinInterval, cfg.AskedInterval, cfg.SuspectShare = 12, 30*time.Second, 5*time.Second, tc.share
			m, err := New(cfg, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.ranking != nil {
				m.SetSuspects(ranking(tc.ranking...))
				if st, ok := m.suspect[tc.service]; ok {
					if !tc.since.IsZero() {
						st.since = tc.since
					}
					st.wanting = tc.wanting
					m.suspect[tc.service] = st
				}
			}
			m.fired = slices.Clone(tc.fired)
			if !tc.last.IsZero() {
				m.lastFired[key] = tc.last
			}
			m.mu.Lock()
			got := m.nextSlotLocked(key, tc.service, now, tc.asked)
			m.mu.Unlock()
			if !got.Equal(tc.want) {
				t.Errorf("next slot %v after now, want %v", got.Sub(now), tc.want.Sub(now))
			}
		})
	}
}

// ranking is a Suspects that names svcs, most suspect first.
func ranking(svcs ...string) Suspects {
	return func() []Suspect {
		var out []Suspect
		for _, s := range svcs {
			out = append(out, Suspect{Service: s})
		}
		return out
	}
}

// intervalManager is a Manager whose clock stands at now, with a
// MinInterval of 30 s and an AskedInterval of 5 s.
func intervalManager(t *testing.T, now time.Time) (*Manager, Config) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MinInterval, cfg.AskedInterval = 30*time.Second, 5*time.Second
	m, err := New(cfg, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.now = func() time.Time { return now }
	return m, cfg
}

// TestAskedReleasesHeld: a span a verdict asks for that joins a capture
// held by MinInterval brings it forward to AskedInterval; an anomaly that
// joins it does not.
func TestAskedReleasesHeld(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	m, cfg := intervalManager(t, now)
	key := procKey{"agent", 7}
	m.lastFired[key] = now.Add(-10 * time.Second)
	held := &Capture{ID: "c", Start: now.Add(-8 * time.Second).UnixNano(), End: now.Add(-4 * time.Second).UnixNano(),
		due: now.Add(20 * time.Second), held: true, latest: now.Add(20*time.Second + cfg.MaxDelay)}
	m.pending[key] = []*Capture{held}
	span := func(i byte) (store.SpanRef, int64, int64) {
		s, e := now.Add(-3*time.Second).UnixNano(), now.Add(-2*time.Second).UnixNano()
		return store.SpanRef{TraceID: model.TraceID{i}, SpanID: model.SpanID{i}}, s, e
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ref, s, e := span(1)
	if !m.coalesce(key, "e", ref, s-int64(cfg.Pre), e+int64(cfg.Post), s, e, false) {
		t.Fatal("an anomaly did not join the held capture")
	}
	if !held.due.Equal(now.Add(20*time.Second)) || !held.held || held.asked {
		t.Fatalf("an anomaly moved the held capture: due in %v, held %v, asked %v", held.due.Sub(now), held.held, held.asked)
	}
	ref, s, e = span(2)
	if !m.coalesce(key, "e", ref, s-int64(cfg.Pre), e+int64(cfg.Post), s, e, true) {
		t.Fatal("an asked span did not join the held capture")
	}
	// Its window ends Post after the span: settled Settle after that.
	want := time.Unix(0, e).Add(cfg.Post + cfg.Settle)
	if !held.due.Equal(want) || held.held || !held.asked || len(held.Spans) != 2 {
		t.Fatalf("after the ask: due in %v (want %v), held %v, asked %v, %d spans", held.due.Sub(now), want.Sub(now), held.held, held.asked, len(held.Spans))
	}
}

// TestSuspectReleasesHeld: a capture held by MinInterval after one taken
// before its service became a suspect goes as soon as AskedInterval
// allows once the ranking names it; one of another service stays held.
func TestSuspectReleasesHeld(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	m, cfg := intervalManager(t, now)
	held := func(pid int64, svc string) (procKey, *Capture) {
		key := procKey{"agent", pid}
		m.lastFired[key] = now.Add(-10 * time.Second)
		c := &Capture{ID: svc, Service: svc, Start: now.Add(-8 * time.Second).UnixNano(), End: now.Add(-4 * time.Second).UnixNano(),
			due: now.Add(20 * time.Second), held: true, latest: now.Add(20*time.Second + cfg.MaxDelay)}
		m.pending[key] = []*Capture{c}
		return key, c
	}
	_, e := held(7, "e")
	_, d := held(8, "d")
	m.SetSuspects(ranking("e"))
	// 5 s after the last capture (now − 5 s) and its window settled
	// (now − 3 s): due at once.
	if !e.due.Equal(now) {
		t.Errorf("the suspect's capture: due in %v, want now", e.due.Sub(now))
	}
	if !d.due.Equal(now.Add(20*time.Second)) || !d.held {
		t.Errorf("the other's capture: due in %v, held %v; want it held 20 s", d.due.Sub(now), d.held)
	}
	// Released, it goes when due: a slow span that ended 2 s ago would
	// move its window's end (Post after it) and its due time by a second
	// (within MaxDelay); it is left for the next.
	m.mu.Lock()
	s, end := now.Add(-3*time.Second).UnixNano(), now.Add(-2*time.Second).UnixNano()
	joined := m.coalesce(procKey{"agent", 7}, "e", store.SpanRef{TraceID: model.TraceID{9}, SpanID: model.SpanID{9}},
		s-int64(cfg.Pre), end+int64(cfg.Post), s, end, false)
	m.mu.Unlock()
	if joined || !e.due.Equal(now) {
		t.Errorf("a later anomaly joined the released capture (%v) or moved it: due in %v", joined, e.due.Sub(now))
	}
	// A capture not held, whose window ends Post after a span that just
	// ended: when its service becomes a suspect, its window ends with the
	// span and it goes after Settle, not Post + Settle later; when the span
	// ended two seconds ago (Settle passed), at once.
	for _, ago := range []time.Duration{0, 2 * time.Second} {
		_, f := held(9, "f")
		spanEnd := now.Add(-ago)
		f.held, f.End, f.due, f.spansEnd = false, spanEnd.Add(cfg.Post).UnixNano(), spanEnd.Add(cfg.Post+cfg.Settle), spanEnd.UnixNano()
		f.latest = f.due.Add(cfg.MaxDelay)
		delete(m.lastFired, procKey{"agent", 9})
		m.SetSuspects(ranking("e", "f"))
		wantDue := laterOf(spanEnd.Add(cfg.Settle), now)
		if !f.due.Equal(wantDue) || f.End != spanEnd.UnixNano() || f.held {
			t.Errorf("the new suspect's capture, its span ended %v ago: due in %v, window ends %v from now, held %v; want %v, %v, false",
				ago, f.due.Sub(now), time.Duration(f.End-now.UnixNano()), f.held, wantDue.Sub(now), -ago)
		}
		m.SetSuspects(ranking("e"))
	}
	// Still a suspect a second later: nothing moves again.
	e.due, e.held = now.Add(20*time.Second), true
	m.refreshSuspects()
	if !e.due.Equal(now.Add(20 * time.Second)) {
		t.Errorf("a refresh moved a capture of a service already suspect: due in %v", e.due.Sub(now))
	}
	// d ranked by an incident that began before its last capture (now −
	// 10 s): held all the same; then named culprit without a path of it:
	// released.
	m.suspects = func() []Suspect {
		return []Suspect{{Service: "e"}, {Service: "d", Since: now.Add(-12 * time.Second)}}
	}
	m.suspect["d"] = suspectState{rank: 1, since: now.Add(-12 * time.Second)}
	m.refreshSuspects()
	if !d.held || !d.due.Equal(now.Add(20*time.Second)) {
		t.Errorf("d's capture moved without cause: due in %v, held %v", d.due.Sub(now), d.held)
	}
	m.suspects = func() []Suspect {
		return []Suspect{{Service: "e"}, {Service: "d", Since: now.Add(-12 * time.Second), Wanting: true}}
	}
	m.refreshSuspects()
	if !d.due.Equal(now) {
		t.Errorf("a culprit without paths: its capture due in %v, want now", d.due.Sub(now))
	}
	// e, a suspect since 30 s ago (an earlier incident): one that began
	// after its last capture releases it again.
	m.suspect["e"] = suspectState{since: now.Add(-30 * time.Second)}
	m.suspects = func() []Suspect {
		return []Suspect{{Service: "e", Since: now.Add(-8 * time.Second)}}
	}
	m.refreshSuspects()
	if !e.due.Equal(now) {
		t.Errorf("a new incident's suspect: its capture due in %v, want now", e.due.Sub(now))
	}
}

// TestMaxDelay: anomalies that coalesce into a pending capture move its
// window's end and its due time, but not past MaxDelay after it was first
// due: a later one is left for the next capture.
func TestMaxDelay(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	cfg := DefaultConfig()
	cfg.MaxDelay, cfg.Post, cfg.Settle = 2*time.Second, 2*time.Second, time.Second
	m, err := New(cfg, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.now = func() time.Time { return now }
	key := procKey{"agent", 7}
	// First due 1 s after its window's end (the span's end + Post).
	first := now.Add(cfg.Post + cfg.Settle)
	c := &Capture{ID: "c", Start: now.Add(-6 * time.Second).UnixNano(), End: now.Add(cfg.Post).UnixNano(), due: first, latest: first.Add(cfg.MaxDelay)}
	m.pending[key] = []*Capture{c}
	m.mu.Lock()
	defer m.mu.Unlock()
	join := func(i byte, spanEnd time.Duration) bool {
		s, e := now.Add(spanEnd-100*time.Millisecond).UnixNano(), now.Add(spanEnd).UnixNano()
		ref := store.SpanRef{TraceID: model.TraceID{i}, SpanID: model.SpanID{i}}
		return m.coalesce(key, "e", ref, s-int64(cfg.Pre), e+int64(cfg.Post), s, e, false)
	}
	if !join(1, 1500*time.Millisecond) {
		t.Fatal("a span ending 1.5 s later did not join")
	}
	if want := first.Add(1500 * time.Millisecond); !c.due.Equal(want) {
		t.Fatalf("due in %v, want %v", c.due.Sub(now), want.Sub(now))
	}
	if join(2, 2500*time.Millisecond) {
		t.Fatalf("a span ending 2.5 s later joined: due in %v, past MaxDelay after %v", c.due.Sub(now), first.Sub(now))
	}
	if len(c.Spans) != 1 || !c.due.Equal(first.Add(1500*time.Millisecond)) {
		t.Fatalf("%d spans, due in %v", len(c.Spans), c.due.Sub(now))
	}
	// 0: no bound.
	m.cfg.MaxDelay = 0
	if !join(3, 5*time.Second) {
		t.Fatal("without MaxDelay a later span did not join")
	}
}

// TestOrderPrefersSuspectsThenFairness: the captures due together get
// their slots by the ranking, then by how few captures their service had
// in the last minute, then by window start.
func TestOrderPrefersSuspectsThenFairness(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	m, err := New(DefaultConfig(), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.SetSuspects(ranking("e", "d"))
	m.fired = []firing{{at: now.Add(-10 * time.Second), service: "a"}, {at: now.Add(-5 * time.Second), service: "a"},
		{at: now.Add(-3 * time.Second), service: "c"}, {at: now.Add(-2 * time.Minute), service: "b"}}
	due := []*Capture{{Service: "a", Start: 1}, {Service: "c", Start: 2}, {Service: "b", Start: 3},
		{Service: "d", Start: 4}, {Service: "e", Start: 5}, {Service: "f", Start: 6}}
	m.mu.Lock()
	m.orderLocked(due, now)
	m.mu.Unlock()
	var got []string
	for _, c := range due {
		got = append(got, c.Service)
	}
	// b's capture is older than a minute: it counts as none.
	if want := []string{"e", "d", "b", "f", "c", "a"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// TestSuspectGetsTheSlotCallersWouldTake: four processes' anomalies at
// once with 4 captures a minute (3 in any 45 s): first come, the three
// callers, whose spans start first, take the burst and the culprit waits
// 45 s; with the culprit ranked suspect it takes the burst's last slot and
// the third caller waits.
func TestSuspectGetsTheSlotCallersWouldTake(t *testing.T) {
	for _, ranked := range []bool{false, true} {
		name := "first come"
		if ranked {
			name = "culprit ranked"
		}
		t.Run(name, func(t *testing.T) {
			// A window may wait past the burst's 45 s.
			f := newFixtureWith(t, func(c *Config) { c.MaxPerMinute, c.MaxWindow = 4, 2*time.Minute }, func(m *Manager, _ string) {
				if ranked {
					m.SetSuspects(ranking("e"))
				}
			})
			ag := newTestAgent(t, f.url, "", 100)
			ag.register(t, agentapi.Process{PID: 41, Service: "a"}, agentapi.Process{PID: 42, Service: "b"},
				agentapi.Process{PID: 43, Service: "c"}, agentapi.Process{PID: 45, Service: "e"})
			t0 := time.Now().Add(-time.Second)
			f.m.OnCommitted([]*model.Span{anomalous("a", 1, t0, 300*time.Millisecond), anomalous("b", 2, t0.Add(10*time.Millisecond), 280*time.Millisecond),
				anomalous("c", 3, t0.Add(20*time.Millisecond), 260*time.Millisecond), anomalous("e", 4, t0.Add(30*time.Millisecond), 240*time.Millisecond)})
			defer func() {
				for _, c := range f.m.Captures(0) {
					t.Logf("%s %s %v", c.Service, c.State, c.Suspect)
				}
			}()
			waitUntil(t, "three dumps", func() bool { return len(ag.dumps()) == 3 })
			time.Sleep(300 * time.Millisecond) // a fourth would have come by now
			var got []string
			for _, d := range ag.dumps() {
				got = append(got, d.Service)
			}
			slices.Sort(got)
			want, waits := []string{"a", "b", "c"}, "e"
			if ranked {
				want, waits = []string{"a", "b", "e"}, "c"
			}
			if !slices.Equal(got, want) {
				t.Fatalf("dumps for %v, want %v", got, want)
			}
			for _, c := range f.m.Captures(0) {
				if c.Service == waits && c.State != StatePending {
					t.Errorf("%s's capture is %s, want pending (its slot comes later)", c.Service, c.State)
				}
				if c.Suspect != (ranked && c.Service == "e") {
					t.Errorf("%s's capture: suspect %v", c.Service, c.Suspect)
				}
			}
		})
	}
}

// TestMaxPerAgent: an agent works on at most MaxPerAgent captures; the
// others wait at the server, the suspect's first, and are requested as the
// agent completes; one whose window's start gets older than MaxWindow
// while it waits is skipped, not sent to be dumped from an evicted buffer.
func TestMaxPerAgent(t *testing.T) {
	for _, late := range []bool{false, true} {
		name := "requested as the agent completes"
		if late {
			name = "skipped once too old"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixtureWith(t, func(c *Config) {
				c.MaxPerAgent = 2
				// The four windows are due at one moment (below). In the
				// late case the two held ones get older than MaxWindow
				// while the agent works on the first two.
				c.Settle = time.Second
				if late {
					c.MaxWindow = 2 * time.Second
				}
			}, func(m *Manager, _ string) {
				m.SetSuspects(ranking("e"))
			})
			ag := newTestAgent(t, f.url, "", 100)
			hold := make(chan struct{})
			ag.hold = hold
			ag.register(t, agentapi.Process{PID: 41, Service: "a"}, agentapi.Process{PID: 42, Service: "b"},
				agentapi.Process{PID: 43, Service: "c"}, agentapi.Process{PID: 45, Service: "e"})
			// The four spans end at one moment after they are routed, so
			// their captures are due at one moment (their windows' end and
			// a settle), whatever the machine's load: they fire together,
			// in orderLocked's order.
			t0 := time.Now().Add(500 * time.Millisecond)
			f.m.OnCommitted([]*model.Span{anomalous("a", 1, t0, 300*time.Millisecond), anomalous("b", 2, t0.Add(10*time.Millisecond), 290*time.Millisecond),
				anomalous("c", 3, t0.Add(20*time.Millisecond), 280*time.Millisecond), anomalous("e", 4, t0.Add(30*time.Millisecond), 270*time.Millisecond)})
			waitUntil(t, "two dumps", func() bool { return len(ag.dumps()) == 2 })
			// The held captures are tried again every agentRetry.
			time.Sleep(2*agentRetry + 500*time.Millisecond)
			var got []string
			for _, d := range ag.dumps() {
				got = append(got, d.Service)
			}
			slices.Sort(got)
			if want := []string{"a", "e"}; !slices.Equal(got, want) {
				t.Fatalf("dumps for %v while the agent works on two, want %v (the suspect, then the earliest window)", got, want)
			}
			close(hold)
			if !late {
				waitUntil(t, "four complete captures", func() bool {
					n := 0
					for _, c := range f.m.Captures(0) {
						if c.State == StateComplete {
							n++
						}
					}
					return n == 4
				})
				return
			}
			waitUntil(t, "two complete, two skipped", func() bool {
				states := map[string]int{}
				for _, c := range f.m.Captures(0) {
					states[c.State]++
					if c.State == StateSkipped && !strings.Contains(c.Error, "capture.max_per_agent") {
						t.Errorf("%s skipped: %s", c.Service, c.Error)
					}
				}
				return states[StateComplete] == 2 && states[StateSkipped] == 2
			})
			if n := len(ag.dumps()); n != 2 {
				t.Errorf("%d dumps, want 2: the others' windows were older than max_window", n)
			}
		})
	}
}

// TestAgentBusy: an agent that answers 429 (the windows it holds for
// accepted dumps fill its memory bound) is asked again, and the capture
// completes once it accepts; one whose window gets older than MaxWindow
// meanwhile is skipped, saying why.
func TestAgentBusy(t *testing.T) {
	for _, late := range []bool{false, true} {
		name := "asked again until accepted"
		if late {
			name = "skipped once too old"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) {
				if late {
					c.MaxWindow = 2 * time.Second
				}
			})
			ag := newTestAgent(t, f.url, "", 100)
			ag.status = http.StatusTooManyRequests
			ag.register(t, agentapi.Process{PID: 41, Service: "a"})
			f.m.OnCommitted([]*model.Span{anomalous("a", 1, time.Now().Add(-time.Second), 300*time.Millisecond)})
			waitUntil(t, "asked twice", func() bool { return len(ag.dumps()) >= 2 })
			if cs := f.m.Captures(0); len(cs) != 1 || cs[0].State == StateFailed {
				t.Fatalf("captures after a 429: %+v, want one waiting", cs)
			}
			if late {
				waitUntil(t, "skipped", func() bool {
					cs := f.m.Captures(0)
					return len(cs) == 1 && cs[0].State == StateSkipped
				})
				if c := f.m.Captures(0)[0]; !strings.Contains(c.Error, "429") {
					t.Errorf("skipped for %q, want the agent's 429 named", c.Error)
				}
				return
			}
			ag.mu.Lock()
			ag.status = 0
			ag.mu.Unlock()
			f.waitComplete(t)
		})
	}
}
