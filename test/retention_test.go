package test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// purgeCount reads how many retention purges the server has run, from its
// store latency histogram.
func purgeCount(t *testing.T, srv *serverProc) int {
	t.Helper()
	resp, err := http.Get(srv.api("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), `rootline_store_op_seconds_count{op="purge"} `); ok {
			n, err := strconv.Atoi(rest)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

// waitPurges waits until the server has run n more retention purges.
func waitPurges(t *testing.T, srv *serverProc, n int) {
	t.Helper()
	want := purgeCount(t, srv) + n
	deadline := time.Now().Add(30 * time.Second)
	for purgeCount(t, srv) < want {
		if time.Now().After(deadline) {
			t.Fatalf("the server ran no %d purges in 30s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func traceStored(t *testing.T, srv *serverProc, id pcommon.TraceID) (jaegerTrace, bool) {
	t.Helper()
	var r jaegerResponse
	switch code := srv.getJSON(t, "/api/traces/"+traceHex(id), &r); code {
	case http.StatusOK:
		return r.Data[0], true
	case http.StatusNotFound:
		return jaegerTrace{}, false
	default:
		t.Fatalf("GET trace: %d", code)
	}
	return jaegerTrace{}, false
}

func traceHex(id pcommon.TraceID) string { return fmt.Sprintf("%x", id[:]) }

func tagValue(tr jaegerTrace, key string) (any, bool) {
	for _, sp := range tr.Spans {
		for _, tag := range sp.Tags {
			if tag.Key == key {
				return tag.Value, true
			}
		}
	}
	return nil, false
}

// skewedTraces posts one trace stamped at each time and returns their ids.
func skewedTraces(t *testing.T, srv *serverProc, first uint64, stamps ...time.Time) []pcommon.TraceID {
	t.Helper()
	var ids []pcommon.TraceID
	for i, at := range stamps {
		id := tid(first + uint64(i))
		code, _, err := postOTLP(context.Background(), srv.http, makeTrace(id, at, spanSpec{service: "skewed", name: "op", duration: time.Millisecond}))
		if err != nil || code != http.StatusOK {
			t.Fatalf("post trace stamped %v: %d %v", at, code, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestAckedSpansWithOldClocksSurvivePurges: spans stamped 1970 or 2023 by a
// client's clock are kept from their receipt (flagged rootline.clock_skew_ms),
// not deleted by the purges right after they were acknowledged.
func TestAckedSpansWithOldClocksSurvivePurges(t *testing.T) {
	srv := startServer(t, t.TempDir(), "--retention.interval", "100ms")
	stamps := []time.Time{time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC), time.Date(2023, 3, 1, 0, 0, 0, 0, time.UTC), time.Now()}
	ids := skewedTraces(t, srv, 1, stamps...)
	waitPurges(t, srv, 3)
	for i, id := range ids {
		tr, ok := traceStored(t, srv, id)
		if !ok {
			t.Errorf("trace stamped %v was deleted right after it was acknowledged", stamps[i])
			continue
		}
		v, flagged := tagValue(tr, "rootline.clock_skew_ms")
		if flagged != (i < 2) {
			t.Errorf("trace stamped %v: rootline.clock_skew_ms = %v (present %v)", stamps[i], v, flagged)
		}
	}
}

// TestFutureStampedSpansArePurged: a span stamped 2250 is aged from its
// receipt and goes when its retention has passed, instead of forever.
func TestFutureStampedSpansArePurged(t *testing.T) {
	srv := startServer(t, t.TempDir(), "--retention.interval", "200ms", "--retention.normal", "2s", "--retention.anomalous", "2s")
	ids := skewedTraces(t, srv, 100, time.Date(2250, 1, 1, 0, 0, 0, 0, time.UTC))
	tr, ok := traceStored(t, srv, ids[0])
	if !ok {
		t.Fatal("the trace stamped 2250 was not stored")
	}
	if v, ok := tagValue(tr, "rootline.clock_skew_ms"); !ok {
		t.Errorf("the span stamped 2250 is not flagged (%v)", v)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := traceStored(t, srv, ids[0]); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the trace stamped 2250 survived 30 s of purges with a 2 s retention")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// plantBlob writes content where the filesystem blob store keeps it, with
// its modification time set to age ago: what a server killed between storing
// an artifact's content and committing its row leaves behind.
func plantBlob(t *testing.T, dataDir string, content string, age time.Duration) string {
	t.Helper()
	sum := sha256.Sum256([]byte(content))
	d := hex.EncodeToString(sum[:])
	p := filepath.Join(dataDir, "blobs", d[:2], d)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-age)
	if err := os.Chtimes(p, at, at); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOrphanBlobsAreSwept: artifact content without its row goes at the next
// retention run once past the grace period; a fresh one (maybe an upload
// whose row is being committed) stays.
func TestOrphanBlobsAreSwept(t *testing.T) {
	dir := t.TempDir()
	old := plantBlob(t, dir, "left by a server killed an hour ago", time.Hour)
	fresh := plantBlob(t, dir, "an upload in flight", 0)
	srv := startServer(t, dir, "--retention.interval", "100ms")
	waitPurges(t, srv, 2)
	if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("orphan blob an hour old: %v, want it deleted", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh orphan blob: %v, want it kept", err)
	}
}
