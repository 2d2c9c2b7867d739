// pingpong is the goroutine tracker's benchmark program: two goroutines
// pass a token over unbuffered channels N times (each pass parks one and
// readies the other: four goroutine status changes), then it prints the
// CPU time the process used, in ns, and exits. It waits for a line on stdin
// before starting, so that a tracker can attach first.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

func main() {
	n, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "usage: pingpong N")
		os.Exit(2)
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		os.Exit(1)
	}
	var before syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	ping, pong := make(chan int), make(chan int)
	go func() {
		for v := range ping {
			pong <- v + 1
		}
		close(pong)
	}()
	for i := range n {
		ping <- i
		<-pong
	}
	close(ping)
	var after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := func(r syscall.Rusage) int64 { return r.Utime.Nano() + r.Stime.Nano() }
	fmt.Println(cpu(after) - cpu(before))
}
