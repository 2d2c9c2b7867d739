package httpstream

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseTiming(t *testing.T) {
	us := time.Microsecond
	for _, tc := range []struct {
		name    string
		h       Headers
		want    Timing
		wantErr bool
	}{
		{"none", hdrs("Content-Type: text/plain"), Timing{}, false},
		{"server time", hdrs("rootline-server-time: 1234"), Timing{ServerTime: 1234 * us, HasServerTime: true}, false},
		{"zero", hdrs("Rootline-Server-Time: 0"), Timing{HasServerTime: true}, false},
		{"one wait", hdrs("rootline-wait: 567;kind=local"), Timing{Waits: []Wait{{WaitLocal, 567 * us}}}, false},
		{"list over lines, spaces, case, unknown parameters", hdrs(
			"rootline-server-time: 2000",
			"rootline-wait: 10 ; kind = NET , 20;x=y;kind=remote,",
			"ROOTLINE-WAIT: 30;kind=local;v=2"),
			Timing{ServerTime: 2000 * us, HasServerTime: true, Waits: []Wait{{WaitNet, 10 * us}, {WaitRemote, 20 * us}, {WaitLocal, 30 * us}}}, false},
		{"repeated equal server time", hdrs("rootline-server-time: 5", "rootline-server-time: 5"), Timing{ServerTime: 5 * us, HasServerTime: true}, false},
		{"largest", hdrs("rootline-server-time: 999999999999999"), Timing{ServerTime: 999999999999999 * us, HasServerTime: true}, false},
		{"conflicting server time", hdrs("rootline-server-time: 5", "rootline-server-time: 6"), Timing{}, true},
		{"negative", hdrs("rootline-server-time: -5"), Timing{}, true},
		{"plus sign", hdrs("rootline-server-time: +5"), Timing{}, true},
		{"fraction", hdrs("rootline-server-time: 1.5"), Timing{}, true},
		{"empty", hdrs("rootline-server-time: "), Timing{}, true},
		{"too many digits", hdrs("rootline-server-time: 0000000000000001"), Timing{}, true},
		{"wait without kind", hdrs("rootline-wait: 5"), Timing{}, true},
		{"wait with empty parameters", hdrs("rootline-wait: 5;"), Timing{}, true},
		{"unknown kind", hdrs("rootline-wait: 5;kind=disk"), Timing{}, true},
		{"parameter without value", hdrs("rootline-wait: 5;kind"), Timing{}, true},
		{"wait without value", hdrs("rootline-wait: ;kind=net"), Timing{}, true},
		// The compact form.
		{"compact", hdrs("rl: 1234;l=12;n=3;r=456"),
			Timing{ServerTime: 1234 * us, HasServerTime: true, Waits: []Wait{{WaitLocal, 12 * us}, {WaitNet, 3 * us}, {WaitRemote, 456 * us}}}, false},
		{"compact server time only", hdrs("RL: 7"), Timing{ServerTime: 7 * us, HasServerTime: true}, false},
		{"compact any order, zero, unknown keys", hdrs("rl: 0;r=5;zz=9;l=0"),
			Timing{HasServerTime: true, Waits: []Wait{{WaitRemote, 5 * us}, {WaitLocal, 0}}}, false},
		{"compact largest", hdrs("rl: 999999999999999;r=999999999999999"),
			Timing{ServerTime: 999999999999999 * us, HasServerTime: true, Waits: []Wait{{WaitRemote, 999999999999999 * us}}}, false},
		{"mixed forms agree", hdrs("rootline-server-time: 40", "rl: 40;n=2", "rootline-wait: 9;kind=remote"),
			Timing{ServerTime: 40 * us, HasServerTime: true, Waits: []Wait{{WaitNet, 2 * us}, {WaitRemote, 9 * us}}}, false},
		{"mixed forms, long waits only", hdrs("rootline-wait: 9;kind=remote", "rl: 40"),
			Timing{ServerTime: 40 * us, HasServerTime: true, Waits: []Wait{{WaitRemote, 9 * us}}}, false},
		{"mixed forms conflict", hdrs("rl: 40", "rootline-server-time: 41"), Timing{}, true},
		{"compact repeated", hdrs("rl: 40", "rl: 40"), Timing{}, true},
		{"compact repeated key", hdrs("rl: 40;l=1;l=1"), Timing{}, true},
		{"compact empty", hdrs("rl: "), Timing{}, true},
		{"compact no server time", hdrs("rl: ;l=3"), Timing{}, true},
		{"compact key first", hdrs("rl: l=3"), Timing{}, true},
		{"compact trailing semicolon", hdrs("rl: 4;"), Timing{}, true},
		{"compact key without value", hdrs("rl: 4;l"), Timing{}, true},
		{"compact empty value", hdrs("rl: 4;l="), Timing{}, true},
		{"compact empty key", hdrs("rl: 4;=5"), Timing{}, true},
		{"compact upper-case key", hdrs("rl: 4;L=5"), Timing{}, true},
		{"compact key too long", hdrs("rl: 4;abcdefghi=5"), Timing{}, true},
		{"compact inner space", hdrs("rl: 4; l=5"), Timing{}, true},
		{"compact list", hdrs("rl: 4, 5"), Timing{}, true},
		{"compact negative", hdrs("rl: 4;l=-5"), Timing{}, true},
		{"compact overflow", hdrs("rl: 1000000000000000"), Timing{}, true},
		{"compact wait overflow", hdrs("rl: 1;r=1000000000000000"), Timing{}, true},
		{"compact unknown key, bad value", hdrs("rl: 1;x=y"), Timing{}, true},
		{"compact too long", hdrs("rl: 1" + strings.Repeat(";x=1", 32)), Timing{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTiming(tc.h)
			if tc.wantErr {
				if !errors.Is(err, ErrBadTiming) {
					t.Fatalf("err = %v, want ErrBadTiming", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestAppendTimingHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    Timing
		want string
	}{
		{"nothing", Timing{}, ""},
		{"server time only", Timing{ServerTime: 1234567 * time.Nanosecond, HasServerTime: true}, "rootline-server-time: 1234\r\n"},
		{"negative", Timing{ServerTime: -time.Second, HasServerTime: true}, "rootline-server-time: 0\r\n"},
		{"waits", Timing{ServerTime: time.Millisecond, HasServerTime: true, Waits: []Wait{{WaitLocal, 567 * time.Microsecond}, {0, time.Second}, {WaitNet, 80 * time.Microsecond}, {WaitRemote, 0}}},
			"rootline-server-time: 1000\r\nrootline-wait: 567;kind=local, 80;kind=net, 0;kind=remote\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(AppendTimingHeaders(nil, tc.t))
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if got == "" {
				return
			}
			// What is written parses back.
			p := NewParser(Responses)
			var back Timing
			var err error
			for _, ev := range p.Feed([]byte("HTTP/1.1 204 No Content\r\n" + got + "\r\n")) {
				if ev.Kind == EventHeaders {
					back, err = ParseTiming(ev.Msg.Headers)
				}
			}
			if err != nil || back.HasServerTime != tc.t.HasServerTime || back.ServerTime != max(0, tc.t.ServerTime.Truncate(time.Microsecond)) {
				t.Fatalf("parsed back %+v, %v", back, err)
			}
		})
	}
}

func TestAppendCompactTiming(t *testing.T) {
	us := time.Microsecond
	for _, tc := range []struct {
		name string
		t    Timing
		want string
	}{
		{"nothing", Timing{}, ""},
		{"waits without server time", Timing{Waits: []Wait{{WaitLocal, us}}}, ""},
		{"server time only", Timing{ServerTime: 1234567 * time.Nanosecond, HasServerTime: true}, "rl: 1234\r\n"},
		{"negative", Timing{ServerTime: -time.Second, HasServerTime: true, Waits: []Wait{{WaitNet, -us}}}, "rl: 0\r\n"},
		{"all", Timing{ServerTime: 1234 * us, HasServerTime: true, Waits: []Wait{{WaitRemote, 456 * us}, {0, time.Second}, {WaitNet, 3 * us}, {WaitLocal, 12 * us}}},
			"rl: 1234;l=12;n=3;r=456\r\n"},
		{"zeros left out", Timing{ServerTime: time.Millisecond, HasServerTime: true, Waits: []Wait{{WaitLocal, 999 * time.Nanosecond}, {WaitNet, 0}, {WaitRemote, 7 * us}}},
			"rl: 1000;r=7\r\n"},
		{"largest of a kind", Timing{ServerTime: us, HasServerTime: true, Waits: []Wait{{WaitRemote, 2 * us}, {WaitRemote, 9 * us}, {WaitRemote, 3 * us}}},
			"rl: 1;r=9\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(AppendTiming(nil, tc.t, TimingCompact))
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if got == "" {
				return
			}
			back, err := ParseTiming(parseResponseHead(t, got))
			if err != nil || back.ServerTime != max(0, tc.t.ServerTime.Truncate(us)) || maxWait(back) != max(0, maxWait(tc.t).Truncate(us)) {
				t.Fatalf("parsed back %+v, %v", back, err)
			}
		})
	}
}

// TestTimingForms: the two forms of one Timing read back the same server
// time and the same largest wait, which is what a caller uses of them.
func TestTimingForms(t *testing.T) {
	tm := Timing{ServerTime: 8123 * time.Microsecond, HasServerTime: true,
		Waits: []Wait{{WaitLocal, 85 * time.Microsecond}, {WaitNet, 0}, {WaitRemote, 8120 * time.Microsecond}}}
	long, compact := AppendTiming(nil, tm, TimingLong), AppendTiming(nil, tm, TimingCompact)
	if string(compact) != "rl: 8123;l=85;r=8120\r\n" {
		t.Fatalf("compact %q", compact)
	}
	a, errA := ParseTiming(parseResponseHead(t, string(long)))
	b, errB := ParseTiming(parseResponseHead(t, string(compact)))
	if errA != nil || errB != nil || a.ServerTime != b.ServerTime || maxWait(a) != maxWait(b) {
		t.Fatalf("long %+v (%v), compact %+v (%v)", a, errA, b, errB)
	}
	for _, s := range []string{"compact", "long"} {
		f, err := ParseTimingForm(s)
		if err != nil || f.String() != s {
			t.Errorf("%s: %v %v", s, f, err)
		}
	}
	if _, err := ParseTimingForm("short"); !errors.Is(err, ErrBadTimingForm) {
		t.Errorf("short: %v", err)
	}
}

func maxWait(t Timing) time.Duration {
	var m time.Duration
	for _, w := range t.Waits {
		if w.Kind >= WaitLocal && w.Kind <= WaitRemote {
			m = max(m, w.Duration)
		}
	}
	return m
}

// parseResponseHead runs the response parser on a head with lines added.
func parseResponseHead(t testing.TB, lines string) Headers {
	t.Helper()
	for _, ev := range NewParser(Responses).Feed([]byte("HTTP/1.1 204 No Content\r\n" + lines + "\r\n")) {
		if ev.Kind == EventHeaders {
			return ev.Msg.Headers
		}
	}
	t.Fatalf("no head in %q", lines)
	return nil
}

// FuzzParseTiming: any value of either field parses without panic, to a
// Timing or ErrBadTiming; a compact value that parses is written back the
// same (its waits, largest per kind, zeros left out) by AppendCompactTiming.
func FuzzParseTiming(f *testing.F) {
	for _, s := range []string{"1234;l=12;n=3;r=456", "0", "5;zz=1;r=0", "1;l=1;l=2", "12a", "", ";", "1;r=999999999999999"} {
		f.Add(s, true)
	}
	f.Add("12;kind=local, 5;kind=net", false)
	f.Fuzz(func(t *testing.T, v string, compact bool) {
		name := HeaderWait
		if compact {
			name = HeaderCompact
		}
		h := Headers{{Name: []byte(name), Value: []byte(v)}}
		tm, err := ParseTiming(h)
		if err != nil {
			if !errors.Is(err, ErrBadTiming) {
				t.Fatalf("%q: %v", v, err)
			}
			return
		}
		if !compact {
			return
		}
		out := AppendCompactTiming(nil, tm)
		back, err := ParseTiming(Headers{{Name: []byte(HeaderCompact), Value: out[len(HeaderCompact)+2 : len(out)-2]}})
		if err != nil || back.ServerTime != tm.ServerTime || maxWait(back) != maxWait(tm) {
			t.Fatalf("%q: wrote %q, read back %+v, %v; first %+v", v, out, back, err, tm)
		}
	})
}

func TestWaitKindString(t *testing.T) {
	for k, want := range map[WaitKind]string{WaitLocal: "local", WaitNet: "net", WaitRemote: "remote", 0: "unknown"} {
		if k.String() != want {
			t.Errorf("%d: %q", k, k.String())
		}
	}
}
