package kmetrics

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// childEnv makes the test binary a workload process (see runChild).
const childEnv = "ROOTLINE_KMETRICS_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		runChild(os.Stdin, os.Stdout)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild is a workload driven line by line from stdin, so the test can move
// it into a cgroup first: it prints "ready", then for each command does the
// work and prints "ok" (or "err …"):
//
//	spin <ms>                       busy loop for ms of wall time
//	burn <ms>                       busy loop until the thread used ms of CPU time
//	tcp <addr> <chunk> <n> <recv>   send n chunks of chunk bytes, then read recv bytes
//	dns <addr>                      one UDP query, wait for the reply
//	udpflood <n>                    send n datagrams to an own socket that never reads (receive-buffer drops)
//	touch <pages>                   fault in pages of fresh anonymous memory
//	exit
func runChild(in io.Reader, out io.Writer) {
	fmt.Fprintln(out, "ready")
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var err error
		switch f[0] {
		case "exit":
			return
		case "spin":
			ms, _ := strconv.Atoi(f[1])
			end := time.Now().Add(time.Duration(ms) * time.Millisecond)
			x := 0
			for time.Now().Before(end) {
				for i := range 10000 {
					x += i
				}
			}
			_ = x
		case "burn":
			ms, _ := strconv.Atoi(f[1])
			burn(time.Duration(ms) * time.Millisecond)
		case "tcp":
			chunk, _ := strconv.Atoi(f[2])
			n, _ := strconv.Atoi(f[3])
			recv, _ := strconv.Atoi(f[4])
			err = childTCP(f[1], chunk, n, recv)
		case "udpflood":
			n, _ := strconv.Atoi(f[1])
			err = childUDPFlood(n)
		case "dns":
			err = childDNS(f[1])
		case "touch":
			n, _ := strconv.Atoi(f[1])
			b := make([]byte, n*4096)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
		default:
			err = fmt.Errorf("unknown command %q", f[0])
		}
		if err != nil {
			fmt.Fprintln(out, "err", err)
		} else {
			fmt.Fprintln(out, "ok")
		}
	}
}

func childTCP(addr string, chunk, n, recv int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, chunk)
	for range n {
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
	if recv > 0 {
		if _, err := io.ReadFull(c, make([]byte, recv)); err != nil {
			return err
		}
	}
	return nil
}

func childDNS(addr string) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(make([]byte, 32)); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 512))
	return err
}

// burn spins until the calling thread has used d of CPU time.
func burn(d time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var start, now unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &start)
	x := 0
	for {
		for i := range 100000 {
			x += i
		}
		unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &now)
		if time.Duration(now.Nano()-start.Nano()) >= d {
			break
		}
	}
	_ = x
}

func childUDPFlood(n int) error {
	rx, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	defer rx.Close()
	if err := rx.SetReadBuffer(4096); err != nil {
		return err
	}
	tx, err := net.DialUDP("udp", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		return err
	}
	defer tx.Close()
	buf := make([]byte, 1000)
	for range n {
		if _, err := tx.Write(buf); err != nil {
			return err
		}
	}
	return nil
}
