// Command grpcchain measures what `rootline run` adds to a call through a
// 3-hop chain of grpc-go services, side by side with the same chain plain
// and instrumented in code with the gRPC OpenTelemetry instrumentation
// (otelgrpc stats handlers on server and client, the OpenTelemetry Go SDK's
// batch span processor exporting OTLP/HTTP).
//
//	grpcchain serve     one hop: LISTEN, CALL (downstream host:port), SPIN_US
//	                    (CPU per call), OTEL=1 (otelgrpc, exporting to
//	                    OTEL_EXPORTER_OTLP_ENDPOINT); prints "listening PORT"
//	grpcchain drive     starts a chain per mode and calls them in turn
//
// drive starts the chains plain (twice: "plain" and "plain-b", the A/A
// control), under `rootline run --mode ptrace` ("rootline") and with otelgrpc
// ("otelgrpc"), every span sent to an OTLP/HTTP sink in this process that
// accepts and drops them. It then makes calls one at a time, the modes taking
// turns call by call (so that each sees the same moments of a noisy machine),
// and prints each mode's latency and its ratio to "plain".
//
// It is its own module so that the OpenTelemetry SDK and otelgrpc stay out
// of Rootline's dependencies.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// raw passes messages through as bytes.
type raw struct{}

func (raw) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (raw) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (raw) Name() string { return "proto" }

const method = "/bench.Chain/Call"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: grpcchain serve | drive [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		serve()
	case "drive":
		drive(os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, "usage: grpcchain serve | drive [flags]")
		os.Exit(2)
	}
}

func serve() {
	spin, _ := strconv.Atoi(os.Getenv("SPIN_US"))
	listen := os.Getenv("LISTEN")
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	var sopts []grpc.ServerOption
	copts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(raw{}))}
	if os.Getenv("OTEL") == "1" {
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
		sopts = append(sopts, grpc.StatsHandler(otelgrpc.NewServerHandler()))
		copts = append(copts, grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
	}
	var down *grpc.ClientConn
	if call := os.Getenv("CALL"); call != "" {
		var err error
		if down, err = grpc.NewClient(call, copts...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sopts = append(sopts, grpc.ForceServerCodec(raw{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		var msg []byte
		if err := ss.RecvMsg(&msg); err != nil {
			return err
		}
		if spin > 0 {
			for end := time.Now().Add(time.Duration(spin) * time.Microsecond); time.Now().Before(end); {
			}
		}
		if down != nil {
			var out []byte
			if err := down.Invoke(ss.Context(), method, &msg, &out); err != nil {
				return err
			}
			msg = out
		}
		return ss.SendMsg(&msg)
	}))
	srv := grpc.NewServer(sopts...)
	fmt.Printf("listening %d\n", ln.Addr().(*net.TCPAddr).Port)
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
		<-ch
		srv.GracefulStop()
	}()
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// chain is one mode's running chain.
type chain struct {
	name  string
	procs []*exec.Cmd
	cc    *grpc.ClientConn
	lats  []time.Duration
	errs  int
}

func drive(args []string) {
	fs := flag.NewFlagSet("drive", flag.ExitOnError)
	rootline := fs.String("rootline", "bin/rootline", "the rootline binary")
	calls := fs.Int("calls", 3000, "calls per mode")
	warm := fs.Int("warmup", 300, "warm-up calls per mode, not counted")
	spin := fs.Int("spin", 1000, "CPU per hop per call (µs)")
	_ = fs.Parse(args)
	self, err := os.Executable()
	if err != nil {
		fatal(err)
	}
	sink := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	})}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal(err)
	}
	go func() { _ = sink.Serve(sl) }()
	sinkURL := "http://" + sl.Addr().String()
	rl, _ := filepath.Abs(*rootline)
	var chains []*chain
	for _, mode := range []string{"plain", "plain-b", "rootline", "otelgrpc"} {
		c := &chain{name: mode}
		chains = append(chains, c)
		defer c.stop()
		call := ""
		for hop := 3; hop >= 1; hop-- {
			argv := []string{self, "serve"}
			if mode == "rootline" {
				argv = append([]string{rl, "run", "--mode", "ptrace", "--service", fmt.Sprintf("hop%d", hop),
					"--server", sinkURL, "--agent", "", "--"}, argv...)
			}
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), "SPIN_US="+strconv.Itoa(*spin), "CALL="+call,
				"SERVICE_NAME="+fmt.Sprintf("hop%d", hop), "OTEL_EXPORTER_OTLP_ENDPOINT="+sinkURL)
			if mode == "otelgrpc" {
				cmd.Env = append(cmd.Env, "OTEL=1")
			}
			cmd.Stderr = os.Stderr
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			out, err := cmd.StdoutPipe()
			if err != nil {
				fatal(err)
			}
			if err := cmd.Start(); err != nil {
				fatal(err)
			}
			c.procs = append(c.procs, cmd)
			port, err := readPort(out)
			if err != nil {
				fatal(fmt.Errorf("%s hop %d: %v", mode, hop, err))
			}
			call = "127.0.0.1:" + strconv.Itoa(port)
		}
		c.cc, err = grpc.NewClient(call, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(raw{})))
		if err != nil {
			fatal(err)
		}
	}
	msg := []byte("0123456789abcdef")
	one := func(c *chain, record bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out []byte
		start := time.Now()
		err := c.cc.Invoke(ctx, method, &msg, &out)
		d := time.Since(start)
		if !record {
			return
		}
		if err != nil {
			c.errs++
			return
		}
		c.lats = append(c.lats, d)
	}
	for i := 0; i < *warm; i++ {
		for _, c := range chains {
			one(c, false)
		}
	}
	for i := 0; i < *calls; i++ {
		for k := range chains {
			one(chains[(i+k)%len(chains)], true)
		}
	}
	base := stats(chains[0].lats)
	fmt.Printf("| mode | calls | errors | mean µs | p50 µs | p95 µs | p99 µs | mean ×plain | p50 ×plain | p95 ×plain |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range chains {
		s := stats(c.lats)
		fmt.Printf("| %s | %d | %d | %.0f | %.0f | %.0f | %.0f | %.3f | %.3f | %.3f |\n", c.name, len(c.lats), c.errs,
			s[0], s[1], s[2], s[3], s[0]/base[0], s[1]/base[1], s[2]/base[2])
	}
}

// readPort reads the rest of a "listening PORT" line.
func readPort(r io.Reader) (int, error) {
	var b [1]byte
	var s strings.Builder
	for {
		if _, err := r.Read(b[:]); err != nil {
			return 0, err
		}
		if b[0] == '\n' {
			break
		}
		s.WriteByte(b[0])
	}
	return strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(s.String(), "listening ")))
}

// stats returns mean, p50, p95 and p99 in µs.
func stats(l []time.Duration) [4]float64 {
	if len(l) == 0 {
		return [4]float64{}
	}
	s := slices.Clone(l)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	q := func(p float64) float64 { return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) }
	return [4]float64{float64(sum.Microseconds()) / float64(len(s)), q(0.5), q(0.95), q(0.99)}
}

func (c *chain) stop() {
	if c.cc != nil {
		c.cc.Close()
	}
	for _, p := range c.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range c.procs {
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "grpcchain:", err)
	os.Exit(1)
}
