// Command hotgo burns CPU in one known function until killed; the end-to-end
// tests profile it.
package main

import (
	"fmt"
	"os"
	"time"
)

//go:noinline
func hotLoop(n int) uint64 {
	var x uint64 = 1
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

func main() {
	deadline := time.Now().Add(2 * time.Minute) // never outlive a failed test for long
	var sink uint64
	for time.Now().Before(deadline) {
		sink += hotLoop(1 << 20)
	}
	fmt.Fprintln(os.Stderr, sink)
}
