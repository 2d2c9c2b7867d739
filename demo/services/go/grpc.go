package main

// The service's gRPC mode (PROTOCOL=grpc): the same work, faults and calls as
// the HTTP handler, over one unary gRPC method on h2c. Messages are raw bytes
// (no generated code, like Svc.java and svc.py): the request is ignored, the
// answer is the HTTP mode's body text. Must behave like the gRPC modes of
// Svc.java and svc.py.

import (
	"context"
	"fmt"
	"log"
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

// grpcMethod is the method the services call downstream (and the demo's
// load generator calls); a service answers any method the same way.
const grpcMethod = "/rootline.demo.Svc/Call"

// rawCodec passes gRPC messages through as bytes. It is named "proto" so
// that the content-type stays application/grpc(+proto), as a generated
// client would send.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// serveGRPC serves the gRPC mode on ln until it fails.
func (s *service) serveGRPC(ln net.Listener, admin string) error {
	conns := make([]*grpc.ClientConn, len(s.calls))
	for i, u := range s.calls {
		target, err := grpcTarget(u)
		if err != nil {
			return fmt.Errorf("%s: CALLS: %v", s.name, err)
		}
		// One HTTP/2 connection per downstream, its streams multiplexed:
		// what gRPC clients do.
		if conns[i], err = grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithNoProxy(), grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}))); err != nil {
			return fmt.Errorf("%s: CALLS: %s: %v", s.name, u, err)
		}
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}),
		grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error { return s.serveCall(ss, conns) }))
	log.Printf("svc-go %s listening on %s (admin %s), protocol grpc, calls %v, work %q, forward-headers %v, pid %d",
		s.name, ln.Addr(), admin, s.calls, os.Getenv("WORK"), s.forward, os.Getpid())
	return srv.Serve(ln)
}

// serveCall answers one call: the work, then each downstream in order. A
// failed downstream makes the call fail with UNAVAILABLE (the gRPC status of
// HTTP's 502 Bad Gateway), the body text as its message.
func (s *service) serveCall(ss grpc.ServerStream, conns []*grpc.ClientConn) error {
	var req []byte
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	s.requestWork()
	ok := true
	var parts []string
	in, _ := metadata.FromIncomingContext(ss.Context())
	for i, cc := range conns {
		code := s.callGRPC(ss.Context(), in, cc)
		if code != codes.OK {
			ok = false
		}
		parts = append(parts, hostOf(s.calls[i])+"="+strconv.Itoa(int(code)))
	}
	word := "ok"
	if !ok {
		word = "fail"
	}
	body := fmt.Sprintf("%s %s [%s]\n", s.name, word, strings.Join(parts, " "))
	if !ok {
		return status.Error(codes.Unavailable, body)
	}
	out := []byte(body)
	return ss.SendMsg(&out)
}

// callGRPC makes one call downstream and returns its status code; a
// transport error is a status too (UNAVAILABLE, DEADLINE_EXCEEDED).
func (s *service) callGRPC(ctx context.Context, in metadata.MD, cc *grpc.ClientConn) codes.Code {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if s.forward {
		var kv []string
		for _, h := range forwarded {
			if v := in.Get(h); len(v) > 0 {
				kv = append(kv, h, v[0])
			}
		}
		if len(kv) > 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, kv...)
		}
	}
	req, resp := []byte{}, []byte(nil)
	return status.Code(cc.Invoke(ctx, grpcMethod, &req, &resp))
}

// grpcTarget is the host:port of a CALLS URL (http://host:port/path): the
// mesh gives the same CALLS to both modes.
func grpcTarget(u string) (string, error) {
	h := strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "grpc://")
	if i := strings.IndexByte(h, '/'); i >= 0 {
		h = h[:i]
	}
	if _, _, err := net.SplitHostPort(h); err != nil {
		return "", fmt.Errorf("%q: want http://host:port/ or grpc://host:port", u)
	}
	return h, nil
}
