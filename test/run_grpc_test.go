package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rootline/rootline/internal/bpftest"
)

// End-to-end tests of `rootline run` with gRPC over h2c: unmodified gRPC
// services (internal/run/testdata/grpcsvc and its Java and Python twins:
// generic handlers, no tracing code, no metadata forwarding) in a chain,
// called by a grpc-go client.

// bytesCodec passes gRPC messages through as bytes.
type bytesCodec struct{}

func (bytesCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (bytesCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (bytesCodec) Name() string { return "proto" }

// grpcGoSvc builds the Go gRPC test service and returns its argv.
func grpcGoSvc(t *testing.T, dir string) []string {
	needTool(t, "go")
	abs, _ := filepath.Abs(filepath.Join(svcData, "grpcsvc"))
	bin := filepath.Join(dir, "grpcsvc")
	buildOut(t, abs, "go", "build", "-o", bin, ".")
	return []string{bin}
}

// grpcCall makes one call of method on addr with msg and metadata md, and
// returns the answers' text (a streaming method's answers joined).
func grpcCall(ctx context.Context, cc *grpc.ClientConn, method, msg string, md ...string) (string, error) {
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return "", err
	}
	b := []byte(msg)
	if err := cs.SendMsg(&b); err != nil {
		return "", err
	}
	_ = cs.CloseSend()
	var out []string
	for {
		var r []byte
		if err := cs.RecvMsg(&r); err == io.EOF {
			return strings.Join(out, ""), nil
		} else if err != nil {
			return strings.Join(out, ""), err
		}
		out = append(out, string(r))
	}
}

func grpcClient(t *testing.T, port int) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(bytesCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

var echoTraceparentRE = regexp.MustCompile(`traceparent: 00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]`)

// checkGRPCChain checks one trace's spans for a chain of gRPC hops (caller
// first): a SERVER span per hop and a CLIENT span per hop but the last, each
// the child of the one before, the first SERVER span the child of root, the
// RPC attributes, the gRPC status and the wait fields. code < 0: the call's
// deadline passed, so each stream was reset (no gRPC status) or ended with
// DEADLINE_EXCEEDED, and the wait fields are not checked.
func checkGRPCChain(spans []otlpSpan, root, method string, code int64, hops ...string) []string {
	by := map[string]otlpSpan{}
	var errs []string
	for _, s := range spans {
		k := s.Service + "/" + s.Kind.String()
		if _, dup := by[k]; dup {
			errs = append(errs, "two spans "+k)
		}
		by[k] = s
	}
	if want := 2*len(hops) - 1; len(spans) != want {
		errs = append(errs, fmt.Sprintf("%d spans, want %d", len(spans), want))
	}
	svc, meth, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	parent := root
	for i, h := range hops {
		kinds := []ptrace.SpanKind{ptrace.SpanKindServer, ptrace.SpanKindClient}
		if i == len(hops)-1 {
			kinds = kinds[:1]
		}
		for _, kind := range kinds {
			s, ok := by[h+"/"+kind.String()]
			if !ok {
				errs = append(errs, fmt.Sprintf("no %s %s span", h, kind))
				parent = "?"
				continue
			}
			if s.Parent != parent {
				errs = append(errs, fmt.Sprintf("%s %s span's parent is %q, want %q", h, kind, s.Parent, parent))
			}
			parent = s.ID
			attrs := map[string]any{"rpc.system": "grpc", "rpc.service": svc, "rpc.method": meth,
				"rpc.grpc.status_code": code, "http.request.method": "POST", "network.protocol.version": "2"}
			if code < 0 {
				// Reset by the caller, or ended by the server when the
				// propagated deadline passed (the race is the runtime's).
				if v := s.Attrs["rpc.grpc.status_code"]; v != nil && v != int64(codes.DeadlineExceeded) {
					errs = append(errs, fmt.Sprintf("%s %s rpc.grpc.status_code = %v, want none or DEADLINE_EXCEEDED", h, kind, v))
				}
				delete(attrs, "rpc.grpc.status_code")
			}
			for k, want := range attrs {
				if s.Attrs[k] != want {
					errs = append(errs, fmt.Sprintf("%s %s %s = %v, want %v", h, kind, k, s.Attrs[k], want))
				}
			}
			if s.Name != svc+"/"+meth {
				errs = append(errs, fmt.Sprintf("%s %s span name %q", h, kind, s.Name))
			}
			waits := []string{"rootline.wait.net_ms", "rootline.wait.remote_ms"}
			if kind == ptrace.SpanKindServer {
				waits = append(waits, "rootline.wait.local_ms")
			}
			if code < 0 {
				waits = nil
			}
			for _, a := range waits {
				if v, ok := s.Attrs[a].(float64); !ok || v < 0 {
					errs = append(errs, fmt.Sprintf("%s %s %s = %v", h, kind, a, s.Attrs[a]))
				}
			}
		}
	}
	return errs
}

// grpcSupervisorModes runs f in the modes that follow HTTP/2: the
// supervisor's (the in-kernel datapath passes it through:
// TestRunGRPCDatapathPassThrough).
func grpcSupervisorModes(t *testing.T, f func(*testing.T)) {
	forEachMode(t, func(t *testing.T) {
		if slices.Contains(runMode, "ebpf") && !slices.Contains(runMode, "ptrace") {
			t.Skip("the in-kernel datapath does not follow HTTP/2 (TestRunGRPCDatapathPassThrough)")
		}
		f(t)
	})
}

// TestRunGRPCChain: a grpc-go client calls a chain of three traced grpc-go
// services. Unary and server-streaming calls, calls with and without the
// caller's context, a failing leaf (a trailers-only response), and large
// metadata on the middle hop's calls: every call is one trace of five spans
// with the right parents and RPC attributes, and the leaf sees the context.
//
// "small-table": every service announces SETTINGS_HEADER_TABLE_SIZE 64, so
// its callers' HPACK encoders evict entries at almost every block, and the
// added fields must leave both tables as they were.
func TestRunGRPCChain(t *testing.T) {
	grpcSupervisorModes(t, func(t *testing.T) {
		argv := grpcGoSvc(t, t.TempDir())
		t.Run("default", func(t *testing.T) { testRunGRPCChain(t, 12000, argv, argv, argv) })
		t.Run("small-table", func(t *testing.T) {
			grpcEnv = []string{"TABLE=64"}
			defer func() { grpcEnv = nil }()
			testRunGRPCChain(t, 12000, argv, argv, argv)
		})
	})
}

// grpcEnv is added to the environment of the services testRunGRPCChain
// starts.
var grpcEnv []string

// TestRunGRPCPolyglot: the same with Python grpcio services (the generic
// handler on grpcio's thread pool; C-core writes the frames) and grpc-java
// ones (a fallback handler registry on grpc-java's executor; Netty's event
// loop writes the frames) in the chain, each language as a middle service
// (whose calls must be associated with its requests) and at the ends.
func TestRunGRPCPolyglot(t *testing.T) {
	grpcSupervisorModes(t, func(t *testing.T) {
		dir := t.TempDir()
		goArgv, pyArgv, javaArgv := grpcGoSvc(t, dir), grpcPySvc(t), grpcJavaSvc(t, dir)
		// grpcio refuses metadata past 8 KiB (its soft limit) some of
		// the time, sent or received, and grpc-java announces 8 KiB as
		// its SETTINGS_MAX_HEADER_LIST_SIZE, traced or not.
		t.Run("py-go-py", func(t *testing.T) { testRunGRPCChain(t, 6000, pyArgv, goArgv, pyArgv) })
		t.Run("go-py-go", func(t *testing.T) { testRunGRPCChain(t, 6000, goArgv, pyArgv, goArgv) })
		t.Run("go-java-py", func(t *testing.T) { testRunGRPCChain(t, 6000, goArgv, javaArgv, pyArgv) })
		t.Run("java-go-java", func(t *testing.T) { testRunGRPCChain(t, 6000, javaArgv, goArgv, javaArgv) })
	})
}

// grpcJavaSvc compiles the Java gRPC test service against the grpc-java
// jars scripts/deps.sh fetches and returns its argv.
func grpcJavaSvc(t *testing.T, dir string) []string {
	needTool(t, "javac", "java")
	lib := os.Getenv("ROOTLINE_GRPC_JAVA")
	if lib == "" {
		home, _ := os.UserHomeDir()
		lib = filepath.Join(home, ".cache", "rootline", "grpc-java-1.85.1")
	}
	if _, err := os.Stat(filepath.Join(lib, ".complete")); err != nil {
		if os.Getenv("ROOTLINE_REQUIRE_BPF") == "1" {
			t.Fatalf("grpc-java is not in %s (make deps)", lib)
		}
		t.Skipf("grpc-java is not in %s (make deps)", lib)
	}
	abs, _ := filepath.Abs(filepath.Join(svcData, "GrpcSvc.java"))
	cp := filepath.Join(lib, "*")
	buildOut(t, dir, "javac", "-cp", cp, "-d", dir, abs)
	return []string{"java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", dir + ":" + cp, "GrpcSvc"}
}

// grpcPySvc returns the argv of the Python gRPC test service, run by the
// interpreter of the venv scripts/deps.sh installs grpcio into.
func grpcPySvc(t *testing.T) []string {
	py := venvPython(t, "grpc")
	abs, _ := filepath.Abs(filepath.Join(svcData, "grpcsvc.py"))
	return []string{py, abs}
}

// testRunGRPCChain runs the chain test with those services; big is the
// metadata the middle hop adds to one call in six.
func testRunGRPCChain(t *testing.T, big int, frontArgv, midArgv, leafArgv []string) {
	col := newCollector(t)
	leaf := startSvc(t, col, "leaf", grpcEnv, leafArgv...)
	mid := startSvc(t, col, "mid", append([]string{fmt.Sprintf("CALL=127.0.0.1:%d", leaf.port)}, grpcEnv...), midArgv...)
	front := startSvc(t, col, "front", append([]string{fmt.Sprintf("CALL=127.0.0.1:%d", mid.port)}, grpcEnv...), frontArgv...)
	cc := grpcClient(t, front.port)

	var reqs []grpcSent
	for i := 0; i < 24; i++ {
		s := grpcSent{trace: randHex(16), parent: randHex(8), method: "/demo.Echo/Unary", code: 0}
		msg := "hello"
		switch {
		case i%6 == 1:
			s.method = "/demo.Echo/ListStream"
		case i%6 == 2:
			msg, s.code = "fail", 13
		case i%6 == 3:
			msg = fmt.Sprintf("meta=%d", big) // the middle hop's HEADERS past the HPACK table
		case i%6 == 4:
			s.parent = "" // no context: a trace starts at the front
		}
		var md []string
		if s.parent != "" {
			md = []string{"traceparent", "00-" + s.trace + "-" + s.parent + "-01"}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := grpcCall(ctx, cc, s.method, msg, md...)
		cancel()
		if s.code != 0 {
			if status.Code(err) != codes.Internal {
				t.Fatalf("call %d: %v, want INTERNAL", i, err)
			}
		} else if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if s.code == 0 {
			m := echoTraceparentRE.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("call %d: the leaf saw no traceparent: %q", i, out)
			}
			if s.parent == "" {
				s.trace = m[1]
			} else if m[1] != s.trace {
				t.Errorf("call %d: the leaf saw trace %s, want %s", i, m[1], s.trace)
			}
			if !strings.Contains(out, "b3: "+m[1]+"-"+m[2]) {
				t.Errorf("call %d: the leaf's b3 does not match its traceparent: %q", i, out)
			}
			if s.method == "/demo.Echo/ListStream" && strings.Count(out, "path: ") != 3 {
				t.Errorf("call %d: %d streamed answers, want 3", i, strings.Count(out, "path: "))
			}
		}
		if s.trace != "" && (s.parent != "" || s.code == 0) {
			reqs = append(reqs, s)
		}
	}
	checkGRPCCalls(t, col, reqs)
}

// grpcSent is a call a test made through the front/mid/leaf chain: its
// trace, the caller's span, the method and the gRPC status (-1: reset).
type grpcSent struct {
	trace, parent, method string
	code                  int64
}

// checkGRPCCalls checks every call's trace with checkGRPCChain.
func checkGRPCCalls(t *testing.T, col *collector, reqs []grpcSent) {
	t.Helper()
	ids := make([]string, len(reqs))
	for i, s := range reqs {
		ids[i] = s.trace
	}
	got := col.traces(t, ids, 5)
	for i, s := range reqs {
		if errs := checkGRPCChain(got[s.trace], s.parent, s.method, s.code, "front", "mid", "leaf"); len(errs) > 0 {
			t.Errorf("call %d (%s, trace %s): %s\n%s", i, s.method, s.trace, strings.Join(errs, "; "), describe(got[s.trace]))
		}
	}
}

// TestRunGRPCConcurrent: many concurrent streams on one connection through a
// traced middle service (grpc-go: the reader goroutine reads every stream,
// handlers run on goroutines of their own and one loopy goroutine writes
// every call, so only the grpc-go breakpoints tell which request a call is
// for). Every call must reach the leaf with its caller's trace, never
// another call's, and each trace must be the three spans of its call.
func TestRunGRPCConcurrent(t *testing.T) {
	grpcSupervisorModes(t, func(t *testing.T) {
		argv := grpcGoSvc(t, t.TempDir())
		testRunGRPCConcurrent(t, argv, argv, true)
	})
}

// TestRunGRPCConcurrentPython: the same with a grpcio middle service, whose
// handlers run on a thread pool while gRPC's C core writes the frames from
// whichever thread drives its event engine: no thread or breakpoint names
// the request a call is for, so concurrent calls are associated by a guess
// (docs/run.md). Nothing may fail and every call must be traced; how many
// reached the leaf with another call's trace is logged, not asserted.
func TestRunGRPCConcurrentPython(t *testing.T) {
	grpcSupervisorModes(t, func(t *testing.T) {
		testRunGRPCConcurrent(t, grpcPySvc(t), grpcGoSvc(t, t.TempDir()), false)
	})
}

// testRunGRPCConcurrent runs the concurrent test with that middle and leaf;
// exact: the middle's association must be exact.
func testRunGRPCConcurrent(t *testing.T, midArgv, leafArgv []string, exact bool) {
	col := newCollector(t)
	leaf := startSvc(t, col, "leaf", nil, leafArgv...)
	mid := startSvc(t, col, "mid", []string{fmt.Sprintf("CALL=127.0.0.1:%d", leaf.port)}, midArgv...)
	cc := grpcClient(t, mid.port)
	const workers, per = 8, 15
	var mu sync.Mutex
	var wrong, total int
	var sent []string // trace, caller span
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				trace, parent := randHex(16), randHex(8)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				out, err := grpcCall(ctx, cc, "/demo.Echo/Unary", "sleep=5", "traceparent", "00-"+trace+"-"+parent+"-01")
				cancel()
				if err != nil {
					errs <- err
					return
				}
				m := echoTraceparentRE.FindStringSubmatch(out)
				mu.Lock()
				total++
				if m == nil || m[1] != trace {
					wrong++
				}
				sent = append(sent, trace, parent)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("call failed: %v", err)
	}
	if total != workers*per {
		t.Fatalf("%d calls made, want %d", total, workers*per)
	}
	if wrong > 0 && exact {
		t.Errorf("%d of %d concurrent calls reached the leaf with another call's trace or none", wrong, total)
	}
	if !exact {
		t.Logf("%d of %d concurrent calls reached the leaf with another call's trace or none", wrong, total)
		return
	}
	ids := make([]string, 0, len(sent)/2)
	for i := 0; i < len(sent); i += 2 {
		ids = append(ids, sent[i])
	}
	got := col.traces(t, ids, 3)
	bad := 0
	for i := 0; i < len(sent); i += 2 {
		if errs := checkGRPCChain(got[sent[i]], sent[i+1], "/demo.Echo/Unary", 0, "mid", "leaf"); len(errs) > 0 {
			if bad++; bad <= 5 {
				t.Errorf("trace %s: %s\n%s", sent[i], strings.Join(errs, "; "), describe(got[sent[i]]))
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d traces wrong", bad, len(ids))
	}
}

// TestRunGRPCDatapathPassThrough: the in-kernel datapath does not follow
// HTTP/2 (docs/run.md): a chain of gRPC services under `rootline run --mode
// ebpf` must still work exactly as untraced, every call answered intact,
// nothing added to what the services see, and no span made of them. Each
// run says so: one warning naming -mode ptrace, however many connections,
// and its metrics count the HTTP/2 connections it passed through (the
// front's two: the client's and its own to the leaf; the leaf's one).
func TestRunGRPCDatapathPassThrough(t *testing.T) {
	bpftest.RequireBPF(t)
	dir := t.TempDir()
	argv := grpcGoSvc(t, dir)
	col := newCollector(t)
	runMode = []string{"--mode", "ebpf", "--log.level", "info", "--metrics.listen", "127.0.0.1:0"}
	defer func() { runMode = nil }()
	leaf := startSvc(t, col, "leaf", nil, argv...)
	front := startSvc(t, col, "front", []string{fmt.Sprintf("CALL=127.0.0.1:%d", leaf.port)}, argv...)
	cc := grpcClient(t, front.port)
	for i := 0; i < 20; i++ {
		method, n := "/demo.Echo/Unary", 1
		if i%2 == 1 {
			method, n = "/demo.Echo/ListStream", 3
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := grpcCall(ctx, cc, method, "meta=100", "traceparent", "00-"+randHex(16)+"-"+randHex(8)+"-01")
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		want := strings.Repeat("path: "+method+"\ntraceparent: \ntracestate: \nb3: \n", n)
		if out != want {
			t.Fatalf("call %d: the leaf answered %q, want %q", i, out, want)
		}
	}
	// A second client connection to the front: still one warning.
	cc2 := grpcClient(t, front.port)
	if out, err := grpcCall(context.Background(), cc2, "/demo.Echo/Unary", "second"); err != nil || !strings.HasPrefix(out, "path: /demo.Echo/Unary\n") {
		t.Fatalf("call on a second connection: %q, %v", out, err)
	}
	time.Sleep(2 * time.Second) // the shipper sends once a second
	col.mu.Lock()
	if len(col.spans) > 0 {
		t.Errorf("%d spans made of HTTP/2 traffic the datapath does not follow: %s", len(col.spans), describe(col.spans))
	}
	col.mu.Unlock()
	for _, c := range []struct {
		s    *svcProc
		want int
	}{{front, 3}, {leaf, 1}} {
		log := c.s.out.String()
		if n := strings.Count(log, "HTTP/2 connections seen; the eBPF datapath does not trace HTTP/2"); n != 1 {
			t.Errorf("%s: %d warnings about HTTP/2, want 1:\n%s", c.s.name, n, log)
		}
		if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "-mode ptrace") {
			t.Errorf("%s: the warning is not a warning naming -mode ptrace:\n%s", c.s.name, log)
		}
		m := metricsURL.FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("%s: no metrics listener in the log:\n%s", c.s.name, log)
		}
		body := httpGetBody(t, m[1])
		want := fmt.Sprintf("rootline_run_http2_untraced_connections_total %d\n", c.want)
		if !strings.Contains(body, want) {
			t.Errorf("%s: metrics lack %q:\n%s", c.s.name, want, grepLines(body, "rootline_run_"))
		}
	}
}

// httpGetBody returns the body of a GET of url that must answer 200.
func httpGetBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRunGRPCReset: the caller's deadline passes during a server-streaming
// call while the leaf is still working; the cancellation travels down the
// chain as RST_STREAM frames (or a hop ends its stream with
// DEADLINE_EXCEEDED first, the deadline having been propagated). Every
// hop's span ends in the caller's trace, and the calls made next on the
// same connections are answered and traced as usual.
func TestRunGRPCReset(t *testing.T) {
	grpcSupervisorModes(t, func(t *testing.T) {
		argv := grpcGoSvc(t, t.TempDir())
		col := newCollector(t)
		leaf := startSvc(t, col, "leaf", nil, argv...)
		mid := startSvc(t, col, "mid", []string{fmt.Sprintf("CALL=127.0.0.1:%d", leaf.port)}, argv...)
		front := startSvc(t, col, "front", []string{fmt.Sprintf("CALL=127.0.0.1:%d", mid.port)}, argv...)
		cc := grpcClient(t, front.port)
		var reqs []grpcSent
		for i := 0; i < 6; i++ {
			s := grpcSent{trace: randHex(16), parent: randHex(8), method: "/demo.Echo/ListStream"}
			md := []string{"traceparent", "00-" + s.trace + "-" + s.parent + "-01"}
			if i%2 == 0 {
				s.code = -1
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				_, err := grpcCall(ctx, cc, "/demo.Echo/ListStream", "sleep=1500", md...)
				cancel()
				if status.Code(err) != codes.DeadlineExceeded {
					t.Fatalf("call %d: %v, want DEADLINE_EXCEEDED", i, err)
				}
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				out, err := grpcCall(ctx, cc, "/demo.Echo/ListStream", "hello", md...)
				cancel()
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if m := echoTraceparentRE.FindStringSubmatch(out); m == nil || m[1] != s.trace || strings.Count(out, "path: ") != 3 {
					t.Fatalf("call %d: answered %q", i, out)
				}
			}
			reqs = append(reqs, s)
		}
		checkGRPCCalls(t, col, reqs)
	})
}

// TestRunGRPCConcurrentJava: the same with a grpc-java middle service, whose
// handlers run on its executor's threads while Netty's event loop thread
// reads and writes every frame of a connection: concurrent calls are
// associated by a guess (docs/run.md); nothing may fail and every call must
// be traced; the mis-association is logged, not asserted.
func TestRunGRPCConcurrentJava(t *testing.T) {
	grpcSupervisorModes(t, func(t *testing.T) {
		dir := t.TempDir()
		testRunGRPCConcurrent(t, grpcJavaSvc(t, dir), grpcGoSvc(t, dir), false)
	})
}

// TestRunGRPCGoAway: the leaf answers a call and then stops gracefully
// (GOAWAY, then it closes the connection and exits). The traced middle
// service's calls until then are whole traces; the call it then fails to
// make (the leaf is gone) is its SERVER span alone with UNAVAILABLE, and it
// goes on serving.
func TestRunGRPCGoAway(t *testing.T) {
	grpcSupervisorModes(t, func(t *testing.T) {
		argv := grpcGoSvc(t, t.TempDir())
		col := newCollector(t)
		leaf := startSvc(t, col, "leaf", nil, argv...)
		mid := startSvc(t, col, "mid", []string{fmt.Sprintf("CALL=127.0.0.1:%d", leaf.port)}, argv...)
		cc := grpcClient(t, mid.port)
		call := func(msg string) (grpcSent, string, error) {
			s := grpcSent{trace: randHex(16), parent: randHex(8), method: "/demo.Echo/Unary"}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := grpcCall(ctx, cc, s.method, msg, "traceparent", "00-"+s.trace+"-"+s.parent+"-01")
			return s, out, err
		}
		var whole []grpcSent
		for _, msg := range []string{"hello", "hello", "goaway"} {
			s, out, err := call(msg)
			if err != nil {
				t.Fatalf("%s: %v", msg, err)
			}
			if m := echoTraceparentRE.FindStringSubmatch(out); m == nil || m[1] != s.trace {
				t.Fatalf("%s: answered %q", msg, out)
			}
			whole = append(whole, s)
		}
		select {
		case <-leaf.exited:
		case <-time.After(20 * time.Second):
			t.Fatal("the leaf did not exit after GOAWAY")
		}
		failed, _, err := call("hello")
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call after the leaf left: %v, want UNAVAILABLE", err)
		}
		var ids []string
		for _, s := range whole {
			ids = append(ids, s.trace)
		}
		got := col.traces(t, ids, 3)
		got[failed.trace] = col.traces(t, []string{failed.trace}, 1)[failed.trace]
		for i, s := range whole {
			if errs := checkGRPCChain(got[s.trace], s.parent, s.method, 0, "mid", "leaf"); len(errs) > 0 {
				t.Errorf("call %d (trace %s): %s\n%s", i, s.trace, strings.Join(errs, "; "), describe(got[s.trace]))
			}
		}
		if sp := got[failed.trace]; len(sp) != 1 || sp[0].Service != "mid" || sp[0].Kind != ptrace.SpanKindServer ||
			sp[0].Parent != failed.parent || sp[0].Attrs["rpc.grpc.status_code"] != int64(codes.Unavailable) {
			t.Errorf("the failed call's trace: %s %v", describe(sp), sp)
		}
		if !mid.alive() {
			t.Error("the middle service exited")
		}
	})
}
