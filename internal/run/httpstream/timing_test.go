package httpstream

import (
	"errors"
	"reflect"
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

func TestWaitKindString(t *testing.T) {
	for k, want := range map[WaitKind]string{WaitLocal: "local", WaitNet: "net", WaitRemote: "remote", 0: "unknown"} {
		if k.String() != want {
			t.Errorf("%d: %q", k, k.String())
		}
	}
}
