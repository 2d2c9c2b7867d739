package receiver

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rootline/rootline/internal/store"
)

type metricRecorder struct {
	mu     sync.Mutex
	points []store.MetricPoint
}

func (m *metricRecorder) WriteMetrics(_ context.Context, p []store.MetricPoint) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.points = append(m.points, p...)
	return nil
}

func (m *metricRecorder) take() []store.MetricPoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.points
	m.points = nil
	return out
}

func sampleMetrics() pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "checkout")
	rm.Resource().Attributes().PutStr("container", "/app")
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	h := ms.AppendEmpty()
	h.SetName("runq")
	h.SetUnit("s")
	dp := h.SetEmptyHistogram().DataPoints().AppendEmpty()
	dp.SetTimestamp(pcommon.Timestamp(2000))
	dp.SetStartTimestamp(pcommon.Timestamp(1000))
	dp.SetCount(4)
	dp.SetSum(0.25)
	dp.ExplicitBounds().FromRaw([]float64{0.1})
	dp.BucketCounts().FromRaw([]uint64{3, 1})
	s := ms.AppendEmpty()
	s.SetName("drops")
	sum := s.SetEmptySum()
	sum.SetIsMonotonic(true)
	sp := sum.DataPoints().AppendEmpty()
	sp.SetTimestamp(pcommon.Timestamp(2000))
	sp.SetIntValue(7)
	sp.Attributes().PutStr("reason", "no_socket")
	g := ms.AppendEmpty()
	g.SetName("temp")
	g.SetEmptyGauge().DataPoints().AppendEmpty().SetDoubleValue(21.5)
	ms.AppendEmpty().SetEmptyExponentialHistogram() // skipped
	return md
}

func checkSamplePoints(t *testing.T, got []store.MetricPoint) {
	t.Helper()
	if len(got) != 3 {
		t.Fatalf("%d points: %+v", len(got), got)
	}
	h, d, g := got[0], got[1], got[2]
	if h.Name != "runq" || h.Service != "checkout" || h.Kind != store.MetricHistogram || h.Count != 4 || h.Sum != 0.25 ||
		h.Time != 2000 || h.StartTime != 1000 || len(h.Buckets) != 2 || h.Labels["container"] != "/app" || h.Labels["service.name"] != "" {
		t.Errorf("histogram = %+v", h)
	}
	if d.Kind != store.MetricSum || d.Value != 7 || d.Labels["reason"] != "no_socket" || d.Labels["container"] != "/app" {
		t.Errorf("sum = %+v", d)
	}
	if g.Kind != store.MetricGauge || g.Value != 21.5 {
		t.Errorf("gauge = %+v", g)
	}
}

func TestFromPdataMetrics(t *testing.T) {
	points, err := FromPdataMetrics(sampleMetrics(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	checkSamplePoints(t, points)
}

func TestOTLPMetricsHTTPAndGRPC(t *testing.T) {
	r := startReceivers(t, &recorder{}, 0, nil)
	url := "http://" + r.Addrs().HTTP + "/v1/metrics"
	req := pmetricotlp.NewExportRequestFromMetrics(sampleMetrics())
	proto, _ := req.MarshalProto()
	post := func(ct string, body []byte) int {
		resp, err := http.Post(url, ct, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("application/x-protobuf", proto); code != http.StatusNotFound {
		t.Errorf("without a metric writer: %d", code)
	}
	rec := &metricRecorder{}
	r.SetMetricWriter(rec)
	if code := post("application/x-protobuf", proto); code != http.StatusOK {
		t.Fatalf("protobuf: %d", code)
	}
	checkSamplePoints(t, rec.take())
	js, _ := req.MarshalJSON()
	if code := post("application/json", js); code != http.StatusOK {
		t.Fatalf("JSON: %d", code)
	}
	checkSamplePoints(t, rec.take())
	if code := post("application/json", []byte("{")); code != http.StatusBadRequest {
		t.Errorf("bad JSON: %d", code)
	}
	if code := post("text/plain", js); code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d", code)
	}

	cc, err := grpc.NewClient(r.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pmetricotlp.NewGRPCClient(cc).Export(ctx, req); err != nil {
		t.Fatal(err)
	}
	checkSamplePoints(t, rec.take())
}
