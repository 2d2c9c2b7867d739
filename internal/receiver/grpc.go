package receiver

import (
	"context"
	"errors"

	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rootline/rootline/internal/pipeline"
)

func (r *Receivers) newGRPCServer() *grpc.Server {
	// MaxRecvMsgSize also bounds the decompressed size of a gzip message.
	s := grpc.NewServer(grpc.MaxRecvMsgSize(int(r.cfg.MaxRequestBytes)))
	ptraceotlp.RegisterGRPCServer(s, &otlpGRPC{r: r})
	pmetricotlp.RegisterGRPCServer(s, &otlpMetricsGRPC{r: r}) // otlpmetrics.go
	return s
}

var _ ptraceotlp.GRPCServer = (*otlpGRPC)(nil)

// otlpGRPC serves the OTLP TraceService.
type otlpGRPC struct {
	ptraceotlp.UnimplementedGRPCServer
	r *Receivers
}

// Export translates and stores one request. Messages over the size limit never
// get here: gRPC answers them RESOURCE_EXHAUSTED itself.
func (s *otlpGRPC) Export(ctx context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	td := req.Traces()
	spans, err := FromPdata(td)
	if err != nil {
		s.r.metrics.observe(receiverOTLPGRPC, outcomeInvalid, td.SpanCount())
		var invalid *InvalidError
		errors.As(err, &invalid)
		s.r.logRefused(receiverOTLPGRPC, outcomeInvalid, int(codes.InvalidArgument), invalid)
		return ptraceotlp.ExportResponse{}, status.Error(codes.InvalidArgument, err.Error())
	}
	o, err := s.r.consume(ctx, receiverOTLPGRPC, spans)
	if o == outcomeAccepted {
		return ptraceotlp.NewExportResponse(), nil
	}
	return ptraceotlp.ExportResponse{}, grpcStatus(o, err).Err()
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
