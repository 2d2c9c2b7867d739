package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rootline/rootline/internal/receiver/receivertest"
	"github.com/rootline/rootline/internal/tlsconf/tlsconftest"
)

// procMemory returns the resident set of pid now and at its peak, in bytes.
func procMemory(t *testing.T, pid int) (rss, peak int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return rss, peak
}

// alive checks the server still runs and stores a normal export.
func (s *serverProc) alive(t *testing.T, headers ...string) {
	t.Helper()
	select {
	case <-s.exited:
		t.Fatalf("the server died: %v\n%s", s.exitErr, s.logs)
	default:
	}
	body, _ := ptraceotlp.NewExportRequestFromTraces(makeTrace(tid(uint64(time.Now().UnixNano())), time.Now(),
		spanSpec{service: "alive", name: "op", duration: time.Millisecond})).MarshalProto()
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.http+"/v1/traces", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-protobuf")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the server does not answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a normal export after the attack: %d", resp.StatusCode)
	}
}

// maxPeakRSS bounds the peak resident memory of a server that was sent the
// attacks below: several times an idle server's (~40 MB), far under what the
// attacks took before the receivers were bounded (a crash, or 500 MB to
// 1.1 GB).
const maxPeakRSS = 200 << 20

// TestServerSurvivesNestedAttributeBodies sends the 8 MiB request whose one
// attribute nests an array ~890,000 deep (it ended the server with a stack
// overflow) over OTLP/HTTP protobuf and gRPC, and a JSON one 290,000 deep:
// each is refused with a 400 / INVALID_ARGUMENT naming the limit, the server
// lives on and its memory stays low.
func TestServerSurvivesNestedAttributeBodies(t *testing.T) {
	srv := startServer(t, t.TempDir())
	pb := receivertest.NestedProto(receivertest.DepthForSize(8<<20 - 1024))
	js := receivertest.NestedJSON(290_000)
	t.Logf("bodies: protobuf %d B, JSON %d B", len(pb), len(js))
	for _, tc := range []struct {
		name, contentType string
		body              []byte
	}{{"protobuf", "application/x-protobuf", pb}, {"JSON", "application/json", js}} {
		resp, err := http.Post("http://"+srv.http+"/v1/traces", tc.contentType, bytes.NewReader(tc.body))
		if err != nil {
			t.Fatalf("%s: %v (the server died?)\n%s", tc.name, err, srv.logs)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(msg, []byte("max_attribute_depth")) {
			t.Errorf("%s: %d %q, want 400 naming the depth limit", tc.name, resp.StatusCode, msg)
		}
		srv.alive(t)
	}
	cc, err := grpc.NewClient(srv.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	err = cc.Invoke(context.Background(), "/opentelemetry.proto.collector.trace.v1.TraceService/Export", rawBytes(pb), new(rawBytes),
		grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallSendMsgSize(16<<20))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "nested deeper than 16 levels") {
		t.Errorf("gRPC: %v, want INVALID_ARGUMENT naming the depth limit", err)
	}
	srv.alive(t)
	rss, peak := procMemory(t, srv.cmd.Process.Pid)
	t.Logf("server memory after the attacks: RSS %d MiB, peak %d MiB", rss>>20, peak>>20)
	if peak > maxPeakRSS {
		t.Errorf("peak RSS %d MiB, over %d MiB", peak>>20, maxPeakRSS>>20)
	}
}

// TestServerStalledConnections opens 60 connections that announce an
// 8,388,600-byte body and send one byte: memory stays low while they hang,
// a normal export goes through, and the read timeout closes each of them.
func TestServerStalledConnections(t *testing.T) {
	const timeout = 3 * time.Second
	srv := startServer(t, t.TempDir(), "--receiver.read-timeout", timeout.String())
	_, before := procMemory(t, srv.cmd.Process.Pid)
	var conns []net.Conn
	for range 60 {
		c, err := net.Dial("tcp", srv.http)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, "POST /v1/traces HTTP/1.1\r\nHost: rootline\r\nContent-Type: application/x-protobuf\r\nContent-Length: 8388600\r\n\r\nx")
		conns = append(conns, c)
	}
	start := time.Now()
	time.Sleep(time.Second)
	srv.alive(t)
	rss, peak := procMemory(t, srv.cmd.Process.Pid)
	t.Logf("with 60 stalled connections: RSS %d MiB, peak %d MiB (%d MiB before)", rss>>20, peak>>20, before>>20)
	if peak-before > 64<<20 {
		t.Errorf("60 stalled connections took the peak RSS from %d MiB to %d MiB", before>>20, peak>>20)
	}
	closed := 0
	for _, c := range conns {
		c.SetReadDeadline(start.Add(timeout + 10*time.Second))
		_, err := io.Copy(io.Discard, bufio.NewReader(c)) // the 408, then EOF
		if err == nil {
			closed++
		} else if !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++ // reset by the server
		}
	}
	if closed != len(conns) {
		t.Errorf("%d of %d stalled connections still open %v after the %v read timeout", len(conns)-closed, len(conns), 10*time.Second, timeout)
	}
	t.Logf("all closed %v after they stalled", time.Since(start).Round(100*time.Millisecond))
}

