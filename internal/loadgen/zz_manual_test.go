package loadgen

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestManualGRPC(t *testing.T) {
	u := os.Getenv("MANUAL_URL")
	if u == "" {
		t.Skip()
	}
	for i := 0; i < 3; i++ {
		t.Log(Once(context.Background(), Config{URL: u, GRPC: true}))
	}
	res, err := Run(context.Background(), Config{URL: u, GRPC: true, Phases: []Phase{{Rate: 20, Duration: 3 * time.Second}}})
	t.Log(res.Total.String(), err)
}
