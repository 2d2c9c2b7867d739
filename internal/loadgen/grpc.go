package loadgen

import (
	"context"
	"fmt"
	"net"
	"net/url"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// DefaultGRPCMethod is the method the demo's services serve and call
// (demo/services/go/grpc.go).
const DefaultGRPCMethod = "/rootline.demo.Svc/Call"

// rawCodec passes gRPC messages through as bytes, under the name "proto" so
// that the content-type is the one a generated client sends.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// GRPCTarget is the host:port a URL (http://host:port/… or grpc://host:port)
// names, for a gRPC client.
func GRPCTarget(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("loadgen: URL %q: %w", u, err)
	}
	if _, _, err := net.SplitHostPort(p.Host); err != nil || p.Hostname() == "" {
		return "", fmt.Errorf("loadgen: URL %q: want scheme://host:port", u)
	}
	return p.Host, nil
}

// newGRPCSender dials cfg.URL's host:port (lazily: the first call connects)
// and calls cfg.GRPCMethod with an empty message.
func newGRPCSender(cfg Config) (sender, func(), error) {
	target, err := GRPCTarget(cfg.URL)
	if err != nil {
		return nil, nil, err
	}
	method := cfg.GRPCMethod
	if method == "" {
		method = DefaultGRPCMethod
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithNoProxy(),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		return nil, nil, fmt.Errorf("loadgen: %w", err)
	}
	return func(ctx context.Context) error {
		req, resp := []byte{}, []byte(nil)
		err := cc.Invoke(ctx, method, &req, &resp)
		switch status.Code(err) {
		case codes.OK:
			return nil
		case codes.DeadlineExceeded:
			return fmt.Errorf("%w: %v", errTimeout, err)
		}
		return err
	}, func() { cc.Close() }, nil
}
