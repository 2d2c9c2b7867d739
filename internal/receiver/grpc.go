package receiver

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rootline/rootline/internal/pipeline"
)

// The OTLP/gRPC services are served from raw message bytes (rawCodec) rather
// than through pdata's generated handlers, so that a request goes through the
// same steps as on OTLP/HTTP — credentials, a slot, its read timeout, the
// memory reservation, the pre-scan — before anything decodes it. gRPC itself
// enforces the message size (RESOURCE_EXHAUSTED past MaxRequestBytes, gzip
// included) and reads a message as its frames arrive.

// gRPC transport bounds: the window of unread data per stream and per
// connection (fixed windows: gRPC's dynamic ones may grow to 16 MiB), pings a
// client may send, and when idle or dead connections are closed.
const (
	grpcWindow           = 1 << 20
	grpcMinPingInterval  = 10 * time.Second
	grpcPingEvery        = time.Minute
	grpcPingTimeout      = 20 * time.Second
	grpcMaxHeaderListLen = 64 << 10
)

func (r *Receivers) newGRPCServer() *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(rawCodec{}),
		// MaxRecvMsgSize also bounds the decompressed size of a gzip message.
		grpc.MaxRecvMsgSize(int(r.cfg.MaxRequestBytes)),
		grpc.MaxConcurrentStreams(uint32(r.cfg.MaxConcurrentRequests)),
		grpc.MaxHeaderListSize(grpcMaxHeaderListLen),
		grpc.InitialWindowSize(grpcWindow),
		grpc.InitialConnWindowSize(grpcWindow),
		// The TLS handshake and HTTP/2 preface of a new connection.
		grpc.ConnectionTimeout(r.cfg.ReadHeaderTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcMinPingInterval, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: r.cfg.IdleTimeout,
			Time:              grpcPingEvery,
			Timeout:           grpcPingTimeout,
		}),
		grpc.InTapHandle(readDeadlineTap),
	}
	if r.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(r.tls)))
	}
	s := grpc.NewServer(opts...)
	s.RegisterService(traceServiceDesc, r)
	s.RegisterService(metricsServiceDesc, r)
	return s
}

// otlpGRPCServer is what the service descriptions call.
type otlpGRPCServer interface {
	exportGRPC(ctx context.Context, dec func(any) error, sig signal) (any, error)
}

var _ otlpGRPCServer = (*Receivers)(nil)

// otlpServiceDesc describes an OTLP collector service (opentelemetry/proto/
// collector/<signal>/v1/<signal>_service.proto) with its one method,
// Export, over raw messages.
func otlpServiceDesc(name, proto string, sig signal) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: name,
		HandlerType: (*otlpGRPCServer)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Export",
			Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				return srv.(otlpGRPCServer).exportGRPC(ctx, dec, sig)
			},
		}},
		Metadata: proto,
	}
}

var (
	traceServiceDesc = otlpServiceDesc("opentelemetry.proto.collector.trace.v1.TraceService",
		"opentelemetry/proto/collector/trace/v1/trace_service.proto", tracesSignal)
	metricsServiceDesc = otlpServiceDesc("opentelemetry.proto.collector.metrics.v1.MetricsService",
		"opentelemetry/proto/collector/metrics/v1/metrics_service.proto", metricsSignal)
)

// rawMessage is a gRPC message as bytes: a request's are held (data) until
// the handler has reserved memory for them; a response's are out.
type rawMessage struct {
	data mem.BufferSlice
	out  []byte
}

// rawCodec hands messages to the handlers undecoded.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*rawMessage)
	if !ok {
		return nil, status.Errorf(codes.Internal, "cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(m.out)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return status.Errorf(codes.Internal, "cannot unmarshal into %T", v)
	}
	data.Ref() // released by the handler
	m.data = data
	return nil
}

// errReadTimeout cancels an RPC whose message did not arrive in time.
var errReadTimeout = errors.New("request message did not arrive within the read timeout (receiver.read_timeout)")

type cancelKey struct{}

// readDeadlineTap gives each RPC a context the handler can cancel: the only
// way to end a read gRPC is blocked in (a client that announced a large
// message and went quiet). The client then sees its stream cancelled
// (CANCELLED, which OTLP clients retry); the receiver counts a timeout.
func readDeadlineTap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	return context.WithValue(ctx, cancelKey{}, cancel), nil
}

