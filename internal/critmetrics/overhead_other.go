//go:build !linux

package critmetrics

import (
	"context"
	"errors"
	"time"
)

type bpfMeter struct{}

func startBPFMeter() (*bpfMeter, error) { return nil, errors.New("BPF statistics are Linux-only") }

func (m *bpfMeter) Close() error { return nil }

func (m *bpfMeter) measure(context.Context, time.Duration) (*BPFCost, error) {
	return nil, errors.New("BPF statistics are Linux-only")
}
