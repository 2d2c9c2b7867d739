// Package test holds end-to-end tests: they run the real rootline binary
// (ROOTLINE_BIN, or one built into a temporary directory) against real
// clients and check what it stores.
package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// rootlineBin returns the binary under test, building it once if needed.
func rootlineBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ROOTLINE_BIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rootline-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "rootline")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/rootline").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// serverProc is a running `rootline server`.
type serverProc struct {
	t       *testing.T
	cmd     *exec.Cmd
	dir     string
	grpc    string
	http    string
	zipkin  string
	query   string
	logs    *lockedBuffer
	exited  chan struct{}
	exitErr error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServer runs the server on loopback with ephemeral ports over dataDir
// and waits until it is ready.
func startServer(t *testing.T, dataDir string, extra ...string) *serverProc {
	t.Helper()
	return startServerEnv(t, dataDir, nil, extra...)
}

// startServerEnv is startServer with env added to the server's environment.
func startServerEnv(t *testing.T, dataDir string, env []string, extra ...string) *serverProc {
	t.Helper()
	args := append([]string{"server", "--data-dir", dataDir, "--log.format", "json",
		"--otlp.grpc.addr", "127.0.0.1:0", "--otlp.http.addr", "127.0.0.1:0",
		"--zipkin.addr", "127.0.0.1:0", "--query.addr", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(rootlineBin(t), args...)
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	s := &serverProc{t: t, cmd: cmd, dir: dataDir, logs: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = io.MultiWriter(pw, s.logs)
	cmd.Stdout = s.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.exitErr = cmd.Wait(); pw.Close(); close(s.exited) }()
	ready := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "rootline server ready" {
				ready <- line
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case line := <-ready:
		s.grpc, s.http = line["otlp_grpc"].(string), line["otlp_http"].(string)
		s.zipkin, s.query = line["zipkin"].(string), line["query"].(string)
	case <-s.exited:
		t.Fatalf("server exited before ready: %v\n%s", s.exitErr, s.logs)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("server not ready in 30s\n%s", s.logs)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.exited
		if t.Failed() {
			t.Logf("server logs:\n%s", s.logs)
		}
	})
	return s
}

// signal sends sig and waits for the process to exit.
func (s *serverProc) signal(sig syscall.Signal) error {
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
		return s.exitErr
	case <-time.After(60 * time.Second):
		s.t.Fatalf("server did not exit within 60s after %v", sig)
		return nil
	}
}

func (s *serverProc) api(path string) string { return "http://" + s.query + path }

// getJSON fetches path from the query API into v and returns the status.
func (s *serverProc) getJSON(t *testing.T, path string, v any) int {
	t.Helper()
	resp, err := http.Get(s.api(path))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// jaegerTrace is the part of the Jaeger JSON the tests read.
type jaegerTrace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		SpanID        string `json:"spanID"`
		OperationName string `json:"operationName"`
		ProcessID     string `json:"processID"`
		Duration      int64  `json:"duration"`
		Tags          []struct {
			Key   string `json:"key"`
			Type  string `json:"type"`
			Value any    `json:"value"`
		} `json:"tags"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

type jaegerResponse struct {
	Data []jaegerTrace `json:"data"`
}

// traceSpec describes a generated trace: one span per entry.
type spanSpec struct {
	service  string
	name     string
	duration time.Duration
	res      map[string]any
	status   ptrace.StatusCode
}

// makeTrace builds one trace whose spans form a chain (each the child of the
// previous), all starting at start.
func makeTrace(traceID pcommon.TraceID, start time.Time, specs ...spanSpec) ptrace.Traces {
	td := ptrace.NewTraces()
	var parent pcommon.SpanID
	for i, sp := range specs {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", sp.service)
		for k, v := range sp.res {
			switch v := v.(type) {
			case string:
				rs.Resource().Attributes().PutStr(k, v)
			case int:
				rs.Resource().Attributes().PutInt(k, int64(v))
			}
		}
		s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		s.SetTraceID(traceID)
		sid := pcommon.SpanID{byte(i + 1), traceID[0], traceID[1], traceID[2], traceID[3], traceID[4], traceID[5], 7}
		s.SetSpanID(sid)
		s.SetParentSpanID(parent)
		s.SetName(sp.name)
		s.SetKind(ptrace.SpanKindServer)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(sp.duration)))
		s.Status().SetCode(sp.status)
		s.Attributes().PutStr("test.attr", "v")
		parent = sid
	}
	return td
}

// postOTLP sends td to the OTLP/HTTP receiver as protobuf and returns the
// status code and Retry-After header.
func postOTLP(ctx context.Context, addr string, td ptrace.Traces) (int, string, error) {
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/traces", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

func tid(n uint64) pcommon.TraceID {
	var t pcommon.TraceID
	for i := 0; i < 8; i++ {
		t[i] = byte(n >> (8 * i))
	}
	t[15] = 0xaa
	return t
}
