// Command grpcsvc is an uninstrumented gRPC service (grpc-go, h2c) for
// rootline run's tests, with the contract of ../grpcsvc.py and no tracing
// code: LISTEN=host:port (default
// 127.0.0.1:0); CALL=host:port (optional downstream); TABLE=N (optional: the
// SETTINGS_HEADER_TABLE_SIZE it announces, so that its peers' HPACK encoders
// work in a table of N bytes). Every method is served
// by one generic handler (no generated code: messages are raw bytes). A leaf
// answers with the trace metadata it received, one "name: value" line each;
// a middle service calls CALL with the same method and message and answers
// with the downstream's answer. The message is a command:
//
//	fail        the leaf answers INTERNAL (a trailers-only response)
//	sleep=MS    the leaf sleeps MS milliseconds first
//	meta=N      a middle service adds N bytes of metadata to its call
//	goaway      the leaf answers, then stops gracefully (GOAWAY) and exits
//
// A method whose name ends in "Stream" is server-streaming: the leaf sends
// three messages, a middle service relays what its downstream sends. It
// prints "listening <port>".
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// raw passes messages through as bytes.
type raw struct{}

func (raw) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (raw) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (raw) Name() string { return "proto" }

var echo = []string{"traceparent", "tracestate", "b3"}

func main() {
	listen := os.Getenv("LISTEN")
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var down *grpc.ClientConn
	if call := os.Getenv("CALL"); call != "" {
		down, err = grpc.NewClient(call, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(raw{})))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	opts := []grpc.ServerOption{grpc.ForceServerCodec(raw{})}
	if n, err := strconv.Atoi(os.Getenv("TABLE")); err == nil {
		opts = append(opts, grpc.HeaderTableSize(uint32(n)))
	}
	var srv *grpc.Server
	srv = grpc.NewServer(append(opts, grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(ss)
		var msg []byte
		if err := ss.RecvMsg(&msg); err != nil {
			return err
		}
		streaming := strings.HasSuffix(method, "Stream")
		if down == nil {
			if string(msg) == "goaway" {
				defer func() { go srv.GracefulStop() }()
			}
			return leaf(ss, method, string(msg), streaming)
		}
		ctx, cancel := context.WithTimeout(ss.Context(), 20*time.Second)
		defer cancel()
		if n, err := strconv.Atoi(strings.TrimPrefix(string(msg), "meta=")); err == nil && strings.HasPrefix(string(msg), "meta=") {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-big", strings.Repeat("m", n))
		}
		cs, err := down.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
		if err != nil {
			return err
		}
		if err := cs.SendMsg(&msg); err != nil {
			return err
		}
		_ = cs.CloseSend()
		for {
			var out []byte
			if err := cs.RecvMsg(&out); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
			if err := ss.SendMsg(&out); err != nil {
				return err
			}
		}
	}))...)
	fmt.Printf("listening %d\n", ln.Addr().(*net.TCPAddr).Port)
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func leaf(ss grpc.ServerStream, method, msg string, streaming bool) error {
	if ms, err := strconv.Atoi(strings.TrimPrefix(msg, "sleep=")); err == nil && strings.HasPrefix(msg, "sleep=") {
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	if msg == "fail" {
		return status.Error(codes.Internal, "asked to fail")
	}
	md, _ := metadata.FromIncomingContext(ss.Context())
	var b strings.Builder
	fmt.Fprintf(&b, "path: %s\n", method)
	for _, k := range echo {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(md.Get(k), ","))
	}
	out := []byte(b.String())
	n := 1
	if streaming {
		n = 3
	}
	for range n {
		if err := ss.SendMsg(&out); err != nil {
			return err
		}
	}
	return nil
}
