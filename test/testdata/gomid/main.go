// Command gomid is an uninstrumented Go net/http service for the goroutine
// association test of `rootline run`: each request does SPIN_US of CPU work
// and SLEEP_US of sleep, then calls CALL with the same path and query
// through net/http's keep-alive client (whose writeLoop goroutine, not the
// handler's, writes the request), and answers with the downstream's status.
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	spin, _ := strconv.Atoi(os.Getenv("SPIN_US"))
	sleep, _ := strconv.Atoi(os.Getenv("SLEEP_US"))
	call := os.Getenv("CALL")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if spin > 0 {
			end := time.Now().Add(time.Duration(spin) * time.Microsecond)
			for time.Now().Before(end) {
			}
		}
		if sleep > 0 {
			time.Sleep(time.Duration(sleep) * time.Microsecond)
		}
		resp, err := client.Get(call + r.URL.RequestURI())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
	})
	l, err := net.Listen("tcp", os.Getenv("LISTEN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening", l.Addr().(*net.TCPAddr).Port)
	_ = http.Serve(l, h)
}
