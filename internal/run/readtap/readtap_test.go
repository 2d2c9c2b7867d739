//go:build linux

package readtap

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/bpftest"
)

func openTap(t *testing.T) *Tap {
	t.Helper()
	bpftest.SkipShort(t, "root and BPF")
	tap, err := Open(1 << 20)
	if errors.Is(err, ErrUnavailable) {
		bpftest.Missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tap.Close() })
	return tap
}

func drain(t *testing.T, tap *Tap) []*Read {
	t.Helper()
	var out []*Read
	if err := tap.Drain(func(r *Read) { out = append(out, r) }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTapCopiesWatchedReads reads through read(2) and recvfrom(2) on a
// watched socket and an unwatched one, small and large, in this process.
func TestTapCopiesWatchedReads(t *testing.T) {
	tap := openTap(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	defer unix.Close(other[0])
	defer unix.Close(other[1])
	for _, fd := range []int{fds[0], fds[1], other[0], other[1]} {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	}
	pid := os.Getpid()
	if err := tap.Watch(pid, fds[0]); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 100_000)
	rand.New(rand.NewSource(1)).Read(big)
	buf := make([]byte, 200_000)
	readAll := func(fd int, want int, recv bool) []byte {
		var got []byte
		for len(got) < want {
			var n int
			var err error
			if recv {
				n, _, err = unix.Recvfrom(fd, buf[:want-len(got)], 0)
			} else {
				n, err = unix.Read(fd, buf[:want-len(got)])
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, buf[:n]...)
		}
		return got
	}
	unix.Write(other[1], []byte("not watched"))
	readAll(other[0], 11, false)
	unix.Write(fds[1], []byte("GET / HTTP/1.1\r\n\r\n"))
	readAll(fds[0], 18, false)
	unix.Write(fds[1], []byte("peek"))
	if _, _, err := unix.Recvfrom(fds[0], buf[:4], unix.MSG_PEEK); err != nil {
		t.Fatal(err)
	}
	readAll(fds[0], 4, true)
	if _, err := unix.Write(fds[1], big); err != nil {
		t.Fatal(err)
	}
	readAll(fds[0], len(big), false)

	reads := drain(t, tap)
	var got []byte
	for i, r := range reads {
		if r.Tgid != pid || r.Tid != unix.Gettid() || r.FD != fds[0] || r.Incomplete || r.Seq != uint32(i) || r.Mono == 0 {
			t.Errorf("read %d: %+v (want pid %d tid %d fd %d seq %d, complete)", i, *r, pid, unix.Gettid(), fds[0], i)
		}
		got = append(got, r.Data...)
	}
	want := append([]byte("GET / HTTP/1.1\r\n\r\npeek"), big...)
	if !bytes.Equal(got, want) {
		t.Fatalf("copied %d bytes in %d reads, want %d bytes (peeks and the unwatched socket left out)", len(got), len(reads), len(want))
	}
	if len(drain(t, tap)) != 0 {
		t.Error("a second drain returned reads again")
	}

	// Longer than the copy limit: flagged, not silently cut.
	huge := make([]byte, 150_000)
	if err := unix.SetNonblock(fds[0], false); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(fds[1], huge); err != nil {
		t.Fatal(err)
	}
	n := 0
	for n < len(huge) {
		m, err := unix.Read(fds[0], buf[:len(huge)-n])
		if err != nil {
			t.Fatal(err)
		}
		n += m
	}
	reads = drain(t, tap)
	sawTrunc := false
	for _, r := range reads {
		if len(r.Data) > 8192*16 {
			t.Errorf("a read copied %d bytes, more than the limit", len(r.Data))
		}
		sawTrunc = sawTrunc || r.Incomplete
	}
	if len(reads) == 0 {
		t.Fatal("no reads of the 150 kB message")
	}
	t.Logf("150 kB message in %d reads, truncated flag seen: %v, lost: %d", len(reads), sawTrunc, tap.Lost())

	tap.Unwatch(pid, fds[0])
	unix.Write(fds[1], []byte("after"))
	readAll(fds[0], 5, false)
	if r := drain(t, tap); len(r) != 0 {
		t.Errorf("%d reads after Unwatch", len(r))
	}
}
