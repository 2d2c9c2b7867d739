package test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/run/httpstream"
)

// TestRunSocketWait: a callee under `rootline run --mode ebpf` that leaves
// each request in its socket for at least delay before it reads it (it
// polls until the bytes are there, then sleeps), called directly and
// through a middle service also under `rootline run`. The time in the
// callee's socket is the callee's: its server time (the rl field) and its local
// wait hold at least delay (the span starts at the request's arrival, not
// at the read), for keep-alive, pipelined and fresh connections, and the
// middle service's network wait to it does not hold it (its remote wait
// does). A caller under it that leaves each response in its socket for
// delay before it reads it: that time is the caller's, not the network's
// (its call's network wait does not hold it).
func TestRunSocketWait(t *testing.T) {
	requireTracing(t)
	bpftest.RequireBPF(t)
	const delay = 80 * time.Millisecond
	py := func(name string) string {
		p, err := filepath.Abs("../internal/run/testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	runMode = []string{"--mode", "ebpf"}
	defer func() { runMode = nil }()
	_, calleePort := startTraced(t, []string{"LISTEN=127.0.0.1:0", fmt.Sprintf("DELAY_MS=%d", delay.Milliseconds())}, true,
		[]string{"--service", "slow-reader", "--server", ""}, "python3", py("slowread.py"))
	_, midPort := startTraced(t, []string{"LISTEN=127.0.0.1:0", fmt.Sprintf("CALL=http://127.0.0.1:%d", calleePort)}, true,
		[]string{"--service", "mid", "--server", ""}, "python3", py("svc.py"))
	_, leafPort := startTraced(t, []string{"LISTEN=127.0.0.1:0"}, true,
		[]string{"--service", "leaf", "--server", ""}, "python3", py("svc.py"))
	_, slowCallerPort := startTraced(t, []string{"LISTEN=127.0.0.1:0", fmt.Sprintf("DELAY_MS=%d", delay.Milliseconds()),
		fmt.Sprintf("CALL=127.0.0.1:%d", leafPort)}, true,
		[]string{"--service", "slow-caller", "--server", ""}, "python3", py("slowread.py"))

	t.Run("keep-alive", func(t *testing.T) {
		client := &http.Client{Timeout: 30 * time.Second}
		for i := range 8 {
			sent := time.Now()
			resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/r%d", calleePort, i))
			if err != nil {
				t.Fatal(err)
			}
			total := time.Since(sent)
			resp.Body.Close()
			st, w := timingOf(t, resp.Header)
			t.Logf("request %d: client %v, server time %v, local wait %v", i, total, st, w["local"])
			// The callee read each request at least delay after its bytes
			// were in the socket; the server time runs from their arrival
			// to the response, so it holds the delay, and the client
			// (which sent before they arrived) saw at least as long.
			if st < delay || w["local"] < delay {
				t.Errorf("request %d: server time %v, local wait %v: want ≥ %v (the time in the socket)", i, st, w["local"], delay)
			}
			if st > total {
				t.Errorf("request %d: server time %v longer than the client's %v: the start is before the request was sent", i, st, total)
			}
		}
	})

	t.Run("pipelined", func(t *testing.T) {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", calleePort))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		// Three requests in one write: they arrive together and wait together.
		sent := time.Now()
		if _, err := c.Write([]byte(strings.Repeat("GET /p HTTP/1.1\r\nHost: x\r\n\r\n", 3))); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		for i := range 3 {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			total := time.Since(sent)
			st, w := timingOf(t, resp.Header)
			t.Logf("pipelined %d: client %v, server time %v, local wait %v", i, total, st, w["local"])
			if st < delay || w["local"] < delay || st > total {
				t.Errorf("pipelined %d: server time %v, local wait %v (client %v): want both ≥ %v and ≤ the client's", i, st, w["local"], total, delay)
			}
		}
	})

	t.Run("through-mid", func(t *testing.T) {
		// The middle service opens a connection per call: the callee's
		// bytes arrive on a connection it has not read from yet.
		client := &http.Client{Timeout: 30 * time.Second}
		var nets []time.Duration
		for i := range 8 {
			resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/m%d", midPort, i))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			_, w := timingOf(t, resp.Header)
			t.Logf("via mid %d: mid's net wait %v, remote wait %v", i, w["net"], w["remote"])
			if w["remote"] < delay {
				t.Errorf("via mid %d: remote wait %v: want ≥ %v (the callee's local wait)", i, w["remote"], delay)
			}
			nets = append(nets, w["net"])
		}
		// Before the callee's spans started at the arrival, each call's
		// network wait held the whole delay. Loopback and the two
		// processes' scheduling stay well under half of it even on a busy
		// machine (the median of 8).
		sort.Slice(nets, func(i, j int) bool { return nets[i] < nets[j] })
		if med := nets[len(nets)/2]; med >= delay/2 {
			t.Errorf("mid's median network wait to the slow reader %v: the time in the callee's socket (≥ %v) is still counted as network", med, delay)
		}
	})

	t.Run("slow-caller", func(t *testing.T) {
		// The caller reads each response delay after it arrived: its
		// server time holds the delay, its call's network wait does not.
		client := &http.Client{Timeout: 30 * time.Second}
		var nets []time.Duration
		for i := range 8 {
			resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/c%d", slowCallerPort, i))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			st, w := timingOf(t, resp.Header)
			t.Logf("slow caller %d: server time %v, net wait %v", i, st, w["net"])
			if st < delay {
				t.Errorf("slow caller %d: server time %v, want ≥ %v", i, st, delay)
			}
			nets = append(nets, w["net"])
		}
		sort.Slice(nets, func(i, j int) bool { return nets[i] < nets[j] })
		if med := nets[len(nets)/2]; med >= delay/2 {
			t.Errorf("slow caller's median network wait %v: the time the response waited in its own socket (≥ %v) is counted as network", med, delay)
		}
	})
}

// timingOf reads the timing fields of a response, in either form
// (httpstream.HeaderCompact): its server time and its waits by kind.
func timingOf(t *testing.T, h http.Header) (time.Duration, map[string]time.Duration) {
	t.Helper()
	tm, err := httpstream.ParseTiming(streamHeaders(h))
	if err != nil || !tm.HasServerTime {
		t.Fatalf("timing fields %q %q %q: %v (no server time: %v)", h.Values(httpstream.HeaderCompact),
			h.Values(httpstream.HeaderServerTime), h.Values(httpstream.HeaderWait), err, !tm.HasServerTime)
	}
	w := map[string]time.Duration{}
	for _, x := range tm.Waits {
		w[x.Kind.String()] = max(w[x.Kind.String()], x.Duration)
	}
	return tm.ServerTime, w
}

// hasTiming reports whether a response carries timing fields that give a
// server time, in either form.
func hasTiming(h http.Header) bool {
	tm, err := httpstream.ParseTiming(streamHeaders(h))
	return err == nil && tm.HasServerTime
}

// anyTiming reports whether a response carries a timing field at all.
func anyTiming(h http.Header) bool {
	return h.Get(httpstream.HeaderCompact) != "" || h.Get(httpstream.HeaderServerTime) != "" || h.Get(httpstream.HeaderWait) != ""
}

// timingNames are the names of the timing fields of both forms, for
// stripAdded.
var timingNames = map[string]bool{httpstream.HeaderCompact: true, httpstream.HeaderServerTime: true, httpstream.HeaderWait: true}

func streamHeaders(h http.Header) httpstream.Headers {
	var out httpstream.Headers
	for name, vs := range h {
		for _, v := range vs {
			out = append(out, httpstream.Header{Name: []byte(name), Value: []byte(v)})
		}
	}
	return out
}