// TestServerTokenGuardsEveryReadEndpoint: with ROOTLINE_AUTH_TOKEN set,
// every read endpoint and the receivers refuse a request without it and
// serve one with it; the health checks stay open.
func TestServerTokenGuardsEveryReadEndpoint(t *testing.T) {
	const token = "e2e-token"
	srv := startServerEnv(t, t.TempDir(), []string{"ROOTLINE_AUTH_TOKEN=" + token})
	srv.alive(t, "Authorization", "Bearer "+token)
	traceID := func() string {
		var tr jaegerResponse
		req, _ := http.NewRequest(http.MethodGet, srv.api("/api/traces?service=alive"), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&tr)
		if len(tr.Data) == 0 {
			t.Fatal("the stored trace is not found with the token")
		}
		return tr.Data[0].TraceID
	}()
	get := func(path, auth string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.api(path), nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{
		"/api/traces?service=alive", "/api/traces/" + traceID, "/api/services", "/api/services/alive/operations",
		"/api/operations?service=alive", "/api/dependencies?endTs=" + strconv.FormatInt(time.Now().UnixMilli(), 10),
		"/api/v1/anomalies", "/api/v1/detector", "/api/v1/services/latency", "/api/v1/metrics?name=x",
		"/api/v1/traces/" + traceID + "/artifacts", "/api/v1/agents", "/api/v1/captures", "/metrics",
	} {
		if c := get(path, ""); c != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, c)
		}
		if c := get(path, "Bearer wrong"); c != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, c)
		}
		if c := get(path, "bearer "+token); c != http.StatusOK {
			t.Errorf("GET %s with the token: %d, want 200", path, c)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if c := get(path, ""); c != http.StatusOK {
			t.Errorf("GET %s: %d, want it open", path, c)
		}
	}
	if code, _, err := postOTLP(context.Background(), srv.http, makeTrace(tid(7), time.Now(), spanSpec{service: "x", name: "y", duration: time.Millisecond})); err != nil || code != http.StatusUnauthorized {
		t.Errorf("OTLP/HTTP without the token: %d %v, want 401", code, err)
	}
	cc, err := grpc.NewClient(srv.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	req := ptraceotlp.NewExportRequestFromTraces(makeTrace(tid(8), time.Now(), spanSpec{service: "x", name: "y", duration: time.Millisecond}))
	if _, err := ptraceotlp.NewGRPCClient(cc).Export(context.Background(), req); status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC without the token: %v", err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	if _, err := ptraceotlp.NewGRPCClient(cc).Export(ctx, req); err != nil {
		t.Errorf("gRPC with the token: %v", err)
	}
}

