package export

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	kgzip "github.com/klauspost/compress/gzip"

	"github.com/rootline/rootline/internal/model"
)

// tracerBatch is a batch like one `rootline run` sends from a service of the
// demo mesh in a second: SERVER and CLIENT spans with the tracer's
// attributes, random ids.
func tracerBatch(n int) []*model.Span {
	res := []model.KeyValue{model.String(model.AttrServiceName, "svc-e"), model.Int(model.AttrProcessPID, 4242),
		model.String("telemetry.sdk.name", "rootline-run"), model.String(model.AttrHostName, "node-1"),
		model.String(model.AttrServiceInstanceID, "node-1:4242")}
	out := make([]*model.Span, n)
	now := time.Now().UnixNano()
	for i := range out {
		s := &model.Span{Service: "svc-e", Name: "GET /work", Kind: model.KindServer, Start: now + int64(i)*7919311,
			Duration: 3_000_000 + int64(i)*104729, Resource: res, Scope: "rootline-run"}
		for j := range s.TraceID {
			s.TraceID[j] = byte(i*131 + j*17 + j*j*i)
		}
		for j := range s.SpanID {
			s.SpanID[j], s.ParentSpanID[j] = byte(i*29+j*57), byte(i*61+j*13+1)
		}
		s.Attributes = []model.KeyValue{model.String("http.request.method", "GET"), model.String("url.path", "/work"),
			model.String("server.address", "e:8080"), model.String("network.peer.address", "10.77.0.12:41230"),
			model.Float(model.AttrWaitLocalMs, 0.031*float64(i)), model.Float(model.AttrWaitNetMs, 0.4),
			model.Float(model.AttrWaitRemoteMs, 1.2), model.String(model.AttrThreadIDs, "4250,4251"),
			model.Int("http.response.status_code", 200), model.Int(model.AttrThreadID, 4250)}
		if i%2 == 1 {
			s.Kind, s.Name = model.KindClient, "GET"
			s.Attributes = []model.KeyValue{model.String("http.request.method", "GET"), model.String("url.full", "http://f:8080/work"),
				model.String("server.address", "f:8080"), model.Int(model.AttrThreadID, 4250), model.Int("http.response.status_code", 200)}
		}
		out[i] = s
	}
	return out
}

func TestAppendGzip(t *testing.T) {
	raw := AppendOTLP(nil, tracerBatch(20))
	prefix := []byte("kept")
	z := AppendGzip(append([]byte(nil), prefix...), raw)
	if !bytes.HasPrefix(z, prefix) {
		t.Fatal("AppendGzip overwrote dst")
	}
	zr, err := gzip.NewReader(bytes.NewReader(z[len(prefix):]))
	if err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(back, raw) {
		t.Fatalf("gunzip gave %d bytes (err %v), want the %d sent", len(back), err, len(raw))
	}
	// A second use of a pooled writer starts a new stream.
	if again := AppendGzip(nil, raw); !bytes.Equal(again, z[len(prefix):]) {
		t.Error("a pooled writer's output differs from a fresh one's")
	}
}

// BenchmarkGzipBatch: the CPU and the bytes of gzipping a batch of the
// tracer's spans at BestSpeed (what AppendGzip uses) and at gzip's default
// level, for batches of a quiet and a busy second.
func BenchmarkGzipBatch(b *testing.B) {
	for _, n := range []int{10, 100} {
		raw := AppendOTLP(nil, tracerBatch(n))
		for _, lv := range []struct {
			name string
			new  func() gzipWriter
		}{
			{"BestSpeed", func() gzipWriter { w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed); return w }},
			{"Default", func() gzipWriter { w, _ := gzip.NewWriterLevel(nil, gzip.DefaultCompression); return w }},
			{"klauspost-BestSpeed", func() gzipWriter { w, _ := kgzip.NewWriterLevel(nil, kgzip.BestSpeed); return w }},
		} {
			b.Run(fmt.Sprintf("spans=%d/%s", n, lv.name), func(b *testing.B) {
				w := lv.new()
				var buf bytes.Buffer
				cpu0 := processCPU()
				for b.Loop() {
					buf.Reset()
					w.Reset(&buf)
					_, _ = w.Write(raw)
					_ = w.Close()
				}
				b.ReportMetric(float64(len(raw))/float64(n), "raw-B/span")
				b.ReportMetric(float64(buf.Len())/float64(n), "gzip-B/span")
				// CPU time, not wall time: the machines this runs on are shared.
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/float64(n), "cpu-ns/span")
			})
		}
	}
}

// gzipWriter is what the standard library's and klauspost's writers share.
type gzipWriter interface {
	io.WriteCloser
	Reset(io.Writer)
}

// BenchmarkGunzipBatch: the CPU of gunzipping a busy second's batch, as the
// server's receiver does, with the standard library and with klauspost's
// reader.
func BenchmarkGunzipBatch(b *testing.B) {
	raw := AppendOTLP(nil, tracerBatch(100))
	z := AppendGzip(nil, raw)
	out := make([]byte, 0, len(raw))
	for _, r := range []struct {
		name string
		open func(io.Reader) (io.Reader, error)
	}{
		{"stdlib", func(in io.Reader) (io.Reader, error) { return gzip.NewReader(in) }},
		{"klauspost", func(in io.Reader) (io.Reader, error) { return kgzip.NewReader(in) }},
	} {
		b.Run(r.name, func(b *testing.B) {
			cpu0 := processCPU()
			for b.Loop() {
				zr, err := r.open(bytes.NewReader(z))
				if err != nil {
					b.Fatal(err)
				}
				buf := bytes.NewBuffer(out[:0])
				if _, err := buf.ReadFrom(zr); err != nil || buf.Len() != len(raw) {
					b.Fatalf("%d bytes, %v", buf.Len(), err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/100, "cpu-ns/span")
		})
	}
}

// processCPU is this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
