package critpath

import (
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"
)

func gz(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, _ = w.Write([]byte(s))
	_ = w.Close()
	return b.Bytes()
}

func TestDecodeRejectsBadInput(t *testing.T) {
	const ok = `{"version":1,"pid":1,"start_ns":0,"end_ns":10,"threads":[{"tid":1,"pid":1,"comm":"a","target":true}],` +
		`"intervals":[{"tid":1,"state":"running","start_ns":0,"end_ns":5,"cpu":0,"wakeup":-1}],"wakeups":[]}`
	if _, err := DecodeBytes(gz(t, ok)); err != nil {
		t.Fatalf("the valid base case: %v", err)
	}
	full := gz(t, ok)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"not gzip", []byte(ok), "gzip"},
		{"truncated gzip", full[:len(full)/2], ""},
		{"truncated json", gz(t, ok[:len(ok)-3]), "end of input"},
		{"not an object", gz(t, `[1,2]`), "want '{'"},
		{"no version", gz(t, `{"start_ns":0,"end_ns":1}`), "not a kernel snapshot"},
		{"float time", gz(t, strings.Replace(ok, `"end_ns":10`, `"end_ns":1.5`, 1)), "not an integer"},
		{"huge number", gz(t, strings.Replace(ok, `"end_ns":10`, `"end_ns":123456789012345678901`, 1)), "out of range"},
		{"string for number", gz(t, strings.Replace(ok, `"pid":1,"start_ns"`, `"pid":"1","start_ns"`, 1)), "want a number"},
		{"backwards interval", gz(t, strings.Replace(ok, `"start_ns":0,"end_ns":5`, `"start_ns":6,"end_ns":5`, 1)), "ends before it starts"},
		{"wakeup out of range", gz(t, strings.Replace(ok, `"wakeup":-1`, `"wakeup":3`, 1)), "wakeup 3 of 0"},
		{"overlapping intervals", gz(t, strings.Replace(ok, `"intervals":[`,
			`"intervals":[{"tid":1,"state":"blocked","reason":"lock","start_ns":3,"end_ns":8,"wakeup":-1},`, 1)), "overlapping"},
		{"deep nesting", gz(t, `{"version":1,"start_ns":0,"end_ns":1,"x":`+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`}`), "nested deeper"},
		{"trailing data", gz(t, ok+`{}`), "data after"},
		{"unterminated string", gz(t, `{"version":1,"start_ns":0,"end_ns":1,"x":"abc`), "unterminated string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl, err := DecodeBytes(tc.data)
			wantRefusal(t, tl, err, tc.want)
		})
	}
}

// wantRefusal checks a decoder's refusal: no timeline, an error wrapping
// ErrBadSnapshot that says want.
func wantRefusal(t *testing.T, tl *Timeline, err error, want string) {
	t.Helper()
	if err == nil || tl != nil {
		t.Fatalf("decoded (%v), want an error", tl)
	}
	if !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("%v does not wrap ErrBadSnapshot", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

// TestDecodeSkipsUnknownFields: a newer recorder's additions (fields,
// reasons, contexts) are read past, not refused.
func TestDecodeSkipsUnknownFields(t *testing.T) {
	const s = `{"version":2,"pid":1,"start_ns":0,"end_ns":10,"extra":{"a":[1,2,{"b":"c\"}"}],"n":null,"t":true},` +
		`"threads":[{"tid":1,"pid":1,"comm":"a\u00e9","target":true,"new":[1]}],` +
		`"intervals":[{"tid":1,"state":"blocked","reason":"disk","device":"nvme0n1","start_ns":0,"end_ns":5,"cpu":-1,"wakeup":0},` +
		`{"tid":1,"state":"runqueue","reason":"throttled","start_ns":5,"end_ns":10,"cpu":-1,"wakeup":-1}],` +
		`"wakeups":[{"ts_ns":5,"wakee":1,"waker":0,"context":"ipi","detail":"x","cpu":1,"enqueued_ns":6,"later":1e3}]}`
	tl, err := DecodeBytes(gz(t, s))
	if err != nil {
		t.Fatal(err)
	}
	th, _ := tl.Thread(1)
	if th.Comm != "aé" || th.PID != 1 || !th.Target {
		t.Fatalf("thread %+v", th)
	}
	ivs := tl.threads[0].ivs
	if len(ivs) != 2 || ivs[1].kind != kThrottled || tl.details.reason[ivs[0].detail] != "disk" || tl.details.device[ivs[0].detail] != "nvme0n1" || tl.wakeups[0].ctx != cOther {
		t.Fatalf("intervals %+v wakeups %+v", ivs, tl.wakeups)
	}
}