// TestServerTLSOnEveryListener serves every listener over TLS, the receivers
// with client certificates required: a client trusting the CA and holding a
// certificate succeeds on each; plaintext, and TLS without a client
// certificate, fail.
func TestServerTLSOnEveryListener(t *testing.T) {
	dir := t.TempDir()
	srvCert, srvKey := tlsconftest.WriteCert(t, dir, "server")
	cliCert, cliKey := tlsconftest.WriteCert(t, dir, "client")
	srv := startServerEnv(t, t.TempDir(), []string{"ROOTLINE_AUTH_TOKEN=q"},
		"--receiver.tls.cert-file", srvCert, "--receiver.tls.key-file", srvKey, "--receiver.tls.client-ca-file", cliCert,
		"--query.tls.cert-file", srvCert, "--query.tls.key-file", srvKey)
	pem, _ := os.ReadFile(srvCert)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	kp, err := tls.LoadX509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	client := func(certs ...tls.Certificate) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	body, _ := ptraceotlp.NewExportRequestFromTraces(makeTrace(tid(9), time.Now(), spanSpec{service: "tls", name: "op", duration: time.Millisecond})).MarshalProto()
	zipkin := []byte(`[{"traceId":"a1","id":"b2","name":"z","timestamp":` + strconv.FormatInt(time.Now().UnixMicro(), 10) + `,"duration":5,"localEndpoint":{"serviceName":"tls-zipkin"}}]`)
	post := func(c *http.Client, url, ct string, b []byte) (int, error) {
		resp, err := c.Post(url, ct, bytes.NewReader(b))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for _, tc := range []struct {
		name, url, ct string
		body          []byte
		want          int
	}{
		{"OTLP/HTTP", "https://" + srv.http + "/v1/traces", "application/x-protobuf", body, 200},
		{"Zipkin", "https://" + srv.zipkin + "/api/v2/spans", "application/json", zipkin, 202},
	} {
		if code, err := post(client(kp), tc.url, tc.ct, tc.body); err != nil || code != tc.want {
			t.Errorf("%s with a client certificate: %d %v", tc.name, code, err)
		}
		if _, err := post(client(), tc.url, tc.ct, tc.body); err == nil {
			t.Errorf("%s without a client certificate: accepted", tc.name)
		}
		if code, err := post(http.DefaultClient, strings.Replace(tc.url, "https", "http", 1), tc.ct, tc.body); err == nil && code < 300 {
			t.Errorf("%s in plaintext: %d", tc.name, code)
		}
	}
	grpcExport := func(creds credentials.TransportCredentials) error {
		cc, err := grpc.NewClient(srv.grpc, grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = ptraceotlp.NewGRPCClient(cc).Export(ctx, ptraceotlp.NewExportRequestFromTraces(makeTrace(tid(10), time.Now(),
			spanSpec{service: "tls-grpc", name: "op", duration: time.Millisecond})))
		return err
	}
	if err := grpcExport(credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{kp}})); err != nil {
		t.Errorf("gRPC with a client certificate: %v", err)
	}
	if err := grpcExport(credentials.NewTLS(&tls.Config{RootCAs: pool})); err == nil {
		t.Error("gRPC without a client certificate: accepted")
	}
	if err := grpcExport(insecure.NewCredentials()); err == nil {
		t.Error("gRPC in plaintext: accepted")
	}

	// The query port: TLS, and its token.
	req, _ := http.NewRequest(http.MethodGet, "https://"+srv.query+"/api/services", nil)
	req.Header.Set("Authorization", "Bearer q")
	resp, err := client().Do(req)
	if err != nil {
		t.Fatalf("query over TLS: %v", err)
	}
	var services struct{ Data []string }
	json.NewDecoder(resp.Body).Decode(&services)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Join(services.Data, ",") != "tls,tls-grpc,tls-zipkin" {
		t.Errorf("query over TLS: %d %v, want the three services stored over TLS", resp.StatusCode, services.Data)
	}
	if resp, err := http.Get("http://" + srv.query + "/api/services"); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("query in plaintext: %d", resp.StatusCode)
		}
	}
}

// TestServerCardinalityCaps sends 2,000 new services in one request: the
// first 100 (the per-minute cap) are stored as themselves, the rest under
// rootline-overflow with their names kept; the service list stays short.
func TestServerCardinalityCaps(t *testing.T) {
	srv := startServer(t, t.TempDir())
	td := ptrace.NewTraces()
	start := time.Now()
	for i := range 2000 {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", fmt.Sprintf("svc-%04d", i))
		s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		s.SetTraceID(tid(uint64(10_000 + i)))
		s.SetSpanID(pcommon.SpanID{1, byte(i), byte(i >> 8)})
		s.SetName("op")
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Millisecond)))
	}
	if code, _, err := postOTLP(context.Background(), srv.http, td); err != nil || code != 200 {
		t.Fatalf("export: %d %v", code, err)
	}
	var services struct{ Data []string }
	srv.getJSON(t, "/api/services", &services)
	if len(services.Data) != 101 || !strings.Contains(strings.Join(services.Data, ","), "rootline-overflow") {
		t.Fatalf("%d services stored (want 100 and rootline-overflow): %.200v", len(services.Data), services.Data)
	}
	var tr jaegerResponse
	srv.getJSON(t, "/api/traces/"+fmt.Sprintf("%x", [16]byte(tid(10_000+1999))), &tr)
	if len(tr.Data) != 1 {
		t.Fatal("the last span is not stored")
	}
	found := false
	for _, tag := range tr.Data[0].Spans[0].Tags {
		if tag.Key == "rootline.overflow.service" && tag.Value == "svc-1999" {
			found = true
		}
	}
	if !found || tr.Data[0].Processes[tr.Data[0].Spans[0].ProcessID].ServiceName != "rootline-overflow" {
		t.Errorf("the last span: %+v", tr.Data[0])
	}
}

