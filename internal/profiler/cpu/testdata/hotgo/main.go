// Command hotgo is a test fixture for the CPU sampler: it burns CPU in
// main.hotLoop (and briefly in main.coldLoop) until killed.
package main

import (
	"fmt"
	"os"
)

var sink uint64

//go:noinline
func hotLoop() {
	for i := uint64(0); i < 20_000_000; i++ {
		sink += i * 7
	}
}

//go:noinline
func coldLoop() {
	for i := uint64(0); i < 200_000; i++ {
		sink += i * 3
	}
}

func main() {
	fmt.Fprintln(os.Stdout, os.Getpid())
	for {
		hotLoop()
		coldLoop()
	}
}
