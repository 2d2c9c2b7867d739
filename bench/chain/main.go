// Command chain is one hop of the overhead benchmark of `rootline run`
// (bench/runoverhead): a net/http service that spins SPIN_US of CPU per
// request and calls CALL (if set). With OTEL=1 it is instrumented in code with
// the OpenTelemetry Go SDK instead (otelhttp on server and client, a batch
// span processor exporting OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT) — the
// comparison the Rbinder paper ("Transparent Tracing of Microservice-based Applications") made
// against code instrumentation.
//
// It is its own module so that the OpenTelemetry SDK stays out of Rootline's
// dependencies.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

func main() {
	spin, _ := strconv.Atoi(os.Getenv("SPIN_US"))
	call := os.Getenv("CALL")
	instrumented := os.Getenv("OTEL") == "1"
	var transport http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: 256}
	if instrumented {
		exp, err := otlptracehttp.New(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
			sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(os.Getenv("SERVICE_NAME")))))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(propagation.TraceContext{})
		transport = otelhttp.NewTransport(transport)
	}
	client := &http.Client{Transport: transport}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if spin > 0 {
			end := time.Now().Add(time.Duration(spin) * time.Microsecond)
			for time.Now().Before(end) {
			}
		}
		if call != "" {
			req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, call+"/", nil)
			resp, err := client.Do(req)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	if instrumented {
		h = otelhttp.NewHandler(h, "hop")
	}
	l, err := net.Listen("tcp", os.Getenv("LISTEN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening", l.Addr().(*net.TCPAddr).Port)
	_ = http.Serve(l, h)
}
