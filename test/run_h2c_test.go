package test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/rootline/rootline/internal/bpftest"
)

// TestRunH2cUpgrade: HTTP/2 reached by "Upgrade: h2c" (RFC 7540 §3.2)
// under the supervisor. curl --http2 sends its first request as HTTP/1.1
// with the upgrade; the traced front (golang.org/x/net/http2/h2c) answers
// 101 and then serves it as stream 1 and curl's next requests as streams 3,
// 5 and 7 on the same connection. For each, the front calls the traced leaf
// over one connection of its own that it upgraded with its first call
// (stream 1, an HTTP/1.1 request) and then uses for HTTP/2 streams. Every
// request is one trace of three spans (front SERVER, front CLIENT, leaf
// SERVER) with the right parents and stream ids, the leaf sees the trace
// context on the upgrade request and in HPACK alike, and curl gets the
// leaf's bytes unchanged.
//
// Under the in-kernel datapath, which does not follow HTTP/2, the same
// traffic passes through intact (the HTTP/2 streams carry no context) and
// each run warns once that it saw HTTP/2: after the 101, on the upgraded
// connections.
func TestRunH2cUpgrade(t *testing.T) {
	needTool(t, "go", "curl")
	forEachMode(t, func(t *testing.T) {
		ebpf := slices.Contains(runMode, "ebpf") && !slices.Contains(runMode, "ptrace")
		dir := t.TempDir()
		abs, _ := filepath.Abs(filepath.Join(svcData, "h2csvc"))
		bin := filepath.Join(dir, "h2csvc")
		buildOut(t, abs, "go", "build", "-o", bin, ".")
		col := newCollector(t)
		leaf := startSvc(t, col, "leaf", nil, bin)
		front := startSvc(t, col, "front", []string{fmt.Sprintf("CALL=127.0.0.1:%d", leaf.port)}, bin)

		const n = 4
		var traces, parents []string
		args := []string{}
		for i := 0; i < n; i++ {
			traces, parents = append(traces, randHex(16)), append(parents, randHex(8))
			if i > 0 {
				args = append(args, "--next")
			}
			args = append(args, "-sS", "--fail", "--http2", "--max-time", "20", "-w", "[%{http_version} %{num_connects}]\n",
				"-H", "traceparent: 00-"+traces[i]+"-"+parents[i]+"-01",
				fmt.Sprintf("http://127.0.0.1:%d/r%d", front.port, i))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "curl", args...).Output()
		if err != nil {
			t.Fatalf("curl: %v\n%s", err, out)
		}
		// Each answer is the leaf's body as it wrote it, then curl's line:
		// HTTP/2, one connection in all.
		answers := strings.SplitAfter(string(out), "]\n")
		if len(answers) > 0 && answers[len(answers)-1] == "" {
			answers = answers[:len(answers)-1]
		}
		if len(answers) != n {
			t.Fatalf("%d answers, want %d:\n%s", len(answers), n, out)
		}
		if ebpf {
			for i, a := range answers {
				want := "traceparent: \ntracestate: \nb3: \nproto: HTTP/2.0\n[2 0]\n"
				if i == 0 {
					// The upgrade request is HTTP/1.1: the datapath may
					// add a context to the front's.
					want = "\nproto: HTTP/1.1\n[2 1]\n"
				}
				if !strings.HasSuffix(a, want) || strings.Count(a, "\n") != 5 {
					t.Errorf("answer %d: %q, want …%q", i, a, want)
				}
			}
			for _, s := range []*svcProc{front, leaf} {
				// The run reads the datapath's events once a second.
				count := func() int {
					return strings.Count(s.out.String(), "HTTP/2 connections seen; the eBPF datapath does not trace HTTP/2")
				}
				for deadline := time.Now().Add(10 * time.Second); count() == 0 && time.Now().Before(deadline); {
					time.Sleep(100 * time.Millisecond)
				}
				if n := count(); n != 1 {
					t.Errorf("%s: %d warnings about HTTP/2, want 1:\n%s", s.name, n, s.out)
				}
			}
			return
		}
		for i, a := range answers {
			m := echoTraceparentRE.FindStringSubmatch(a)
			if m == nil || m[1] != traces[i] {
				t.Fatalf("answer %d: the leaf did not see trace %s:\n%s", i, traces[i], a)
			}
			proto, connects := "HTTP/2.0", 0
			if i == 0 {
				proto, connects = "HTTP/1.1", 1 // the request that was upgraded, on each hop
			}
			want := fmt.Sprintf("traceparent: 00-%s-%s-01\ntracestate: \nb3: %s-%s-1-", traces[i], m[2], traces[i], m[2])
			if !strings.HasPrefix(a, want) || !strings.HasSuffix(a, fmt.Sprintf("\nproto: %s\n[2 %d]\n", proto, connects)) ||
				strings.Count(a, "\n") != 5 {
				t.Errorf("answer %d: %q, want %q…proto: %s, over HTTP/2, %d new connection(s)", i, a, want, proto, connects)
			}
		}

		got := col.traces(t, traces, 3)
		for i, id := range traces {
			by := map[string]otlpSpan{}
			for _, s := range got[id] {
				by[s.Service+"/"+s.Kind.String()] = s
			}
			stream := int64(2*i + 1)
			parent := parents[i]
			for _, k := range []struct {
				svc  string
				kind ptrace.SpanKind
			}{{"front", ptrace.SpanKindServer}, {"front", ptrace.SpanKindClient}, {"leaf", ptrace.SpanKindServer}} {
				s, ok := by[k.svc+"/"+k.kind.String()]
				if !ok {
					t.Errorf("trace %d: no %s %s span: %s", i, k.svc, k.kind, describe(got[id]))
					parent = "?"
					continue
				}
				if s.Parent != parent {
					t.Errorf("trace %d: %s %s span's parent %q, want %q", i, k.svc, k.kind, s.Parent, parent)
				}
				parent = s.ID
				if s.Attrs["rootline.http2.stream_id"] != stream || s.Attrs["network.protocol.version"] != "2" ||
					s.Attrs["http.response.status_code"] != int64(200) {
					t.Errorf("trace %d: %s %s: stream %v version %v status %v, want stream %d over HTTP/2, 200", i, k.svc, k.kind,
						s.Attrs["rootline.http2.stream_id"], s.Attrs["network.protocol.version"], s.Attrs["http.response.status_code"], stream)
				}
				if k.kind == ptrace.SpanKindClient {
					if v, ok := s.Attrs["rootline.wait.remote_ms"].(float64); !ok || v < 0 {
						t.Errorf("trace %d: front CLIENT span without the leaf's timing: %v", i, s.Attrs)
					}
				}
			}
			if len(got[id]) != 3 {
				t.Errorf("trace %d: %d spans, want 3: %s", i, len(got[id]), describe(got[id]))
			}
		}
	})
}

