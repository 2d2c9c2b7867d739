package receiver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/pipeline"
	"github.com/rootline/rootline/internal/receiver/receivertest"
	"github.com/rootline/rootline/internal/tlsconf"
	"github.com/rootline/rootline/internal/tlsconf/tlsconftest"
)

// startWith starts the three receivers on loopback with cfg's bounds.
func startWith(t *testing.T, cfg Config, c pipeline.Consumer) *Receivers {
	t.Helper()
	return startWithRegistry(t, cfg, c, nil)
}

// startWithRegistry is startWith with metrics registered in reg.
func startWithRegistry(t *testing.T, cfg Config, c pipeline.Consumer, reg prometheus.Registerer) *Receivers {
	t.Helper()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ZipkinAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	r, err := New(cfg, c, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return r
}

// exportRaw sends body as one TraceService or MetricsService Export over
// gRPC, undecoded, with md as metadata.
func exportRaw(ctx context.Context, cc *grpc.ClientConn, service string, body []byte, md ...string) error {
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	out := &rawMessage{}
	return cc.Invoke(ctx, "/opentelemetry.proto.collector."+service+"/Export", &rawMessage{out: body}, out,
		grpc.ForceCodecV2(rawCodec{}))
}

func rawGRPC(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func TestDeepNestingIsRefusedBeforeDecoding(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 8 MiB bodies")
	}
	rec := &recorder{}
	r := startWith(t, Config{}, rec)
	addrs := r.Addrs()
	hc := httpClient(t)
	depth := receivertest.DepthForSize(DefaultMaxRequestBytes - 64)
	protoBody := receivertest.NestedProto(depth)
	const want = "attribute value nested deeper than 16 levels (limit receiver.limits.max_attribute_depth)"

	for _, tc := range []struct {
		name, contentType string
		body              []byte
	}{
		{"protobuf at the crash depth", mediaProto, protoBody},
		{"protobuf one past the limit", mediaProto, receivertest.NestedProto(17)},
		{"JSON", mediaJSON, receivertest.NestedJSON(290_000)},
		{"JSON one past the limit", mediaJSON, receivertest.NestedJSON(17)},
	} {
		t.Run("http "+tc.name, func(t *testing.T) {
			resp, body := do(t, hc, addrs.HTTP, httpReq{path: "/v1/traces", contentType: tc.contentType, body: tc.body})
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d %q", resp.StatusCode, body)
			}
			if st := decodeStatus(t, tc.contentType, body); !strings.Contains(st.GetMessage(), "nested deeper than") {
				t.Errorf("message %q does not name the limit", st.GetMessage())
			}
		})
	}
	t.Run("http at the limit is accepted", func(t *testing.T) {
		for _, ct := range []string{mediaProto, mediaJSON} {
			body := receivertest.NestedProto(16)
			if ct == mediaJSON {
				body = receivertest.NestedJSON(16)
			}
			resp, b := do(t, hc, addrs.HTTP, httpReq{path: "/v1/traces", contentType: ct, body: body})
			if resp.StatusCode != 200 {
				t.Errorf("%s: status %d %q", ct, resp.StatusCode, b)
			}
		}
	})
	t.Run("grpc", func(t *testing.T) {
		err := exportRaw(context.Background(), rawGRPC(t, addrs.GRPC, nil), "trace.v1.TraceService", protoBody)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("zipkin", func(t *testing.T) {
		resp, body := do(t, hc, addrs.Zipkin, httpReq{path: "/api/v2/spans", contentType: mediaJSON, body: receivertest.NestedZipkin(100_000)})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "JSON nested deeper than 16 levels") {
			t.Fatalf("status %d %q", resp.StatusCode, body)
		}
	})
	if n := len(rec.got()); n != 2 {
		t.Errorf("consumer got %d spans, want only the 2 at the limit", n)
	}
	if used := r.budget.used.Load(); used != 0 {
		t.Errorf("%d bytes of the budget still reserved after every request was answered", used)
	}
}

func TestMetricsGoThroughTheSameAdmission(t *testing.T) {
	sink := &metricRecorder{}
	r, err := New(Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AuthToken: "s3cret"}, &recorder{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.SetMetricWriter(sink)
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	good, _ := pmetricotlp.NewExportRequestFromMetrics(sampleMetrics()).MarshalProto()
	hc := httpClient(t)
	post := func(token string, body []byte) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.Addrs().HTTP+"/v1/metrics", bytes.NewReader(body))
		req.Header.Set("Content-Type", mediaProto)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("", good); code != http.StatusUnauthorized {
		t.Errorf("without token: %d", code)
	}
	if code := post("s3cret", good); code != 200 {
		t.Errorf("with token: %d", code)
	}
	if code := post("s3cret", nestedMetrics(17)); code != http.StatusBadRequest {
		t.Errorf("deep label: %d", code)
	}
	cc := rawGRPC(t, r.Addrs().GRPC, nil)
	if err := exportRaw(context.Background(), cc, "metrics.v1.MetricsService", good); status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC without token: %v", err)
	}
	if err := exportRaw(context.Background(), cc, "metrics.v1.MetricsService", good, "authorization", "bearer s3cret"); err != nil {
		t.Errorf("gRPC with token: %v", err)
	}
	if err := exportRaw(context.Background(), cc, "metrics.v1.MetricsService", nestedMetrics(17), "authorization", "Bearer s3cret"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("gRPC deep label: %v", err)
	}
	sample, _ := FromPdataMetrics(sampleMetrics(), Limits{})
	if n := len(sink.take()); n != 2*len(sample) {
		t.Errorf("stored %d points, want the sample's %d twice", n, len(sample))
	}
}