// exportGRPC serves one Export of sig: credentials, a slot, the message read
// within the read timeout, its memory reserved, then the steps OTLP/HTTP
// takes (export.go).
func (r *Receivers) exportGRPC(ctx context.Context, dec func(any) error, sig signal) (any, error) {
	const rcv = receiverOTLPGRPC
	if rej := r.authenticate(authorization(ctx), verifiedPeer(ctx)); rej != nil {
		return nil, r.refuseGRPC(rcv, rej)
	}
	s := r.slots[rcv]
	if !s.tryTake() {
		return nil, r.refuseGRPC(rcv, r.busy(rcv))
	}
	defer s.give()

	var msg rawMessage
	if cancel, ok := ctx.Value(cancelKey{}).(context.CancelCauseFunc); ok {
		t := time.AfterFunc(r.cfg.ReadTimeout, func() { cancel(errReadTimeout) })
		err := dec(&msg)
		t.Stop()
		if err != nil {
			return nil, r.readFailed(ctx, err)
		}
	} else if err := dec(&msg); err != nil {
		return nil, r.readFailed(ctx, err)
	}
	res := r.budget.reserve(ctx)
	defer res.release()
	size := int64(msg.data.Len())
	if err := res.grow(size); err != nil {
		msg.data.Free()
		return nil, r.refuseGRPC(rcv, r.budgetRejection(err, size))
	}
	body := msg.data.Materialize()
	msg.data.Free()

	switch sig {
	case metricsSignal:
		exp := pmetricotlp.NewExportRequest()
		if rej := r.decodeOTLP(body, mediaProto, sig, res, exp); rej != nil {
			return nil, r.refuseGRPC(rcv, rej)
		}
		if rej := r.exportMetrics(ctx, rcv, exp.Metrics()); rej != nil {
			return nil, r.refuseGRPC(rcv, rej)
		}
		out, _ := pmetricotlp.NewExportResponse().MarshalProto()
		return &rawMessage{out: out}, nil
	default:
		exp := ptraceotlp.NewExportRequest()
		if rej := r.decodeOTLP(body, mediaProto, sig, res, exp); rej != nil {
			return nil, r.refuseGRPC(rcv, rej)
		}
		rej, o, err := r.exportTraces(ctx, rcv, exp.Traces())
		if rej != nil {
			return nil, r.refuseGRPC(rcv, rej)
		}
		if o != outcomeAccepted {
			return nil, grpcStatus(o, err).Err()
		}
		out, _ := ptraceotlp.NewExportResponse().MarshalProto()
		return &rawMessage{out: out}, nil
	}
}

// readFailed records an RPC whose message could not be read and returns
// what to answer.
func (r *Receivers) readFailed(ctx context.Context, err error) error {
	o := outcomeCanceled
	switch {
	case errors.Is(context.Cause(ctx), errReadTimeout):
		o, err = outcomeTimeout, status.Error(codes.DeadlineExceeded, errReadTimeout.Error())
	case status.Code(err) == codes.ResourceExhausted:
		o = outcomeTooLarge
	}
	r.metrics.observe(receiverOTLPGRPC, o, 0)
	return err
}

// refuseGRPC records and logs a refused RPC and returns its status.
func (r *Receivers) refuseGRPC(receiver string, rej *rejection) error {
	r.metrics.observe(receiver, rej.outcome, rej.spans)
	r.logRefused(receiver, rej.outcome, int(rej.code), rej.invalid)
	return rej.grpcStatus().Err()
}

// authorization is the "authorization" metadata of an RPC.
func authorization(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) > 0 {
		return v[0]
	}
	return ""
}

// verifiedPeer reports whether the RPC's connection presented a client
// certificate the client CA verified.
func verifiedPeer(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	return ok && len(info.State.VerifiedChains) > 0
}

// grpcStatus is the answer to a refused request, as the OTLP specification
// asks: retryable codes for back-pressure, with RetryInfo when the queue is
// full. Messages never quote the payload or the consumer's error.
func grpcStatus(o outcome, err error) *status.Status {
	switch o {
	case outcomeQueueFull:
		st := status.New(codes.ResourceExhausted, "span intake queue is full, retry later")
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(pipeline.RetryAfter)}); err == nil {
			return d
		}
		return st
	case outcomeShuttingDown:
		return status.New(codes.Unavailable, "server is shutting down")
	case outcomeUnavailable:
		// A full disk or an I/O error: OTLP clients retry UNAVAILABLE, and
		// the spans were not stored, so a retry loses and duplicates nothing.
		st := status.New(codes.Unavailable, "the store cannot write now, retry later")
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(pipeline.RetryAfter)}); err == nil {
			return d
		}
		return st
	case outcomeCanceled:
		if errors.Is(err, context.DeadlineExceeded) {
			return status.New(codes.DeadlineExceeded, "deadline exceeded while storing spans")
		}
		return status.New(codes.Canceled, "request canceled")
	}
	return status.New(codes.Internal, "internal error while storing spans")
}