// TestServerMemoryBoundUnderFlood has many clients send the requests that
// cost the most memory per byte (8 MiB of empty array elements, and large
// valid batches), over OTLP/HTTP and gRPC at once, to a server with a
// 640 MiB memory limit: it answers every request (200, or 429 / 413 /
// RESOURCE_EXHAUSTED to retry) and its peak RSS stays under the limit.
func TestServerMemoryBoundUnderFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("floods a server for 10 s")
	}
	const limit = 640 << 20
	srv := startServer(t, t.TempDir(), "--memory-limit", "640MiB", "--detector.max-keys", "1000", "--receiver.max-connections", "256")
	// 8 MiB of empty array elements: one attribute, ~4 million elements.
	empties := receivertest.EmptyElements(4_000_000)
	batch := func() []byte {
		td := ptrace.NewTraces()
		ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
		for i := range 30_000 {
			s := ss.Spans().AppendEmpty()
			s.SetTraceID(tid(uint64(i + 1)))
			s.SetSpanID(pcommon.SpanID{2, byte(i), byte(i >> 8)})
			s.SetName("op")
			s.SetStartTimestamp(pcommon.NewTimestampFromTime(time.Now()))
			s.SetEndTimestamp(pcommon.NewTimestampFromTime(time.Now().Add(time.Millisecond)))
			s.Attributes().PutStr("k", strings.Repeat("v", 200))
		}
		b, _ := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
		return b
	}()
	t.Logf("bodies: empties %d B, batch %d B", len(empties), len(batch))

	stop := time.Now().Add(10 * time.Second)
	var wg sync.WaitGroup
	var answered, accepted, failed atomic.Int64
	codesSeen := sync.Map{}
	for i := range 24 {
		body := empties
		if i%2 == 1 {
			body = batch
		}
		wg.Go(func() {
			for time.Now().Before(stop) {
				resp, err := http.Post("http://"+srv.http+"/v1/traces", "application/x-protobuf", bytes.NewReader(body))
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				answered.Add(1)
				codesSeen.Store(resp.StatusCode, true)
				if resp.StatusCode == 200 {
					accepted.Add(1)
				}
			}
		})
	}
	cc, err := grpc.NewClient(srv.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for i := range 16 {
		body := empties
		if i%2 == 1 {
			body = batch
		}
		wg.Go(func() {
			for time.Now().Before(stop) {
				err := cc.Invoke(context.Background(), "/opentelemetry.proto.collector.trace.v1.TraceService/Export", rawBytes(body), new(rawBytes),
					grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallSendMsgSize(16<<20))
				answered.Add(1)
				codesSeen.Store("grpc "+status.Code(err).String(), true)
				if err == nil {
					accepted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	var seen []string
	codesSeen.Range(func(k, _ any) bool { seen = append(seen, fmt.Sprint(k)); return true })
	srv.alive(t)
	rss, peak := procMemory(t, srv.cmd.Process.Pid)
	t.Logf("%d requests answered (%d accepted, %d HTTP errors), answers %v; RSS %d MiB, peak %d MiB of the %d MiB limit",
		answered.Load(), accepted.Load(), failed.Load(), seen, rss>>20, peak>>20, limit>>20)
	if accepted.Load() == 0 {
		t.Error("nothing was accepted under load")
	}
	if failed.Load() > 0 {
		t.Errorf("%d HTTP requests got no answer", failed.Load())
	}
	// The limit is Go's soft limit: under churn the collector lets garbage
	// grow to it (the bounded parts hold what is live, well under it), and
	// the runtime may pass it by a little.
	if peak > limit+limit/20 {
		t.Errorf("peak RSS %d MiB, over the %d MiB memory limit (+5%%)", peak>>20, limit>>20)
	}
}

// rawBytes is a gRPC message sent or received as it is on the wire.
type rawBytes []byte

// rawCodec sends messages of rawBytes undecoded.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case rawBytes:
		return mem.BufferSlice{mem.SliceBuffer(m)}, nil
	case *rawBytes:
		return mem.BufferSlice{mem.SliceBuffer(*m)}, nil
	}
	return nil, fmt.Errorf("cannot marshal %T", v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawBytes)
	if !ok {
		return fmt.Errorf("cannot unmarshal into %T", v)
	}
	*m = data.Materialize()
	return nil
}