// nestedMetrics is an ExportMetricsServiceRequest with one gauge point whose
// one attribute is an array nested depth deep.
func nestedMetrics(depth int) []byte {
	field := func(num int, b []byte) []byte {
		out := binary.AppendUvarint(nil, uint64(num)<<3|2)
		out = binary.AppendUvarint(out, uint64(len(b)))
		return append(out, b...)
	}
	value := []byte{}
	for range depth {
		value = field(5, field(1, value))
	}
	point := field(7, append(field(1, []byte("k")), field(2, value)...))  // NumberDataPoint.attributes
	metric := append(field(1, []byte("m")), field(5, field(1, point))...) // Metric{name, gauge{data_points}}
	return field(1, field(2, field(2, metric)))
}

// blockingConsumer holds each request until release is closed.
type blockingConsumer struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blockingConsumer) ConsumeSpans(ctx context.Context, _ []*model.Span) error {
	b.entered <- struct{}{}
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestConcurrencyAndMemoryBounds(t *testing.T) {
	body := otlpProto(t, makeTraces(50, "a"))
	scan, err := scanProto(body, kindTraceRequest, 16)
	if err != nil {
		t.Fatal(err)
	}
	perRequest := int64(len(body)) + scan.estimate
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantMsg string
	}{
		{name: "one request at a time", cfg: Config{Admission: Admission{MaxConcurrentRequests: 1}, MaxRequestBytes: 1 << 20}, wantMsg: "handling 1 requests, its limit (receiver.max_concurrent_requests)"},
		{name: "memory for one request", cfg: Config{Admission: Admission{MaxInflightBytes: perRequest + perRequest/2}, MaxRequestBytes: perRequest / 4}, wantMsg: "memory for requests in flight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bc := &blockingConsumer{entered: make(chan struct{}, 8), release: make(chan struct{})}
			r := startWith(t, tc.cfg, bc)
			addrs := r.Addrs()
			hc := httpClient(t)
			first := make(chan error, 1)
			go func() {
				resp, b, err := doErr(hc, addrs.HTTP, httpReq{path: "/v1/traces", contentType: mediaProto, body: body})
				first <- wantStatus(resp, b, err, 200)
			}()
			<-bc.entered

			resp, b := do(t, hc, addrs.HTTP, httpReq{path: "/v1/traces", contentType: mediaProto, body: body})
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
				t.Errorf("second HTTP request: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			if st := decodeStatus(t, mediaProto, b); !strings.Contains(st.GetMessage(), tc.wantMsg) {
				t.Errorf("message %q, want %q", st.GetMessage(), tc.wantMsg)
			}
			if tc.cfg.MaxConcurrentRequests == 0 {
				// The memory bound is shared by every receiver.
				err := exportRaw(context.Background(), rawGRPC(t, addrs.GRPC, nil), "trace.v1.TraceService", body)
				if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || !hasRetryInfo(st) {
					t.Errorf("gRPC while the memory is held: %v", err)
				}
			}
			close(bc.release)
			if err := <-first; err != nil {
				t.Errorf("first request: %v", err)
			}
			resp, b = do(t, hc, addrs.HTTP, httpReq{path: "/v1/traces", contentType: mediaProto, body: body})
			if resp.StatusCode != 200 {
				t.Errorf("after the first finished: %d %q", resp.StatusCode, b)
			}
		})
	}
	t.Run("a request that could never fit is too large", func(t *testing.T) {
		r := startWith(t, Config{Admission: Admission{MaxInflightBytes: 4 * int64(len(body))}, MaxRequestBytes: int64(len(body))}, &recorder{})
		resp, b := do(t, httpClient(t), r.Addrs().HTTP, httpReq{path: "/v1/traces", contentType: mediaProto, body: body})
		st := decodeStatus(t, mediaProto, b)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(st.GetMessage(), "send smaller batches") {
			t.Errorf("%d %q", resp.StatusCode, st.GetMessage())
		}
	})
}

