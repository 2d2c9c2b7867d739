package jfr

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestWaitSocket: the wait sees a socket that shows up within it, reports
// one that does not, and stops at the context's end.
func TestWaitSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), ".java_pid1")
	made := make(chan net.Listener, 1)
	go func() {
		time.Sleep(50 * time.Millisecond)
		l, err := net.Listen("unix", sock)
		if err != nil {
			l = nil
		}
		made <- l
	}()
	ok, err := waitSocket(context.Background(), sock, 2*time.Second)
	if l := <-made; l != nil {
		defer l.Close()
	}
	if !ok || err != nil {
		t.Fatalf("socket made after 50 ms: %v, %v", ok, err)
	}
	missing := filepath.Join(t.TempDir(), ".java_pid2")
	if ok, err := waitSocket(context.Background(), missing, 30*time.Millisecond); ok || err != nil {
		t.Fatalf("no socket: %v, %v", ok, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ok, err := waitSocket(ctx, missing, time.Second); ok || err == nil {
		t.Fatalf("cancelled: %v, %v", ok, err)
	}
}
