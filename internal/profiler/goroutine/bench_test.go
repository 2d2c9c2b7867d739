//go:build linux && amd64

package goroutine

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rootline/rootline/internal/bpftest"
)

// BenchmarkTrackedSwitch measures what the uprobe costs a Go program: the
// CPU time of pingpong (N channel passes: each parks one goroutine and
// readies the other) tracked and untracked, side by side in each round.
// It reports the tracked program's extra CPU per event the tracker read
// (ns/event: the uprobe's trap and the BPF program), the reader's CPU per
// event (reader-ns/event: this process's CPU over the runs, which also
// starts them, per event) and the events per pass.
//
//	go test -run x -bench TrackedSwitch -benchtime 5x ./internal/profiler/goroutine/
func selfCPU() int64 {
	var r syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return r.Utime.Nano() + r.Stime.Nano()
}

func BenchmarkTrackedSwitch(b *testing.B) {
	bpftest.RequireBPF(b)
	bin := filepath.Join(b.TempDir(), "pingpong")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/pingpong").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	tr, err := New()
	bpftest.Require(b, err)
	var once sync.Once
	closeTracker := func() { once.Do(func() { _ = tr.Close() }) }
	defer closeTracker()
	read := make(chan int, 1)
	go func() {
		n := 0
		var e Event
		for {
			if err := tr.Read(&e); err != nil {
				read <- n
				return
			}
			n++
		}
	}()
	const passes = 200_000
	run := func(tracked bool) int64 {
		cmd := exec.Command(bin, strconv.Itoa(passes))
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		rd := bufio.NewReader(out)
		if l, err := rd.ReadString('\n'); err != nil || l != "ready\n" {
			b.Fatalf("pingpong: %q %v", l, err)
		}
		pid := uint32(cmd.Process.Pid)
		if tracked {
			if err := tr.Add(pid); err != nil {
				b.Fatal(err)
			}
		}
		_, _ = in.Write([]byte("go\n"))
		l, err := rd.ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		_ = cmd.Wait()
		if tracked {
			_ = tr.Remove(pid)
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(l), 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		return ns
	}
	var plain, tracked int64
	self0 := selfCPU()
	for b.Loop() {
		plain += run(false)
		tracked += run(true)
	}
	self := selfCPU() - self0
	closeTracker()
	events := <-read
	b.ReportMetric(float64(tracked-plain)/float64(events), "ns/event")
	b.ReportMetric(float64(self)/float64(events), "reader-ns/event")
	b.ReportMetric(float64(events)/(float64(b.N)*passes), "events/pass")
	b.ReportMetric(float64(plain)/(float64(b.N)*passes), "untracked-ns/pass")
}