func hasRetryInfo(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return false
}

// TestStalledBodies opens connections that announce a large body and send a
// byte: they reserve a few KB each, whatever they claim, a normal request
// meanwhile succeeds, and each is closed once the read timeout passes.
func TestStalledBodies(t *testing.T) {
	const timeout = 700 * time.Millisecond
	rec := &recorder{}
	r := startWith(t, Config{Admission: Admission{ReadTimeout: timeout}}, rec)
	addrs := r.Addrs()
	const conns = 20
	var open []net.Conn
	for range conns {
		c, err := net.Dial("tcp", addrs.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 8388600\r\n\r\nx")
		open = append(open, c)
	}
	start := time.Now()
	time.Sleep(100 * time.Millisecond)
	if used := r.budget.used.Load(); used > conns*firstChunk {
		t.Errorf("%d stalled connections reserve %d bytes, want at most %d", conns, used, conns*firstChunk)
	}
	resp, b := do(t, httpClient(t), addrs.HTTP, httpReq{path: "/v1/traces", contentType: mediaProto, body: otlpProto(t, makeTraces(2, "a"))})
	if resp.StatusCode != 200 {
		t.Errorf("a normal request next to stalled ones: %d %q", resp.StatusCode, b)
	}
	for i, c := range open {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Errorf("conn %d: status %d, want 408", i, resp.StatusCode)
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil {
				_, err = c.Read(make([]byte, 1))
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("conn %d still open 10s after the %v read timeout", i, timeout)
		}
	}
	if d := time.Since(start); d < timeout-100*time.Millisecond {
		t.Errorf("stalled connections closed after %v, before the read timeout", d)
	}
	if used := r.budget.used.Load(); used != 0 {
		t.Errorf("%d bytes still reserved after the stalled requests ended", used)
	}
}

// TestStalledGRPCMessage sends the start of a gRPC message that announces
// 8 MB and one byte of it: the RPC is cancelled at the read timeout, and its
// slot is free again.
func TestStalledGRPCMessage(t *testing.T) {
	const timeout = 500 * time.Millisecond
	r := startWith(t, Config{Admission: Admission{ReadTimeout: timeout, MaxConcurrentRequests: 1}}, &recorder{})
	conn, err := net.Dial("tcp", r.Addrs().GRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"},
		{":path", "/opentelemetry.proto.collector.trace.v1.TraceService/Export"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	msg := []byte{0, 0, 0, 0, 0, 'x'}
	binary.BigEndian.PutUint32(msg[1:5], 8388600)
	if err := fr.WriteData(1, false, msg); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	dec := hpack.NewDecoder(4096, nil)
	grpcStatus := ""
	for grpcStatus == "" {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no answer on the stalled stream: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			fields, _ := dec.DecodeFull(f.HeaderBlockFragment())
			for _, hf := range fields {
				if hf.Name == "grpc-status" {
					grpcStatus = hf.Value
				}
			}
		case *http2.RSTStreamFrame:
			grpcStatus = "rst " + f.ErrCode.String()
		}
	}
	if d := time.Since(start); d < timeout-100*time.Millisecond {
		t.Errorf("answered after %v, before the read timeout", d)
	}
	if grpcStatus != fmt.Sprint(int(codes.Canceled)) && !strings.HasPrefix(grpcStatus, "rst") {
		t.Errorf("grpc-status %s, want CANCELLED", grpcStatus)
	}
	// The one slot is free again: a normal export succeeds. The handler
	// writes the stalled stream's status before it returns and releases the
	// slot, so an export sent the moment the status arrives may still be
	// told to retry (ResourceExhausted); it must succeed within a second.
	client := grpcClient(t, r.Addrs().GRPC)
	deadline := time.Now().Add(time.Second)
	for {
		_, err := client.Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(makeTraces(1, "a")))
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("export after the stalled one: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTokenAndTLS(t *testing.T) {
	dir := t.TempDir()
	serverCert, serverKey := tlsconftest.WriteCert(t, dir, "server")
	clientCert, clientKey := tlsconftest.WriteCert(t, dir, "client")
	pool := x509.NewCertPool()
	for _, f := range []string{serverCert} {
		b, _ := os.ReadFile(f)
		pool.AppendCertsFromPEM(b)
	}
	kp, err := tls.LoadX509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	body := otlpProto(t, makeTraces(1, "a"))
	zipkin := readTestdata(t, "zipkin_full.json")

	// post sends body to path of addr over client and returns the status, or
	// -1 when the connection failed.
	post := func(client *http.Client, url, contentType, auth string, body []byte) int {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			return -1
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	tlsClient := func(certs ...tls.Certificate) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}

	t.Run("token over plaintext", func(t *testing.T) {
		r := startWith(t, Config{AuthToken: "s3cret"}, &recorder{})
		a := r.Addrs()
		hc := httpClient(t)
		for _, tc := range []struct {
			auth string
			want int
		}{{"", 401}, {"Bearer wrong", 401}, {"Basic czNjcmV0", 401}, {"Bearer s3cret", 200}, {"bearer  s3cret ", 200}} {
			if got := post(hc, "http://"+a.HTTP+"/v1/traces", mediaProto, tc.auth, body); got != tc.want {
				t.Errorf("OTLP/HTTP with %q: %d, want %d", tc.auth, got, tc.want)
			}
			want := tc.want
			if want == 200 {
				want = 202
			}
			if got := post(hc, "http://"+a.Zipkin+"/api/v2/spans", mediaJSON, tc.auth, zipkin); got != want {
				t.Errorf("Zipkin with %q: %d, want %d", tc.auth, got, want)
			}
		}
		resp, _ := do(t, hc, a.HTTP, httpReq{path: "/v1/traces", contentType: mediaProto, body: body})
		if ch := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(ch, "Bearer") {
			t.Errorf("WWW-Authenticate %q", ch)
		}
		cc := rawGRPC(t, a.GRPC, nil)
		if err := exportRaw(context.Background(), cc, "trace.v1.TraceService", body); status.Code(err) != codes.Unauthenticated {
			t.Errorf("gRPC without token: %v", err)
		}
		if err := exportRaw(context.Background(), cc, "trace.v1.TraceService", body, "authorization", "Bearer wrong"); status.Code(err) != codes.Unauthenticated {
			t.Errorf("gRPC with a wrong token: %v", err)
		}
		if err := exportRaw(context.Background(), cc, "trace.v1.TraceService", body, "authorization", "Bearer s3cret"); err != nil {
			t.Errorf("gRPC with the token: %v", err)
		}
	})

	t.Run("TLS", func(t *testing.T) {
		r := startWith(t, Config{TLS: tlsconf.Server{CertFile: serverCert, KeyFile: serverKey}}, &recorder{})
		a := r.Addrs()
		if got := post(tlsClient(), "https://"+a.HTTP+"/v1/traces", mediaProto, "", body); got != 200 {
			t.Errorf("OTLP/HTTP over TLS: %d", got)
		}
		if got := post(tlsClient(), "https://"+a.Zipkin+"/api/v2/spans", mediaJSON, "", zipkin); got != 202 {
			t.Errorf("Zipkin over TLS: %d", got)
		}
		if got := post(httpClient(t), "http://"+a.HTTP+"/v1/traces", mediaProto, "", body); got == 200 {
			t.Error("plaintext request to a TLS listener was accepted")
		}
		if err := exportRaw(context.Background(), rawGRPC(t, a.GRPC, credentials.NewTLS(&tls.Config{RootCAs: pool})), "trace.v1.TraceService", body); err != nil {
			t.Errorf("gRPC over TLS: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := exportRaw(ctx, rawGRPC(t, a.GRPC, nil), "trace.v1.TraceService", body); status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("plaintext gRPC to a TLS listener: %v", err)
		}
	})

	t.Run("client certificates stand in for the token", func(t *testing.T) {
		r := startWith(t, Config{AuthToken: "s3cret", TLS: tlsconf.Server{CertFile: serverCert, KeyFile: serverKey, ClientCAFile: clientCert}}, &recorder{})
		a := r.Addrs()
		if got := post(tlsClient(kp), "https://"+a.HTTP+"/v1/traces", mediaProto, "", body); got != 200 {
			t.Errorf("with a client certificate: %d", got)
		}
		if got := post(tlsClient(), "https://"+a.HTTP+"/v1/traces", mediaProto, "Bearer s3cret", body); got != -1 {
			t.Errorf("without a client certificate: %d, want the handshake refused", got)
		}
		if err := exportRaw(context.Background(), rawGRPC(t, a.GRPC, credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{kp}})), "trace.v1.TraceService", body); err != nil {
			t.Errorf("gRPC with a client certificate: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := exportRaw(ctx, rawGRPC(t, a.GRPC, credentials.NewTLS(&tls.Config{RootCAs: pool})), "trace.v1.TraceService", body, "authorization", "Bearer s3cret"); err == nil {
			t.Error("gRPC without a client certificate was accepted")
		}
	})
}

// TestMemoryPressureHoldsReservations reads the process's real memory
// figures: a gauge whose limit is below them holds every reservation (it
// waits, then errMemoryPressure, which is a 429), one above them does not,
// and a waiting reservation goes through once the memory is under the limit.
func TestMemoryPressureHoldsReservations(t *testing.T) {
	if newMemoryGauge(math.MaxInt64) != nil || newMemoryGauge(0) != nil {
		t.Fatal("a gauge without a limit should be nil")
	}
	free := newBudget(1<<20, newMemoryGauge(1<<62))
	if err := free.reserve(context.Background()).grow(1 << 10); err != nil {
		t.Fatalf("under the limit: %v", err)
	}

	gauge := newMemoryGauge(1) // every process is over one byte
	b := newBudget(1<<20, gauge)
	res := b.reserve(context.Background())
	begin := time.Now()
	err := res.grow(1 << 10)
	if !errors.Is(err, errMemoryPressure) || !errors.Is(err, errOverBudget) || res.held != 0 || b.used.Load() != 0 {
		t.Fatalf("over the limit: %v, held %d, used %d", err, res.held, b.used.Load())
	}
	if waited := time.Since(begin); waited < budgetWait {
		t.Errorf("answered after %v, before budgetWait", waited)
	}
	if rej := (&Receivers{budget: b}).budgetRejection(err, 1<<10); rej.status != http.StatusTooManyRequests || rej.code != codes.ResourceExhausted || !rej.retry {
		t.Errorf("rejection %+v, want a retryable 429", rej)
	}

	done := make(chan error, 1)
	go func() { done <- b.reserve(context.Background()).grow(1 << 10) }()
	time.Sleep(5 * gaugeEvery)
	gauge.limit.Store(1 << 62)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("once under the limit: %v", err)
		}
	case <-time.After(budgetWait + time.Second):
		t.Fatal("the reservation was not taken once the memory was under the limit")
	}
	if b.used.Load() != 1<<10 {
		t.Errorf("used %d, want 1 KiB", b.used.Load())
	}
}
