// Command gosvc is an uninstrumented HTTP service for rootline run's tests,
// with the contract of ../svc.py and no tracing code: LISTEN=host:port
// (default 127.0.0.1:0); CALL=http://host:port (optional downstream). A leaf
// answers with the trace headers it received, one "name: value" line each; a
// middle service calls CALL with the same path (net/http client, keep-alive)
// and answers with the downstream's body. It prints "listening <port>".
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

var echo = []string{"traceparent", "b3", "x-request-id", "x-b3-traceid", "x-b3-spanid"}

func main() {
	listen := os.Getenv("LISTEN")
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	call := strings.TrimRight(os.Getenv("CALL"), "/")
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 128, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute, DisableCompression: true}}
	h := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		var body []byte
		if call != "" {
			resp, err := client.Get(call + r.URL.RequestURI())
			if err != nil {
				http.Error(w, "downstream: "+err.Error(), http.StatusBadGateway)
				return
			}
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				http.Error(w, "downstream: "+err.Error(), http.StatusBadGateway)
				return
			}
		} else {
			var b strings.Builder
			for _, k := range echo {
				fmt.Fprintf(&b, "%s: %s\n", k, r.Header.Get(k))
			}
			body = []byte(b.String())
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	}
	fmt.Printf("listening %d\n", ln.Addr().(*net.TCPAddr).Port)
	if err := http.Serve(ln, http.HandlerFunc(h)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
