// lockee is the goroutine tracker's test program: a goroutine holds a
// sync.Mutex across a 40 ms sleep, another waits for it, over and over.
// It prints "ready" once started.
package main

import (
	"fmt"
	"os"
	"sync"
	"time"
)

func main() {
	var mu sync.Mutex
	fmt.Println("ready")
	os.Stdout.Sync()
	for {
		mu.Lock()
		done := make(chan struct{})
		go func() {
			mu.Lock() // waits ~40 ms: sync.Mutex.Lock
			mu.Unlock()
			close(done)
		}()
		time.Sleep(40 * time.Millisecond)
		mu.Unlock()
		<-done
		time.Sleep(10 * time.Millisecond)
	}
}
