package kmetrics

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/procfs"
)

// These tests load bpf/kmetrics.c and run real workloads in cgroups they
// create (and remove). They need root; they skip without BPF, and fail
// instead under ROOTLINE_REQUIRE_BPF=1.

func newBPFManager(t *testing.T) *Manager {
	t.Helper()
	bpftest.RequireBPF(t)
	k, err := LoadKernel()
	if err != nil {
		bpftest.Missing(t, err.Error())
	}
	m, err := New(k, Options{})
	if err != nil {
		k.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

var cgroupSeq atomic.Int64

// newCgroup creates a cgroup in the v2 hierarchy, or the v1 cpu one, and
// removes it at cleanup (its processes have exited by then).
func newCgroup(t *testing.T, cg Cgroups, v1 bool) Container {
	t.Helper()
	root := cg.V2Root
	if v1 {
		root = cg.V1CPURoot
	}
	if root == "" {
		bpftest.Missing(t, fmt.Sprintf("no cgroup hierarchy (v1=%v) mounted", v1))
	}
	name := fmt.Sprintf("rootline-kmtest-%d-%d", os.Getpid(), cgroupSeq.Add(1))
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		bpftest.Missing(t, "create cgroup: "+err.Error())
	}
	t.Cleanup(func() {
		for range 50 {
			if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("cgroup %s not removed", dir)
	})
	c, err := cg.PathContainer(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func cgroupDir(cg Cgroups, c Container) string {
	if c.V1 {
		return filepath.Join(cg.V1CPURoot, c.Path)
	}
	return filepath.Join(cg.V2Root, c.Path)
}

// child is a workload process (runChild) in a cgroup.
type child struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	pid   int
	cdone chan struct{}
}

// startChild starts the test binary as a workload (prefix: e.g. taskset),
// moves it into c and returns once it is there.
func startChild(t *testing.T, cg Cgroups, c Container, prefix ...string) *child {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{}, prefix...), self)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := &child{t: t, cmd: cmd, in: in, out: bufio.NewReader(outp), pid: cmd.Process.Pid, cdone: make(chan struct{})}
	t.Cleanup(ch.stop)
	if line := ch.line(); line != "ready" {
		t.Fatalf("child said %q", line)
	}
	if err := os.WriteFile(filepath.Join(cgroupDir(cg, c), "cgroup.procs"), []byte(strconv.Itoa(ch.pid)), 0); err != nil {
		t.Fatalf("move %d into %s: %v", ch.pid, c.Name(), err)
	}
	got, err := cg.PIDContainer(ch.pid)
	if err != nil || got.Key != c.Key {
		t.Fatalf("child container = %+v, %v; want %+v", got, err, c)
	}
	return ch
}

func (c *child) line() string {
	c.t.Helper()
	s, err := c.out.ReadString('\n')
	if err != nil {
		c.t.Fatalf("child: %v", err)
	}
	return strings.TrimSpace(s)
}

// do runs one command and waits for its "ok".
func (c *child) do(cmd string) {
	c.t.Helper()
	fmt.Fprintln(c.in, cmd)
	if s := c.line(); s != "ok" {
		c.t.Fatalf("child %s: %s", cmd, s)
	}
}

func (c *child) stop() {
	if c.cmd.ProcessState != nil {
		return
	}
	fmt.Fprintln(c.in, "exit")
	c.in.Close()
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
}

// schedstat reads the on-CPU ns (field 0) or run-queue wait ns (field 1) of
// every thread of pid, by thread.
func schedstat(t *testing.T, pid int, field ...int) map[string]uint64 {
	t.Helper()
	f := 0
	if len(field) > 0 {
		f = field[0]
	}
	st, err := procfs.TaskSchedstats(pid)
	if err != nil || len(st) == 0 {
		t.Fatalf("schedstat of %d: %v", pid, err)
	}
	out := map[string]uint64{}
	for tid, s := range st {
		out[strconv.Itoa(tid)] = uint64([]time.Duration{s.Run, s.Wait}[f])
	}
	return out
}

func delta(before, after map[string]uint64) uint64 {
	var d uint64
	for k, v := range after {
		d += v - before[k]
	}
	return d
}

func series(t *testing.T, m *Manager, c Container, metric Metric) Series {
	t.Helper()
	all, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	var out Series
	for _, s := range all {
		if s.Metric == metric && s.CgroupID == c.Key&^V1Bit && s.Container == c.Name() {
			out.Count += s.Count
			out.Sum += s.Sum
			for i := range s.Buckets {
				out.Buckets[i] += s.Buckets[i]
			}
		}
	}
	return out
}

func enable(t *testing.T, m *Manager, c Container, rate uint32, metrics ...Metric) {
	t.Helper()
	on := true
	var names []string
	for _, mt := range metrics {
		names = append(names, mt.String())
	}
	if _, err := m.Configure(ConfigRequest{Container: c.Name(), Metrics: names, Enabled: &on, Rate: &rate}); err != nil {
		t.Fatal(err)
	}
}

func TestBPFOnCPUMatchesSchedstat(t *testing.T) {
	m := newBPFManager(t)
	for _, v1 := range []bool{false, true} {
		t.Run(map[bool]string{false: "cgroup-v2", true: "cgroup-v1-cpu"}[v1], func(t *testing.T) {
			c := newCgroup(t, m.cg, v1)
			enable(t, m, c, 1, OnCPU, OffCPU)
			ch := startChild(t, m.cg, c)
			before := schedstat(t, ch.pid)
			excl0 := bpftest.ExcludedTime(t)
			base := series(t, m, c, OnCPU)
			ch.do("burn 300")
			time.Sleep(50 * time.Millisecond) // every thread is switched out: intervals closed
			want := delta(before, schedstat(t, ch.pid))
			got := series(t, m, c, OnCPU)
			excl := bpftest.ExcludedTime(t) - excl0
			bpf := got.Sum - base.Sum
			t.Logf("on-CPU: BPF %d ns in %d intervals, schedstat %d ns (%.2f%%); irq+softirq+steal time on the host meanwhile %v",
				bpf, got.Count-base.Count, want, 100*(float64(bpf)-float64(want))/float64(want), excl)
			if want < uint64(300*time.Millisecond) {
				t.Fatalf("schedstat says the child ran %v only", time.Duration(want))
			}
			// schedstat counts the task clock, which leaves out interrupt and
			// steal time spent while the thread was on the CPU; BPF's
			// intervals are wall-clock. Allow 2 % plus what the whole host
			// spent in those meanwhile (0 on a quiet machine) above, and 8 %
			// below. BPF reads 0.2–0.4 % low, and about one run in ten
			// 5–6 % low (2 of 18 runs with -race on an idle machine:
			// −5.4 %, −6.2 %; once 2.8 % under the parallel test run):
			// ~17 ms, about one slice of the child's burning thread, lost —
			// not yet explained (docs/critical-metrics.md, Limits).
			if d := float64(bpf) - float64(want); d < -0.08*float64(want) || d > 0.02*float64(want)+float64(excl) {
				t.Errorf("BPF on-CPU %v, schedstat %v: off by more than −8 %%/+2 %% (+%v irq/steal)", time.Duration(bpf), time.Duration(want), excl)
			}
			if off := series(t, m, c, OffCPU); off.Count == 0 {
				t.Error("no off-CPU intervals for a child that blocked on stdin")
			}
		})
	}
}

func TestBPFRunqLatencyWithTwoHogsOnOneCPU(t *testing.T) {
	m := newBPFManager(t)
	if _, err := exec.LookPath("taskset"); err != nil {
		bpftest.Missing(t, "taskset not installed")
	}
	c := newCgroup(t, m.cg, false)
	enable(t, m, c, 1, RunqLatency)
	a := startChild(t, m.cg, c, "taskset", "-c", "0")
	b := startChild(t, m.cg, c, "taskset", "-c", "0")
	wa, wb := schedstat(t, a.pid, 1), schedstat(t, b.pid, 1)
	base := series(t, m, c, RunqLatency)
	const spin = 600 * time.Millisecond
	done := make(chan struct{})
	go func() { a.do(fmt.Sprintf("spin %d", spin.Milliseconds())); close(done) }()
	b.do(fmt.Sprintf("spin %d", spin.Milliseconds()))
	<-done
	time.Sleep(50 * time.Millisecond)
	want := delta(wa, schedstat(t, a.pid, 1)) + delta(wb, schedstat(t, b.pid, 1))
	s := series(t, m, c, RunqLatency)
	n, got := s.Count-base.Count, s.Sum-base.Sum
	if n == 0 {
		t.Fatal("no run-queue latency recorded")
	}
	t.Logf("run-queue latency: %d waits, mean %v, total %v; schedstat run_delay total %v (%.1f%%)", n, time.Duration(got/n),
		time.Duration(got), time.Duration(want), 100*(float64(got)-float64(want))/float64(want))
	// Two hogs sharing one CPU wait about half of the time each.
	if time.Duration(want) < spin/4 {
		t.Fatalf("the hogs waited only %v: not sharing a CPU?", time.Duration(want))
	}
	if math.Abs(float64(got)-float64(want)) > 0.1*float64(want) {
		t.Errorf("BPF run-queue wait %v, schedstat run_delay %v: off by more than 10%%", time.Duration(got), time.Duration(want))
	}
}

// TestBPFDiskIO: a container's direct writes, alone on the device (its
// bytes, one latency per request, and their total time against the
// device's own accounting) and with two writers outside the container
// keeping the device busy: blk-mq then issues requests from whichever task
// dispatches the queue (a kblockd worker, or the container's dd issuing
// the others' requests), and exactly the container's own bytes must be
// charged to it.
func TestBPFDiskIO(t *testing.T) {
	t.Run("alone", func(t *testing.T) { testBPFDiskIO(t, 0) })
	t.Run("busy device", func(t *testing.T) { testBPFDiskIO(t, 2) })
}

func testBPFDiskIO(t *testing.T, others int) {
	m := newBPFManager(t)
	dir := t.TempDir()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Type == 0x01021994 /* tmpfs */ {
		bpftest.Missing(t, "the temp dir is not on a block device")
	}
	c := newCgroup(t, m.cg, false)
	enable(t, m, c, 1, DiskIOBytes, DiskIOLatency)
	var dst syscall.Stat_t
	if err := syscall.Stat(dir, &dst); err != nil {
		t.Fatal(err)
	}
	devStat := fmt.Sprintf("/sys/dev/block/%d:%d/stat", unix.Major(dst.Dev), unix.Minor(dst.Dev))
	d0 := diskIO(devStat)
	var bg []*exec.Cmd
	for i := range others {
		o := exec.Command("dd", "if=/dev/zero", fmt.Sprintf("of=%s/other%d", dir, i), "bs=1M", "count=48", "oflag=direct", "status=none")
		if err := o.Start(); err != nil {
			t.Fatal(err)
		}
		bg = append(bg, o)
	}
	// A shell moved into the cgroup execs dd, so every write is issued there.
	const mib = 32
	cmd := exec.Command("sh", "-c", fmt.Sprintf("read x; exec dd if=/dev/zero of=%s/f bs=1M count=%d oflag=direct status=none", dir, mib))
	in, _ := cmd.StdinPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cgroupDir(m.cg, c), "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(in, "go")
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	size := series(t, m, c, DiskIOBytes)
	for _, o := range bg {
		if err := o.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	lat := series(t, m, c, DiskIOLatency)
	t.Logf("disk: %d requests, %d bytes (dd wrote %d); latency: %d requests, mean %v", size.Count, size.Sum, mib<<20,
		lat.Count, time.Duration(lat.Sum/max(lat.Count, 1)))
	if size.Sum < mib<<20 || size.Sum > mib<<20+mib<<20/10 {
		t.Errorf("disk bytes %d, want %d (+10%% for metadata)", size.Sum, mib<<20)
	}
	if lat.Count == 0 || lat.Count < size.Count*9/10 {
		t.Errorf("latency of %d requests for %d issued", lat.Count, size.Count)
	}
	// The device's own accounting (iostat's source) over the same run: the
	// sectors moved and the milliseconds requests spent in flight, summed
	// over requests of every kind (the tracepoints see reads too: the exec
	// of dd reads its binary when it is not cached). The device and the
	// tracepoints do not always count requests alike (here 32 completions
	// against 46 issued requests for the same 32 MiB), so the comparison is
	// of the total time, the quantity both sum; it is asserted only when the
	// dd writes are nearly all the device moved (other processes use it too).
	d1 := diskIO(devStat)
	if d1.ios > d0.ios && d1.ios-d0.ios <= uint64(size.Count)*11/10 {
		dev := time.Duration(d1.ms-d0.ms) * time.Millisecond
		ours := time.Duration(lat.Sum)
		devBytes := (d1.sectors - d0.sectors) * 512
		t.Logf("device %s: %d requests, %d bytes, %v in flight (mean %v); BPF: %d requests, %v (mean %v)", devStat,
			d1.ios-d0.ios, devBytes, dev, dev/time.Duration(d1.ios-d0.ios), lat.Count, ours, ours/time.Duration(max(lat.Count, 1)))
		// The device times a request from its start (allocated, before
		// the plug and the I/O scheduler: the kernel's start_time_ns), the
		// tracepoints from its issue to the driver to its completion. So
		// ours is shorter by the time requests queued before their issue
		// (a 1 MiB direct write is split into requests that wait behind
		// each other: 37.3 of 55 ms in one CI run), and never longer but
		// for the device's whole milliseconds: assert from 20 ms on.
		if devBytes <= uint64(size.Sum)*11/10 && d1.ms-d0.ms >= 20 && (float64(ours) > 1.25*float64(dev) || float64(ours) < 0.5*float64(dev)) {
			t.Errorf("BPF disk time %v vs the device's %v: not within 50–125%% of it", ours, dev)
		}
	}
}

// devIO are a block device's request counters (/sys/.../stat), summed over
// reads, writes, discards and flushes as the tracepoints see them all.
type devIO struct{ ios, sectors, ms uint64 }

// diskIO reads requests completed, sectors moved and the total ms requests
// spent in flight from a /sys/.../stat file (zeros when unreadable). Fields:
// read ios 0, sectors 2, ms 3; write 4, 6, 7; discard 11, 13, 14; flush
// ios 15, ms 16 (kernel 5.5 on).
func diskIO(path string) devIO {
	b, err := os.ReadFile(path)
	if err != nil {
		return devIO{}
	}
	f := strings.Fields(string(b))
	sum := func(idx ...int) uint64 {
		var n uint64
		for _, i := range idx {
			if i < len(f) {
				v, _ := strconv.ParseUint(f[i], 10, 64)
				n += v
			}
		}
		return n
	}
	return devIO{ios: sum(0, 4, 11, 15), sectors: sum(2, 6, 13), ms: sum(3, 7, 14, 16)}
}

// tcpServer accepts connections on loopback, reads everything and answers
// each connection with reply bytes once the client has sent want bytes.
func tcpServer(t *testing.T, want, reply int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.CopyN(io.Discard, c, int64(want)); err != nil {
					return
				}
				c.Write(make([]byte, reply))
				io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestBPFTCPBytesOverLoopback(t *testing.T) {
	m := newBPFManager(t)
	c := newCgroup(t, m.cg, false)
	enable(t, m, c, 1, TCPSendBytes, TCPRecvBytes)
	const chunk, n, reply = 64 << 10, 50, 300_000
	addr := tcpServer(t, chunk*n, reply)
	ch := startChild(t, m.cg, c)
	ch.do(fmt.Sprintf("tcp %s %d %d %d", addr, chunk, n, reply))
	sent, recv := series(t, m, c, TCPSendBytes), series(t, m, c, TCPRecvBytes)
	t.Logf("TCP: sent %d bytes in %d calls (test sent %d), received %d in %d calls (server sent %d)",
		sent.Sum, sent.Count, chunk*n, recv.Sum, recv.Count, reply)
	if sent.Sum != chunk*n {
		t.Errorf("sent bytes %d, want %d", sent.Sum, chunk*n)
	}
	if recv.Sum != reply {
		t.Errorf("received bytes %d, want %d", recv.Sum, reply)
	}
}

func TestBPFSamplingReducesCounts(t *testing.T) {
	m := newBPFManager(t)
	full, sampled := newCgroup(t, m.cg, false), newCgroup(t, m.cg, false)
	const rate = 10
	enable(t, m, full, 1, TCPSendBytes)
	enable(t, m, sampled, rate, TCPSendBytes)
	const chunk, n = 100, 20000
	addr := tcpServer(t, chunk*n, 0)
	for _, c := range []Container{full, sampled} {
		startChild(t, m.cg, c).do(fmt.Sprintf("tcp %s %d %d 0", addr, chunk, n))
	}
	a, b := series(t, m, full, TCPSendBytes), series(t, m, sampled, TCPSendBytes)
	ratio := float64(a.Count) / float64(max(b.Count, 1))
	t.Logf("sends recorded: every event %d, 1-in-%d %d (ratio %.2f)", a.Count, rate, b.Count, ratio)
	if a.Count != n {
		t.Errorf("unsampled container recorded %d sends, want %d", a.Count, n)
	}
	if ratio < rate*0.8 || ratio > rate*1.25 {
		t.Errorf("ratio %.2f, want about %d", ratio, rate)
	}
}

func TestBPFDisableLiveStopsCounts(t *testing.T) {
	m := newBPFManager(t)
	k := m.k.(*bpfKernel)
	ids := k.programIDs()
	c := newCgroup(t, m.cg, false)
	enable(t, m, c, 1, TCPSendBytes)
	if st := m.State(); len(st.Attached) != 1 || st.Attached[0] != "km_sock_send" {
		t.Fatalf("attached %v, want [km_sock_send]", st.Attached)
	}
	const chunk, n = 1000, 100
	addr := tcpServer(t, chunk*n, 0)
	ch := startChild(t, m.cg, c)
	ch.do(fmt.Sprintf("tcp %s %d %d 0", addr, chunk, n))
	first := series(t, m, c, TCPSendBytes)
	if first.Sum != chunk*n {
		t.Fatalf("enabled: %d bytes, want %d", first.Sum, chunk*n)
	}
	off := false
	st, err := m.Configure(ConfigRequest{Container: c.Name(), Metrics: []string{"tcp_send_bytes"}, Enabled: &off})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Attached) != 0 {
		t.Errorf("attached after disabling the only metric: %v", st.Attached)
	}
	ch.do(fmt.Sprintf("tcp %s %d %d 0", addr, chunk, n))
	if second := series(t, m, c, TCPSendBytes); second != first {
		t.Errorf("counts moved while disabled: %+v → %+v", first.Sum, second.Sum)
	}
	// Enabled again, with the program still attached for another container
	// (the config alone gates it): the same programs, never reloaded.
	other := newCgroup(t, m.cg, false)
	enable(t, m, other, 1, TCPSendBytes)
	ch.do(fmt.Sprintf("tcp %s %d %d 0", addr, chunk, n))
	if third := series(t, m, c, TCPSendBytes); third != first {
		t.Errorf("disabled container counted while another one is enabled: %d → %d", first.Sum, third.Sum)
	}
	enable(t, m, c, 1, TCPSendBytes)
	ch.do(fmt.Sprintf("tcp %s %d %d 0", addr, chunk, n))
	if fourth := series(t, m, c, TCPSendBytes); fourth.Sum != 2*chunk*n {
		t.Errorf("re-enabled: %d bytes, want %d", fourth.Sum, 2*chunk*n)
	}
	if now := k.programIDs(); fmt.Sprint(now) != fmt.Sprint(ids) {
		t.Errorf("programs reloaded: %v → %v", ids, now)
	}
}

func TestBPFPageFaultsAndDNS(t *testing.T) {
	m := newBPFManager(t)
	c := newCgroup(t, m.cg, false)
	enable(t, m, c, 1, PageFaultsUser, DNSLatency)
	ln, err := net.ListenPacket("udp", "127.0.0.1:53")
	if err != nil {
		bpftest.Missing(t, "cannot listen on 127.0.0.1:53: "+err.Error())
	}
	defer ln.Close()
	const delay = 30 * time.Millisecond
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := ln.ReadFrom(buf)
			if err != nil {
				return
			}
			time.Sleep(delay)
			ln.WriteTo(buf[:n], from)
		}
	}()
	ch := startChild(t, m.cg, c)
	const pages = 20000
	ch.do(fmt.Sprintf("touch %d", pages))
	ch.do("dns 127.0.0.1:53")
	pf, dns := series(t, m, c, PageFaultsUser), series(t, m, c, DNSLatency)
	t.Logf("user page faults %d for %d pages touched; DNS: %d queries, %v", pf.Count, pages, dns.Count, time.Duration(dns.Sum))
	if pf.Count < pages/2 { // transparent huge pages may fault fewer times
		t.Errorf("user page faults %d, want about %d", pf.Count, pages)
	}
	if dns.Count != 1 || time.Duration(dns.Sum) < delay || time.Duration(dns.Sum) > 20*delay {
		t.Errorf("DNS latency: %d queries, %v; want 1 of about %v", dns.Count, time.Duration(dns.Sum), delay)
	}
}

