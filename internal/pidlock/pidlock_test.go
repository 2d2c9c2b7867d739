package pidlock

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestTake(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	f, err := Take(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file says %q, want our pid", b)
	}
	// flock locks belong to open files: a second open is refused as
	// another process would be.
	_, err = Take(path)
	var held *HeldError
	if !errors.As(err, &held) || held.PID != strconv.Itoa(os.Getpid()) {
		t.Fatalf("second Take: %v, want a HeldError naming pid %d", err, os.Getpid())
	}
	f.Close()
	f, err = Take(path)
	if err != nil {
		t.Fatalf("Take after release: %v", err)
	}
	f.Close()
}
