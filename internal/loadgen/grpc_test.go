package loadgen

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcServer serves every method with handle on a real grpc-go server and
// returns its URL.
func grpcServer(t *testing.T, handle func(method string, ss grpc.ServerStream) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(ss)
		var req []byte
		if err := ss.RecvMsg(&req); err != nil {
			return err
		}
		return handle(method, ss)
	}))
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return "http://" + ln.Addr().String() + "/"
}

// TestRunGRPC: every call is a unary call of the demo's method on one
// connection, OK counts as ok, any other status as an error, and
// DEADLINE_EXCEEDED (the client's deadline) as a timeout.
func TestRunGRPC(t *testing.T) {
	var n, slow atomic.Int64
	var mu sync.Mutex
	methods := map[string]int{}
	u := grpcServer(t, func(method string, ss grpc.ServerStream) error {
		mu.Lock()
		methods[method]++
		if md, ok := metadata.FromIncomingContext(ss.Context()); ok {
			if ct := md.Get("content-type"); len(ct) != 1 || ct[0] != "application/grpc+proto" {
				t.Errorf("content-type %v", ct)
			}
		}
		mu.Unlock()
		switch i := n.Add(1); {
		case i%5 == 0:
			return status.Error(codes.Unavailable, "a fail [b=14]")
		case i%7 == 0:
			slow.Add(1)
			<-ss.Context().Done() // past the client's deadline
			return ss.Context().Err()
		}
		out := []byte("a ok []\n")
		return ss.SendMsg(&out)
	})
	res, err := Run(context.Background(), Config{URL: u, GRPC: true, Timeout: 300 * time.Millisecond,
		Phases: []Phase{{Rate: 100, Duration: 700 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Total
	t.Log(r)
	if r.Scheduled != 70 || r.Sent != 70 || n.Load() != 70 {
		t.Fatalf("%s; server saw %d calls, want 70", r, n.Load())
	}
	fails := int64(70 / 5)
	if r.Timeouts != slow.Load() || r.Errors != fails+slow.Load() || r.OK != 70-fails-slow.Load() {
		t.Errorf("%s: want %d timeouts and %d other errors", r, slow.Load(), fails)
	}
	if len(methods) != 1 || methods[DefaultGRPCMethod] != 70 {
		t.Errorf("methods called: %v, want %s only", methods, DefaultGRPCMethod)
	}
}

func TestOnceGRPC(t *testing.T) {
	u := grpcServer(t, func(method string, ss grpc.ServerStream) error {
		if method != "/x.Y/Z" {
			return status.Error(codes.Unimplemented, method)
		}
		out := []byte("ok")
		return ss.SendMsg(&out)
	})
	ctx := context.Background()
	if err := Once(ctx, Config{URL: u, GRPC: true, GRPCMethod: "/x.Y/Z"}); err != nil {
		t.Errorf("Once: %v", err)
	}
	if err := Once(ctx, Config{URL: u, GRPC: true}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Once of another method: %v, want UNIMPLEMENTED", err)
	}
	for _, bad := range []string{"http://nohostport/", "::", "grpc://:80"} {
		if err := Once(ctx, Config{URL: bad, GRPC: true}); err == nil {
			t.Errorf("Once(%q) accepted", bad)
		}
	}
}