func TestBPFRemovedCgroupIsForgotten(t *testing.T) {
	m := newBPFManager(t)
	c := newCgroup(t, m.cg, false)
	enable(t, m, c, 1, TCPSendBytes)
	addr := tcpServer(t, 1000, 0)
	ch := startChild(t, m.cg, c)
	ch.do(fmt.Sprintf("tcp %s 1000 1 0", addr))
	if s := series(t, m, c, TCPSendBytes); s.Sum != 1000 {
		t.Fatalf("sent %d bytes, want 1000", s.Sum)
	}
	ch.stop()
	if _, err := m.Configure(ConfigRequest{Container: c.Name(), Reset: true}); err != nil {
		t.Fatal(err)
	}
	dir := cgroupDir(m.cg, c)
	for i := 0; os.Remove(dir) != nil; i++ {
		if i > 100 {
			t.Fatalf("cannot remove %s", dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := m.Read(); err != nil {
		t.Fatal(err)
	}
	snap, err := m.k.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snap.Samples {
		if s.Key == c.Key {
			t.Errorf("values of the removed cgroup still in the map: %+v", s)
		}
	}
}

func TestBPFDropsByReasonChargedToTheReceivingSocket(t *testing.T) {
	m := newBPFManager(t)
	c := newCgroup(t, m.cg, false)
	enable(t, m, c, 1, Drops)
	ch := startChild(t, m.cg, c)
	const n = 500
	ch.do(fmt.Sprintf("udpflood %d", n))
	all, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	byReason := map[string]uint64{}
	for _, s := range all {
		if s.Metric == Drops && s.CgroupID == c.Key {
			byReason[s.Reason] += s.Count
		}
	}
	t.Logf("drops of %d datagrams sent to a socket that never reads: %v", n, byReason)
	// A 4 KiB receive buffer holds a couple of 1000-byte datagrams; the rest
	// are dropped on the receiving socket (SKB_DROP_REASON_SOCKET_RCVBUFF).
	if byReason["socket_rcvbuff"] < n/2 {
		t.Errorf("socket_rcvbuff drops %d, want most of %d", byReason["socket_rcvbuff"], n)
	}
}

// TestBPFCPUThrottledUnderQuota: a thread spinning for 500 ms in a cgroup
// with a 20 % CPU quota runs about 100 ms of it and is held off the CPU for
// the rest; cpu_throttled reports that time (read from cpu.stat) in ns. On
// a hybrid host a v2 container's quota is its v1 cpu cgroup's (`rootline
// run` puts a service in a v2 cgroup of its own, the demo's quota is on
// the v1 one).
func TestBPFCPUThrottledUnderQuota(t *testing.T) {
	m := newBPFManager(t)
	for _, v1 := range []bool{false, true} {
		t.Run(map[bool]string{false: "cgroup-v2", true: "cgroup-v1-cpu"}[v1], func(t *testing.T) {
			c := newCgroup(t, m.cg, v1)
			quotaDir, quotaV1 := cgroupDir(m.cg, c), v1
			var also *Container // the v1 cpu cgroup beside a v2 container
			if !v1 {
				if _, err := os.Stat(filepath.Join(quotaDir, "cpu.max")); err != nil {
					if m.cg.V1CPURoot == "" {
						t.Skip("no cpu controller in the v2 hierarchy and no v1 one: no quota to set")
					}
					q := newCgroup(t, m.cg, true)
					also, quotaDir, quotaV1 = &q, cgroupDir(m.cg, q), true
				}
			}
			quota := func(on bool) error {
				if quotaV1 {
					q := "20000"
					if !on {
						q = "-1"
					}
					return os.WriteFile(filepath.Join(quotaDir, "cpu.cfs_quota_us"), []byte(q), 0)
				}
				q := "20000 100000"
				if !on {
					q = "max 100000"
				}
				return os.WriteFile(filepath.Join(quotaDir, "cpu.max"), []byte(q), 0)
			}
			enable(t, m, c, 1, CPUThrottled)
			ch := startChild(t, m.cg, c)
			if also != nil {
				if err := os.WriteFile(filepath.Join(quotaDir, "cgroup.procs"), []byte(strconv.Itoa(ch.pid)), 0); err != nil {
					t.Fatal(err)
				}
			}
			base := series(t, m, c, CPUThrottled)
			if err := quota(true); err != nil {
				t.Fatal(err)
			}
			defer quota(false)
			const spin = 500 * time.Millisecond
			ch.do(fmt.Sprintf("spin %d", spin.Milliseconds()))
			s := series(t, m, c, CPUThrottled)
			n, got := s.Count-base.Count, time.Duration(s.Sum-base.Sum)
			t.Logf("%s (quota on %s): throttled %d times for %v while spinning %v under a 20%% quota", c.Name(), quotaDir, n, got, spin)
			if n < 3 || got < spin/3 || got > 2*spin {
				t.Errorf("throttled %d times for %v: want at least 3 periods and about 400 ms", n, got)
			}
		})
	}
}
