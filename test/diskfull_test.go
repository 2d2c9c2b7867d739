package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rootline/rootline/internal/bpftest"
)

// smallFilesystem mounts a tmpfs of size bytes in a temporary directory and
// unmounts it when the test ends (after cleanups registered later, such as
// the server's). It needs root; without root the test is skipped, unless
// ROOTLINE_REQUIRE_BPF=1 says the machine runs the whole suite as root.
func smallFilesystem(t *testing.T, size int) string {
	t.Helper()
	bpftest.RequireRoot(t, "mounting a small tmpfs")
	mnt := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// fill writes a file until the filesystem is full and returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return p
		}
	}
}

// bigTrace is a trace with a payload unique to it, so that every trace
// needs new pages.
func bigTrace(id pcommon.TraceID) []spanSpec {
	specs := make([]spanSpec, spansPerTrace)
	payload := fmt.Sprintf("%x", id[:]) + strings.Repeat("p", 2048)
	for i := range specs {
		specs[i] = spanSpec{service: "disk", name: fmt.Sprintf("op-%d", i), duration: time.Millisecond,
			res: map[string]any{"payload": fmt.Sprintf("%d-%s", i, payload)}}
	}
	return specs
}

func readyz(t *testing.T, srv *serverProc) int {
	t.Helper()
	resp, err := http.Get(srv.api("/readyz"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestFullDiskAnswers503AndRecovers fills the data directory's filesystem
// under a running server: ingest is refused with 503 / UNAVAILABLE and
// Retry-After (which OTLP clients retry), /readyz fails, and once space is
// freed the server takes spans again by itself; every acknowledged trace is
// stored, whole.
func TestFullDiskAnswers503AndRecovers(t *testing.T) {
	mnt := smallFilesystem(t, 24<<20)
	// No size cap and no age purge: what the test sees is the full disk alone.
	srv := startServer(t, filepath.Join(mnt, "data"), "--retention.max-bytes", "-1", "--retention.interval", "1h")
	ctx := context.Background()
	var acked []pcommon.TraceID
	next := uint64(0)
	post := func() (int, string) {
		t.Helper()
		next++
		id := tid(next)
		code, retry, err := postOTLP(ctx, srv.http, makeTrace(id, time.Now(), bigTrace(id)...))
		if err != nil {
			t.Fatalf("post: %v", err)
		}
		if code == http.StatusOK {
			acked = append(acked, id)
		}
		return code, retry
	}
	for range 5 {
		if code, _ := post(); code != http.StatusOK {
			t.Fatalf("before the disk is full: %d", code)
		}
	}
	if code := readyz(t, srv); code != http.StatusOK {
		t.Fatalf("/readyz %d before the disk is full", code)
	}

	filler := fill(t, mnt)
	refused := false
	for range 500 {
		code, retry := post()
		if code == http.StatusOK {
			continue // pages SQLite had already
		}
		if code != http.StatusServiceUnavailable || retry == "" {
			t.Fatalf("full disk answered %d with Retry-After %q, want 503 with Retry-After", code, retry)
		}
		refused = true
		break
	}
	if !refused {
		t.Fatal("500 traces accepted on a full filesystem")
	}
	if code := readyz(t, srv); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d while the store cannot write, want 503", code)
	}
	conn, err := grpc.NewClient(srv.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	id := tid(1 << 40)
	_, err = ptraceotlp.NewGRPCClient(conn).Export(ctx, ptraceotlp.NewExportRequestFromTraces(makeTrace(id, time.Now(), bigTrace(id)...)))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("OTLP/gRPC on a full disk: %v, want UNAVAILABLE", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for readyz(t, srv) != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not recover within 30 s of freeing space")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for range 5 {
		if code, _ := post(); code != http.StatusOK {
			t.Fatalf("after freeing space: %d", code)
		}
	}
	for _, msg := range []string{"the store cannot write", "the store can write again"} {
		if !strings.Contains(srv.logs.String(), msg) {
			t.Errorf("the log does not say %q", msg)
		}
	}
	select {
	case <-srv.exited:
		t.Fatalf("the server exited: %v", srv.exitErr)
	default:
	}
	for _, id := range acked {
		tr, ok := traceStored(t, srv, id)
		if !ok || len(tr.Spans) != spansPerTrace {
			t.Errorf("acknowledged trace %s: stored %v with %d spans, want %d", traceHex(id), ok, len(tr.Spans), spansPerTrace)
		}
	}
	t.Logf("%d traces acknowledged, %d of them on the full disk before the first refusal", len(acked), len(acked)-10)
}
