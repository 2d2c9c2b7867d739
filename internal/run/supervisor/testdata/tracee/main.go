// Command tracee is the program the supervisor tests run under tracing.
//
//	tracee tree            threads, a forked child running "net", report tids
//	tracee net             loopback TCP echo server and client, report fds
//	tracee usr1            handle a SIGUSR1 sent to itself
//	tracee sigkill         kill itself with SIGKILL
//	tracee sleep           sleep until killed
//	tracee bench N         N write(2) to /dev/null and N getpid(2), report ns/op
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	switch os.Args[1] {
	case "tree":
		tree()
	case "net":
		netEcho()
	case "usr1":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGUSR1)
		_ = syscall.Kill(os.Getpid(), syscall.SIGUSR1)
		select {
		case <-ch:
			fmt.Println("got usr1")
		case <-time.After(10 * time.Second):
			fmt.Println("no usr1")
			os.Exit(1)
		}
	case "sigkill":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
	case "sleep":
		fmt.Println("sleeping")
		time.Sleep(time.Minute)
	case "bench":
		n, _ := strconv.Atoi(os.Args[2])
		bench(n)
	}
}

func tree() {
	// Keep the main thread for main, so the goroutine below gets a new thread.
	runtime.LockOSThread()
	done := make(chan int)
	go func() {
		runtime.LockOSThread() // a thread of its own, never returned to the pool
		f, _ := os.OpenFile("/dev/null", os.O_WRONLY, 0)
		_, _ = f.Write([]byte("x"))
		_ = f.Close()
		done <- syscall.Gettid()
		select {}
	}()
	fmt.Printf("thread=%d\n", <-done)
	cmd := exec.Command("/proc/self/exe", "net")
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Println("child:", err)
		os.Exit(1)
	}
	fmt.Printf("child=%d\n", cmd.Process.Pid)
}

func rawFD(c syscall.Conn) int {
	rc, _ := c.SyscallConn()
	var fd int
	_ = rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

func netEcho() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	served := make(chan int)
	go func() {
		// Serve on one thread, as a thread-per-request server does: the
		// test checks the supervisor's per-thread state (the response is
		// written by the thread that read the request), and an unlocked
		// goroutine may resume on another thread after its read parks it.
		runtime.LockOSThread()
		c, err := ln.Accept()
		if err != nil {
			panic(err)
		}
		r := bufio.NewReader(c)
		line, _ := r.ReadString('\n')
		for l := ""; l != "\r\n"; l, _ = r.ReadString('\n') {
		}
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(line), line)
		served <- rawFD(c.(*net.TCPConn))
		_ = c.Close()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		panic(err)
	}
	_, _ = fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: t\r\n\r\n")
	resp, _ := bufio.NewReader(c).ReadString('\n')
	fmt.Printf("inbound=%d outbound=%d pid=%d resp=%q\n", <-served, rawFD(c.(*net.TCPConn)), os.Getpid(), resp)
	_ = c.Close()
}

func bench(n int) {
	f, err := os.OpenFile("/dev/null", os.O_WRONLY, 0)
	if err != nil {
		panic(err)
	}
	fd := f.Fd()
	buf := []byte{'x'}
	runtime.LockOSThread()
	start := time.Now()
	for range n {
		syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&buf[0])), 1)
	}
	w := time.Since(start)
	start = time.Now()
	for range n {
		syscall.RawSyscall(syscall.SYS_GETPID, 0, 0, 0)
	}
	g := time.Since(start)
	fmt.Printf("write_ns=%.1f getpid_ns=%.1f\n", float64(w.Nanoseconds())/float64(n), float64(g.Nanoseconds())/float64(n))
}
