package test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/rootline/rootline/internal/bpftest"
)

// End-to-end tests of `rootline run -- CMD` (issue #3): unmodified services
// in Go, Java, Python and C (internal/run/testdata: no tracing code, no
// header forwarding) run under the supervisor, with an in-test OTLP/HTTP
// collector as --server.

const svcData = "../internal/run/testdata"

// traceWait bounds how long spans may take to reach the collector.
var traceWait = 30 * time.Second

// ---- the in-test collector ----

// otlpSpan is what the tests read of a received span.
type otlpSpan struct {
	Trace, ID, Parent string
	Kind              ptrace.SpanKind
	Service           string
	PID               int64
	Name              string
	Start, End        time.Time
	Attrs             map[string]any
}

// collector is an OTLP/HTTP receiver of protobuf trace exports.
type collector struct {
	URL   string
	mu    sync.Mutex
	spans []otlpSpan
	bad   []string
}

// gunzipBody inflates a gzip request body, bounded like the server's
// receivers would (64 MiB).
func gunzipBody(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	return out, nil
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		// rootline run gzips its batches (OTLP/HTTP allows gzip): read
		// them as any collector does.
		if err == nil && r.Header.Get("Content-Encoding") == "gzip" {
			body, err = gunzipBody(body)
		}
		if err == nil && (r.Method != http.MethodPost || r.URL.Path != "/v1/traces") {
			err = fmt.Errorf("%s %s", r.Method, r.URL.Path)
		}
		if err == nil && r.Header.Get("Content-Type") != "application/x-protobuf" {
			err = fmt.Errorf("content-type %q", r.Header.Get("Content-Type"))
		}
		req := ptraceotlp.NewExportRequest()
		if err == nil {
			err = req.UnmarshalProto(body)
		}
		if err != nil {
			c.mu.Lock()
			c.bad = append(c.bad, err.Error())
			c.mu.Unlock()
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var got []otlpSpan
		rss := req.Traces().ResourceSpans()
		for i := 0; i < rss.Len(); i++ {
			rs := rss.At(i)
			res := rs.Resource().Attributes()
			var service string
			var pid int64
			if v, ok := res.Get("service.name"); ok {
				service = v.Str()
			}
			if v, ok := res.Get("process.pid"); ok {
				pid = v.Int()
			}
			for j := 0; j < rs.ScopeSpans().Len(); j++ {
				ss := rs.ScopeSpans().At(j).Spans()
				for k := 0; k < ss.Len(); k++ {
					s := ss.At(k)
					sp := otlpSpan{Kind: s.Kind(), Service: service, PID: pid, Name: s.Name(), Attrs: s.Attributes().AsRaw(),
						Start: s.StartTimestamp().AsTime(), End: s.EndTimestamp().AsTime()}
					tid, sid, psid := s.TraceID(), s.SpanID(), s.ParentSpanID()
					sp.Trace, sp.ID = hex.EncodeToString(tid[:]), hex.EncodeToString(sid[:])
					if !psid.IsEmpty() {
						sp.Parent = hex.EncodeToString(psid[:])
					}
					got = append(got, sp)
				}
			}
		}
		c.mu.Lock()
		c.spans = append(c.spans, got...)
		c.mu.Unlock()
		out, _ := ptraceotlp.NewExportResponse().MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

// traces waits until every trace in ids has at least want spans and returns
// the spans of those traces. The deadline only bounds delivery (the shipper
// batches for up to a second).
func (c *collector) traces(t *testing.T, ids []string, want int) map[string][]otlpSpan {
	t.Helper()
	deadline := time.Now().Add(traceWait)
	for {
		c.mu.Lock()
		by := map[string][]otlpSpan{}
		for _, s := range c.spans {
			by[s.Trace] = append(by[s.Trace], s)
		}
		bad := append([]string(nil), c.bad...)
		c.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("collector rejected exports: %v", bad)
		}
		short := 0
		for _, id := range ids {
			if len(by[id]) < want {
				short++
			}
		}
		if short == 0 {
			out := make(map[string][]otlpSpan, len(ids))
			for _, id := range ids {
				out[id] = by[id]
			}
			return out
		}
		if time.Now().After(deadline) {
			var ex []string
			for _, id := range ids {
				if len(by[id]) < want && len(ex) < 5 {
					ex = append(ex, fmt.Sprintf("%s: %s", id, describe(by[id])))
				}
			}
			t.Fatalf("%d of %d traces have fewer than %d spans after %s; e.g.\n%s", short, len(ids), want, traceWait, strings.Join(ex, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// strays returns the spans whose trace is not in ids.
func (c *collector) strays(ids []string) []otlpSpan {
	known := map[string]bool{}
	for _, id := range ids {
		known[id] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []otlpSpan
	for _, s := range c.spans {
		if !known[s.Trace] {
			out = append(out, s)
		}
	}
	return out
}

func describe(spans []otlpSpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "[%s %s %s id=%s parent=%s pid=%d tid=%v] ", s.Service, s.Kind, s.Name, s.ID, s.Parent, s.PID, s.Attrs["thread.id"])
	}
	return b.String()
}

// checkChain checks that one trace's spans are the chain hops (service names,
// caller first): a SERVER span per hop and a CLIENT span per hop but the
// last, each the child of the one before, the first SERVER span the child of
// root (the caller's span id; "" for none). It returns the spans by
// "service/SERVER" and "service/CLIENT", and what is wrong.
func checkChain(spans []otlpSpan, root string, hops ...string) (map[string]otlpSpan, []string) {
	by := map[string]otlpSpan{}
	var errs []string
	for _, s := range spans {
		k := s.Service + "/" + s.Kind.String()
		switch s.Kind {
		case ptrace.SpanKindServer:
			k = s.Service + "/SERVER"
		case ptrace.SpanKindClient:
			k = s.Service + "/CLIENT"
		}
		if _, dup := by[k]; dup {
			errs = append(errs, "two spans "+k)
		}
		by[k] = s
	}
	if want := 2*len(hops) - 1; len(spans) != want {
		errs = append(errs, fmt.Sprintf("%d spans, want %d", len(spans), want))
	}
	parent := root
	for i, h := range hops {
		kinds := []string{"SERVER", "CLIENT"}
		if i == len(hops)-1 {
			kinds = kinds[:1]
		}
		for _, kind := range kinds {
			s, ok := by[h+"/"+kind]
			if !ok {
				errs = append(errs, "no "+h+" "+kind+" span")
				parent = "?"
				continue
			}
			if s.Parent != parent {
				errs = append(errs, fmt.Sprintf("%s %s span's parent is %q, want %q", h, kind, s.Parent, parent))
			}
			parent = s.ID
			if v := s.Attrs["http.request.method"]; v != "GET" {
				errs = append(errs, fmt.Sprintf("%s %s http.request.method = %v", h, kind, v))
			}
			if v := s.Attrs["http.response.status_code"]; v != int64(200) {
				errs = append(errs, fmt.Sprintf("%s %s http.response.status_code = %v", h, kind, v))
			}
			waits := []string{"rootline.wait.net_ms", "rootline.wait.remote_ms"}
			if kind == "SERVER" {
				waits = append(waits, "rootline.wait.local_ms")
			}
			for _, a := range waits {
				if v, ok := s.Attrs[a].(float64); !ok || v < 0 {
					errs = append(errs, fmt.Sprintf("%s %s %s = %v", h, kind, a, s.Attrs[a]))
				}
			}
		}
	}
	return by, errs
}

// ---- services ----

func needTool(t *testing.T, names ...string) {
	t.Helper()
	bpftest.RequireTools(t, names...)
}

func buildOut(t *testing.T, dir string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// goSvc, javaSvc, cSvc and pySvc build a test service and return its argv.
func goSvc(t *testing.T, dir string) []string {
	needTool(t, "go")
	abs, _ := filepath.Abs(svcData)
	bin := filepath.Join(dir, "gosvc")
	buildOut(t, filepath.Join(abs, "gosvc"), "go", "build", "-o", bin, ".")
	return []string{bin}
}

func javaSvc(t *testing.T, dir string) []string {
	needTool(t, "javac", "java")
	abs, _ := filepath.Abs(filepath.Join(svcData, "JSvc.java"))
	buildOut(t, dir, "javac", "-d", dir, abs)
	return []string{"java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", dir, "JSvc"}
}

func cSvc(t *testing.T, dir string) []string {
	needTool(t, "gcc")
	abs, _ := filepath.Abs(filepath.Join(svcData, "csvc.c"))
	bin := filepath.Join(dir, "csvc")
	buildOut(t, dir, "gcc", "-O2", "-Wall", "-pthread", "-o", bin, abs)
	return []string{bin}
}

func pySvc(t *testing.T) []string {
	needTool(t, "python3")
	abs, _ := filepath.Abs(filepath.Join(svcData, "svc.py"))
	return []string{"python3", abs}
}

// svcProc is a running test service, under rootline run or not.
type svcProc struct {
	name   string
	port   int
	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{}
	err    error
}

func (s *svcProc) url() string { return "http://127.0.0.1:" + strconv.Itoa(s.port) }

// alive reports whether the process (rootline run, or the service) runs.
func (s *svcProc) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// startSvc starts argv with LISTEN=127.0.0.1:0 and env, under `rootline run
// --service name --server col --agent ""` unless col is nil, and waits for
// its "listening <port>" line.
func startSvc(t *testing.T, col *collector, name string, env []string, argv ...string) *svcProc {
	t.Helper()
	if col != nil {
		run := append(append([]string{rootlineBin(t), "run"}, runMode...), "--service", name, "--server", col.URL, "--agent", "", "--")
		argv = append(run, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), "LISTEN=127.0.0.1:0", "PYTHONUNBUFFERED=1"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // forked children are cleaned up with the group
	s := &svcProc{name: name, cmd: cmd, out: &lockedBuffer{}, exited: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = s.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	port := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(s.out, line)
			if p, ok := strings.CutPrefix(line, "listening "); ok {
				if n, err := strconv.Atoi(strings.TrimSpace(p)); err == nil {
					select {
					case port <- n:
					default:
					}
				}
			}
		}
		_, _ = io.Copy(s.out, stdout)
		s.err = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		if s.alive() {
			_ = cmd.Process.Signal(syscall.SIGTERM) // rootline run forwards it and flushes its spans
			select {
			case <-s.exited:
			case <-time.After(15 * time.Second):
				t.Errorf("%s did not exit within 15s of SIGTERM", name)
			}
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
		if t.Failed() {
			t.Logf("%s (traced=%v) output:\n%s", name, col != nil, s.out)
		}
	})
	select {
	case s.port = <-port:
	case <-s.exited:
		t.Fatalf("%s exited before listening: %v\n%s", name, s.err, s.out)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s not listening after 60s\n%s", name, s.out)
	}
	return s
}

// ---- requests ----

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// echoed parses a leaf's body: one "name: value" line per trace header.
func echoed(body []byte) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(string(body), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			m[k] = v
		} else if k, ok := strings.CutSuffix(line, ":"); ok {
			m[k] = ""
		}
	}
	return m
}

var traceparentRE = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-01$`)

// get sends GET url with the given traceparent (none if empty) and returns
// the leaf's echo and the response headers.
func get(client *http.Client, url, tp string) (map[string]string, http.Header, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	if tp != "" {
		req.Header.Set("traceparent", tp)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != 200 {
		return nil, nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	return echoed(body), resp.Header, nil
}

// checkEcho checks the headers a leaf received for a request of trace
// trace: the trace id in every form, and returns the parent span id the
// leaf saw (the last hop's CLIENT span).
func checkEcho(e map[string]string, trace string) (string, error) {
	m := traceparentRE.FindStringSubmatch(e["traceparent"])
	if m == nil {
		return "", fmt.Errorf("leaf got traceparent %q", e["traceparent"])
	}
	if m[1] != trace {
		return "", fmt.Errorf("leaf got trace %s, want %s (cross-talk or lost context)", m[1], trace)
	}
	if !strings.HasPrefix(e["b3"], trace+"-"+m[2]+"-") {
		return "", fmt.Errorf("leaf got b3 %q with traceparent %q", e["b3"], e["traceparent"])
	}
	if e["x-b3-traceid"] != trace || e["x-b3-spanid"] != m[2] {
		return "", fmt.Errorf("leaf got x-b3-traceid %q x-b3-spanid %q with traceparent %q", e["x-b3-traceid"], e["x-b3-spanid"], e["traceparent"])
	}
	if e["x-request-id"] == "" {
		return "", errors.New("leaf got no x-request-id")
	}
	return m[2], nil
}

// keepAliveClient is a client with one keep-alive connection.
func keepAliveClient() *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true}}
}

// ---- tests ----

// TestRunPolyglotChain: go → java → python → c, each under rootline run, with
// no header forwarding in any of them: every request's trace is one complete
// trace with every hop's parent right.
func TestRunPolyglotChain(t *testing.T) { forEachMode(t, testRunPolyglotChain) }

func testRunPolyglotChain(t *testing.T) {
	dir := t.TempDir()
	goArgv, javaArgv, cArgv, pyArgv := goSvc(t, dir), javaSvc(t, dir), cSvc(t, dir), pySvc(t)
	col := newCollector(t)
	leaf := startSvc(t, col, "c", nil, cArgv...)
	py := startSvc(t, col, "python", []string{"CALL=" + leaf.url()}, pyArgv...)
	jv := startSvc(t, col, "java", []string{"CALL=" + py.url()}, javaArgv...)
	gs := startSvc(t, col, "go", []string{"CALL=" + jv.url()}, goArgv...)

	type sent struct {
		trace, parent string // parent: the client's span id, "" when none was sent
		leafParent    string
	}
	var reqs []sent
	client := keepAliveClient()
	for i := 0; i < 25; i++ {
		s := sent{}
		tp := ""
		if i < 20 {
			s.trace, s.parent = randHex(16), randHex(8)
			tp = "00-" + s.trace + "-" + s.parent + "-01"
		}
		e, h, err := get(client, fmt.Sprintf("%s/poly/%d?q=%d", gs.url(), i, i), tp)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if s.trace == "" {
			m := traceparentRE.FindStringSubmatch(e["traceparent"])
			if m == nil {
				t.Fatalf("request %d without context: leaf got traceparent %q", i, e["traceparent"])
			}
			s.trace = m[1]
		}
		if s.leafParent, err = checkEcho(e, s.trace); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
		if !hasTiming(h) {
			t.Errorf("request %d: response lacks the timing fields: %v", i, h)
		}
		reqs = append(reqs, s)
	}
	ids := make([]string, len(reqs))
	seen := map[string]bool{}
	for i, s := range reqs {
		ids[i] = s.trace
		if seen[s.trace] {
			t.Errorf("trace %s used by two requests", s.trace)
		}
		seen[s.trace] = true
	}
	got := col.traces(t, ids, 7)
	for i, s := range reqs {
		by, errs := checkChain(got[s.trace], s.parent, "go", "java", "python", "c")
		if c, ok := by["python/CLIENT"]; ok && c.ID != s.leafParent {
			errs = append(errs, fmt.Sprintf("leaf saw parent %s, python CLIENT span is %s", s.leafParent, c.ID))
		}
		if len(errs) > 0 {
			t.Errorf("request %d (trace %s, incoming parent %q): %s\n%s", i, s.trace, s.parent, strings.Join(errs, "; "), describe(got[s.trace]))
		}
	}
	for _, svc := range []string{"go", "java", "python", "c"} {
		checkSequential(t, got, ids, svc)
	}
	if st := col.strays(ids); len(st) > 0 {
		t.Errorf("%d spans outside the requests' traces: %s", len(st), describe(st))
	}
}

// middleRun sends clients×perClient requests with distinct trace ids through
// mid (whose downstream is a traced leaf named leafName), each client on one
// keep-alive connection, and checks every echo and every trace. It returns
// the traces' spans and, per client, the trace ids it sent.
func middleRun(t *testing.T, col *collector, mid *svcProc, leafName string, clients, perClient int) (map[string][]otlpSpan, [][]string) {
	t.Helper()
	type result struct {
		trace, parent, leafParent string
		err                       error
	}
	results := make([][]result, clients)
	reused := make([]int, clients)
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			client := keepAliveClient()
			defer client.CloseIdleConnections()
			for i := 0; i < perClient; i++ {
				r := result{trace: randHex(16), parent: randHex(8)}
				req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/c%d/r%d", mid.url(), c, i), nil)
				req.Header.Set("traceparent", "00-"+r.trace+"-"+r.parent+"-01")
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
					GotConn: func(ci httptrace.GotConnInfo) {
						if ci.Reused {
							reused[c]++
						}
					}}))
				resp, err := client.Do(req)
				if err == nil {
					var body []byte
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("%s: %s", resp.Status, body)
					}
					if err == nil {
						r.leafParent, err = checkEcho(echoed(body), r.trace)
					}
				}
				r.err = err
				results[c] = append(results[c], r)
			}
		}(c)
	}
	wg.Wait()
	var ids []string
	perClientIDs := make([][]string, clients)
	failed := 0
	for c, rs := range results {
		for i, r := range rs {
			if r.err != nil {
				failed++
				if failed <= 5 {
					t.Errorf("client %d request %d: %v", c, i, r.err)
				}
				continue
			}
			ids = append(ids, r.trace)
			perClientIDs[c] = append(perClientIDs[c], r.trace)
		}
		if reused[c] != perClient-1 {
			t.Errorf("client %d reused its connection %d times, want %d (keep-alive)", c, reused[c], perClient-1)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d requests failed or got another request's context", failed, clients*perClient)
	}
	got := col.traces(t, ids, 3)
	bad := 0
	for _, rs := range results {
		for _, r := range rs {
			by, errs := checkChain(got[r.trace], r.parent, mid.name, leafName)
			if cl, ok := by[mid.name+"/CLIENT"]; ok && cl.ID != r.leafParent {
				errs = append(errs, fmt.Sprintf("leaf saw parent %s, %s CLIENT span is %s", r.leafParent, mid.name, cl.ID))
			}
			if len(errs) > 0 {
				if bad++; bad <= 5 {
					t.Errorf("trace %s: %s\n%s", r.trace, strings.Join(errs, "; "), describe(got[r.trace]))
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d traces incomplete or mis-parented", bad, len(ids))
	}
	for _, ids := range perClientIDs {
		checkSequential(t, got, ids, mid.name)
		checkSequential(t, got, ids, leafName)
	}
	return got, perClientIDs
}

// checkSequential checks, for requests sent one after the other (ids in
// order, each sent after the previous one's response arrived), that svc's
// SERVER span of each ends no later than the next one starts: the response
// was written before the client could send the next request, so a later end
// means the span was finished at the wrong message boundary. This compares
// two timestamps taken by one clock in one process, in causal order; it is
// not a timing bound.
func checkSequential(t *testing.T, got map[string][]otlpSpan, ids []string, svc string) {
	t.Helper()
	var prev otlpSpan
	for i, id := range ids {
		var cur otlpSpan
		for _, s := range got[id] {
			if s.Service == svc && s.Kind == ptrace.SpanKindServer {
				cur = s
			}
		}
		if cur.ID == "" {
			prev = otlpSpan{}
			continue
		}
		if prev.ID != "" && prev.End.After(cur.Start) {
			t.Errorf("%s SERVER span of request %d (%s) ends %s after request %d started: its response end was missed",
				svc, i-1, ids[i-1], prev.End.Sub(cur.Start), i)
		}
		prev = cur
	}
}

// TestRunConcurrentKeepAlive: 16 concurrent clients, 30 requests each on its
// own keep-alive connection, through a traced middle service (Java, Python,
// C with a thread per connection) to a traced C leaf: no request ever carries
// another request's context.
func TestRunConcurrentKeepAlive(t *testing.T) {
	requireTracing(t)
	dir := t.TempDir()
	cArgv := cSvc(t, dir)
	col := newCollector(t)
	leaf := startSvc(t, col, "leaf", nil, cArgv...)
	for _, tc := range []struct {
		name string
		argv func() []string
		env  []string
	}{
		{"java", func() []string { return javaSvc(t, dir) }, nil},
		{"python", func() []string { return pySvc(t) }, nil},
		{"c", func() []string { return cArgv }, []string{"MODE=thread"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mid := startSvc(t, col, tc.name, append([]string{"CALL=" + leaf.url()}, tc.env...), tc.argv()...)
			middleRun(t, col, mid, "leaf", 16, 30)
		})
	}
}

// TestRunForkAndSpawn: a C middle that forks a child per connection, and one
// whose handler makes the downstream call from a thread it spawns: the
// context follows into the child and the thread, and traces are complete.
func TestRunForkAndSpawn(t *testing.T) {
	requireTracing(t)
	dir := t.TempDir()
	cArgv := cSvc(t, dir)
	col := newCollector(t)
	leaf := startSvc(t, col, "leaf", nil, cArgv...)

	t.Run("fork", func(t *testing.T) {
		mid := startSvc(t, col, "cfork", []string{"CALL=" + leaf.url(), "MODE=fork"}, cArgv...)
		got, perClient := middleRun(t, col, mid, "leaf", 4, 6)
		// Each connection is served by its own child: one pid per client,
		// a different one for each.
		pids := map[int64]int{}
		for c, ids := range perClient {
			var pid int64
			for _, id := range ids {
				for _, s := range got[id] {
					if s.Service != "cfork" {
						continue
					}
					if pid == 0 {
						pid = s.PID
					} else if s.PID != pid {
						t.Errorf("client %d: spans from pids %d and %d on one connection", c, pid, s.PID)
					}
				}
			}
			if other, dup := pids[pid]; dup {
				t.Errorf("clients %d and %d served by the same pid %d; want a forked child each", other, c, pid)
			}
			pids[pid] = c
		}
	})

	t.Run("spawn", func(t *testing.T) {
		mid := startSvc(t, col, "cspawn", []string{"CALL=" + leaf.url(), "MODE=spawn"}, cArgv...)
		got, perClient := middleRun(t, col, mid, "leaf", 4, 6)
		// The call is made by the spawned thread, not the one that read the
		// request; the SERVER span lists both.
		for _, ids := range perClient {
			for _, id := range ids {
				var srv, cl otlpSpan
				for _, s := range got[id] {
					if s.Service == "cspawn" && s.Kind == ptrace.SpanKindServer {
						srv = s
					} else if s.Service == "cspawn" && s.Kind == ptrace.SpanKindClient {
						cl = s
					}
				}
				st, _ := srv.Attrs["thread.id"].(int64)
				ct, _ := cl.Attrs["thread.id"].(int64)
				if st == 0 || ct == 0 || st == ct {
					t.Errorf("trace %s: SERVER thread.id %v, CLIENT thread.id %v; want two threads", id, srv.Attrs["thread.id"], cl.Attrs["thread.id"])
					continue
				}
				tids, _ := srv.Attrs["rootline.thread.ids"].(string)
				if !strings.Contains(","+tids+",", ","+strconv.FormatInt(ct, 10)+",") {
					t.Errorf("trace %s: rootline.thread.ids %q lacks the calling thread %d", id, tids, ct)
				}
			}
		}
	})
}

// rawExchange writes b on a new connection, half-closes it and returns
// everything the server answers until it closes.
func rawExchange(addr string, b []byte) ([]byte, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(b); err != nil {
		return nil, err
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	out, err := io.ReadAll(conn)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return out, fmt.Errorf("no close within 10s: %w", err)
		}
		// A reset after the answer: report what was read, and how it ended.
		return append(out, []byte("<"+err.Error()+">")...), nil
	}
	return out, nil
}

var dateLine = regexp.MustCompile(`(?m)^Date: [^\r\n]*\r\n`)

// TestRunMalformedClient: garbage and truncated or invalid requests to a
// traced middle service get exactly the bytes the same service answers
// without rootline, nothing crashes, and a valid request afterwards is
// traced.
func TestRunMalformedClient(t *testing.T) {
	requireTracing(t)
	dir := t.TempDir()
	cArgv := cSvc(t, dir)
	col := newCollector(t)
	leaf := startSvc(t, col, "leaf", nil, cArgv...)

	garbage := make([]byte, 300)
	rng := mrand.New(mrand.NewPCG(3, 3))
	for i := range garbage {
		garbage[i] = byte(rng.UintN(256))
	}
	garbage = append(garbage, "\r\n\r\n"...)
	type tcase struct {
		name string
		req  string
	}
	common := []tcase{
		{"garbage", string(garbage)},
		{"bad request line", "GET /m HTTP/1.1 extra\r\nHost: x\r\n\r\n"},
		{"http2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
		{"nul in request line", "GET /m\x00 HTTP/1.1\r\nHost: x\r\n\r\n"},
	}
	for _, tc := range []struct {
		name  string
		argv  []string
		cases []tcase
	}{
		{"c", cArgv, append(common[:len(common):len(common)],
			tcase{"header without colon", "GET /m HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n"},
			tcase{"bad content-length", "GET /m HTTP/1.1\r\nHost: x\r\nContent-Length: 12x\r\n\r\n"},
			tcase{"truncated headers", "GET /m HTTP/1.1\r\nHost: x\r\nX-Partial: ye"},
			tcase{"truncated body", "POST /m HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nabc"},
		)},
		{"python", pySvc(t), append(common[:len(common):len(common)],
			tcase{"truncated request line", "GET /m HT"},
		)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{"CALL=" + leaf.url()}
			traced := startSvc(t, col, "mal-"+tc.name, env, tc.argv...)
			plain := startSvc(t, nil, "plain-"+tc.name, env, tc.argv...)
			for _, c := range tc.cases {
				want, err := rawExchange(strings.TrimPrefix(plain.url(), "http://"), []byte(c.req))
				if err != nil {
					t.Errorf("%s: without rootline: %v", c.name, err)
					continue
				}
				got, err := rawExchange(strings.TrimPrefix(traced.url(), "http://"), []byte(c.req))
				if err != nil {
					t.Errorf("%s: under rootline: %v (got %q)", c.name, err, got)
					continue
				}
				want, got = dateLine.ReplaceAll(want, []byte("Date: -\r\n")), dateLine.ReplaceAll(got, []byte("Date: -\r\n"))
				if !bytes.Equal(got, want) {
					t.Errorf("%s: under rootline the service answered\n%q\nwithout it\n%q", c.name, got, want)
				}
				t.Logf("%s: %q", c.name, got)
				if bytes.Contains(bytes.ToLower(got), []byte("rootline-")) {
					t.Errorf("%s: rootline headers in the answer to a malformed request: %q", c.name, got)
				}
			}
			if !traced.alive() {
				t.Fatalf("rootline run exited after the malformed requests: %v", traced.err)
			}
			// A valid request afterwards, on a new connection, is traced.
			trace, parent := randHex(16), randHex(8)
			e, h, err := get(keepAliveClient(), traced.url()+"/after", "00-"+trace+"-"+parent+"-01")
			if err != nil {
				t.Fatalf("valid request after the malformed ones: %v", err)
			}
			leafParent, err := checkEcho(e, trace)
			if err != nil {
				t.Fatal(err)
			}
			if !hasTiming(h) {
				t.Errorf("valid request after the malformed ones: no timing fields in %v", h)
			}
			got := col.traces(t, []string{trace}, 3)
			by, errs := checkChain(got[trace], parent, traced.name, "leaf")
			if cl := by[traced.name+"/CLIENT"]; cl.ID != leafParent {
				errs = append(errs, fmt.Sprintf("leaf saw parent %s, CLIENT span is %s", leafParent, cl.ID))
			}
			if len(errs) > 0 {
				t.Errorf("trace after the malformed requests: %s\n%s", strings.Join(errs, "; "), describe(got[trace]))
			}
		})
	}
}

// TestRunDatapathSurvivesKill: with the in-kernel datapath, killing
// `rootline run` itself (SIGKILL: nothing can be cleaned up) leaves the
// service running and answering, untraced: the programs go with the file
// descriptors of the killed process, the sockets with the sockhash.
func TestRunDatapathSurvivesKill(t *testing.T) {
	requireTracing(t)
	runMode = []string{"--mode", "ebpf"}
	defer func() { runMode = nil }()
	col := newCollector(t)
	svc := startSvc(t, col, "survivor", nil, pySvc(t)...)
	client := keepAliveClient()
	_, h, err := get(client, svc.url()+"/before", "")
	if err != nil {
		t.Fatal(err)
	}
	if !hasTiming(h) {
		t.Fatal("no timing fields before the kill: not traced by the datapath")
	}
	// rootline run only; the service, its child, holds the output pipe, so
	// the test's reader (and svc.exited) waits for the group's kill below.
	if err := svc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = syscall.Kill(-svc.cmd.Process.Pid, syscall.SIGKILL)
		<-svc.exited
	}()
	time.Sleep(500 * time.Millisecond)
	for i, c := range []*http.Client{client, {Timeout: 10 * time.Second}} { // the old connection and a new one
		_, h, err := get(c, svc.url()+"/after", "")
		if err != nil {
			t.Fatalf("request %d after rootline run was killed: %v", i, err)
		}
		if anyTiming(h) {
			t.Errorf("request %d after the kill still got timing fields: %v", i, h)
		}
	}
}

// TestRunDatapathInNetns: under `ip netns exec` (how the demo's pods start
// their services) /sys is mounted afresh without the cgroup file systems;
// rootline run still traces with the in-kernel datapath, not the ptrace
// fallback.
func TestRunDatapathInNetns(t *testing.T) {
	requireTracing(t)
	needTool(t, "ip")
	needTool(t, "curl")
	needTool(t, "python3")
	ns := fmt.Sprintf("rl-run-test-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, rootlineBin(t), "run", "--mode", "ebpf", "--server", "", "--agent", "",
		"--", "python3", "-m", "http.server", "--bind", "127.0.0.1", "18765")
	cmd.Dir = t.TempDir()
	cmd.WaitDelay = 5 * time.Second // the server holds the stderr pipe if rootline run dies first
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	var out []byte
	for i := 0; i < 100; i++ {
		var err error
		out, err = exec.Command("ip", "netns", "exec", ns, "curl", "-sfi", "http://127.0.0.1:18765/").Output()
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !bytes.Contains(bytes.ToLower(out), []byte("\nrl: ")) {
		t.Fatalf("the response carries no rl timing line (not traced by the datapath)\nresponse:\n%s\nrootline run:\n%s", out, stderr.String())
	}
	if s := stderr.String(); strings.Contains(s, "unavailable") || strings.Contains(s, "untraced") {
		t.Errorf("rootline run complained:\n%s", s)
	}
}

// TestRunUntracedForwardsSignals: when the datapath cannot start (here: a
// ring buffer the kernel refuses) rootline run runs the command untraced and
// still passes SIGTERM on to it, ending with its status.
func TestRunUntracedForwardsSignals(t *testing.T) {
	requireTracing(t)
	cmd := exec.Command(rootlineBin(t), "run", "--mode", "ebpf", "--datapath.buffer-bytes", strconv.Itoa(1<<40),
		"--server", "", "--agent", "", "--", "sleep", "30")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for i := 0; !strings.Contains(stderr.String(), "running untraced"); i++ {
		if i == 100 {
			t.Fatalf("no 'running untraced' message:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the command has started
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) {
			t.Errorf("exit code %d (%v), want %d: the command's death by SIGTERM", code, err, 128+int(syscall.SIGTERM))
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("rootline run did not end within 10 s of SIGTERM")
	}
}

// TestRunDeadServer: with the Rootline server down, a traced service keeps
// answering and propagating; the spans it cannot send are counted, the
// failure is logged once, and each log line names its component once.
func TestRunDeadServer(t *testing.T) {
	requireTracing(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close() // nothing listens there any more
	var mu sync.Mutex
	var parents []string
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		parents = append(parents, r.Header.Get("traceparent"))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	defer down.Close()
	cmd, port, stderr := startTracedStderr(t, []string{"LISTEN=127.0.0.1:0", "CALL=" + down.URL}, true,
		[]string{"--server", dead, "--service", "mid"}, buildTestdata(t, "gomid"))
	const n = 5
	for i := range n {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/?i=%d", port, i))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200", i, resp.StatusCode)
		}
	}
	mu.Lock()
	for i, p := range parents {
		if p == "" {
			t.Errorf("downstream request %d without traceparent: propagation stopped with the server down", i)
		}
	}
	mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	log := stderr.String()
	if c := strings.Count(log, "cannot send spans"); c != 1 {
		t.Errorf("%d 'cannot send spans' lines, want 1 (logged once):\n%s", c, log)
	}
	m := regexp.MustCompile(`spans not delivered.* failed_to_send=(\d+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no 'spans not delivered' count:\n%s", log)
	}
	if got, _ := strconv.Atoi(m[1]); got < 2*n {
		t.Errorf("failed_to_send=%d, want ≥ %d (a SERVER and a CLIENT span per request)", got, 2*n)
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.Count(line, "component=") > 1 {
			t.Errorf("a log line names its component twice: %s", line)
		}
	}
}