// TestRunGRPCProtocolAuto: declared with -protocol grpc, a gRPC chain under
// the default -mode auto is traced (by the supervisor, which -mode auto
// picks then, though the eBPF datapath loads here) and says so.
func TestRunGRPCProtocolAuto(t *testing.T) {
	bpftest.RequireBPF(t)
	argv := grpcGoSvc(t, t.TempDir())
	col := newCollector(t)
	runMode = []string{"--protocol", "grpc", "--log.level", "info"}
	defer func() { runMode = nil }()
	leaf := startSvc(t, col, "leaf", nil, argv...)
	front := startSvc(t, col, "front", []string{fmt.Sprintf("CALL=127.0.0.1:%d", leaf.port)}, argv...)
	cc := grpcClient(t, front.port)
	var ids, parents []string
	for i := 0; i < 4; i++ {
		ids, parents = append(ids, randHex(16)), append(parents, randHex(8))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := grpcCall(ctx, cc, "/demo.Echo/Unary", "hello", "traceparent", "00-"+ids[i]+"-"+parents[i]+"-01")
		cancel()
		if m := echoTraceparentRE.FindStringSubmatch(out); err != nil || m == nil || m[1] != ids[i] {
			t.Fatalf("call %d: %q, %v", i, out, err)
		}
	}
	got := col.traces(t, ids, 3)
	for i, id := range ids {
		if errs := checkGRPCChain(got[id], parents[i], "/demo.Echo/Unary", 0, "front", "leaf"); len(errs) > 0 {
			t.Errorf("trace %d: %s\n%s", i, strings.Join(errs, "; "), describe(got[id]))
		}
	}
	for _, s := range []*svcProc{front, leaf} {
		if log := s.out.String(); !strings.Contains(log, "tracing with the ptrace supervisor: the eBPF datapath does not trace HTTP/2") ||
			strings.Contains(log, "HTTP/2 connections seen") {
			t.Errorf("%s: the run does not say it picked the supervisor for gRPC:\n%s", s.name, log)
		}
	}
}
