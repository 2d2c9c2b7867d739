// Command svc-go is the demo's uninstrumented forwarding service (Go flavour).
//
// It must behave exactly like demo/services/java/Svc.java and
// demo/services/python/svc.py: same environment contract, same responses, same
// work and faults. It contains no tracing code on purpose: with FORWARD_HEADERS
// unset it does not even forward trace headers, so complete traces can only come
// from Rootline's syscall supervisor.
//
// Environment:
//
//	SERVICE_NAME     name used in responses and the start-up line (default "svc")
//	LISTEN           host:port of the service (default 0.0.0.0:8080)
//	CALLS            comma-separated downstream URLs, called in sequence per request
//	WORK             per-request work, e.g. "cpu=2ms,sleep=0ms,lock=0ms,alloc=0KB,disk=0KB"
//	FORWARD_HEADERS  "1" copies traceparent/tracestate/b3/x-b3-*/x-request-id downstream
//	ADMIN            host:port of the fault API (default 127.0.0.1:0 = disabled)
//	PROTOCOL         "http" (default) or "grpc": serve one unary gRPC method and
//	                 call the downstreams over gRPC (grpc.go); the fault API stays HTTP/1
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// forwarded are the trace headers copied downstream when FORWARD_HEADERS=1.
// Must match the lists in Svc.java and svc.py.
var forwarded = []string{"traceparent", "tracestate", "b3", "x-b3-traceid", "x-b3-spanid",
	"x-b3-parentspanid", "x-b3-sampled", "x-b3-flags", "x-request-id"}

// work is the per-request work; sizes in bytes.
type work struct {
	cpu, sleep, lock time.Duration
	alloc, disk      int64
}

// faultDefaults are the amounts used when POST /fault gives none.
// Must match Svc.java and svc.py.
var faultDefaults = map[string]string{"lock": "10ms", "hold": "10ms", "gc": "1MB", "slow": "100ms", "disk": "1MB", "cpu": "10ms"}

type fault struct {
	On     bool   `json:"on"`
	Amount string `json:"amount"`
	dur    time.Duration
	size   int64
}

type service struct {
	name    string
	calls   []string
	work    work
	forward bool
	client  *http.Client

	hot sync.Mutex // the process-wide lock of lock= work and the lock fault

	mu     sync.Mutex
	faults map[string]fault

	// retained keeps the gc fault's last 8 allocations alive, so each
	// collection has a large live set to mark (or, on a JVM, to copy and
	// promote): GC work and pauses grow with the storm. Same in Svc.java, svc.py.
	retainMu sync.Mutex
	retained [8]*node
	retainAt int
}

func main() {
	log.SetFlags(0)
	s := &service{
		name:    envOr("SERVICE_NAME", "svc"),
		forward: os.Getenv("FORWARD_HEADERS") == "1",
		faults:  map[string]fault{},
	}
	for _, u := range strings.Split(os.Getenv("CALLS"), ",") {
		if u = strings.TrimSpace(u); u != "" {
			s.calls = append(s.calls, u)
		}
	}
	var err error
	if s.work, err = parseWork(os.Getenv("WORK")); err != nil {
		log.Fatalf("%s: WORK: %v", s.name, err)
	}
	for n, a := range faultDefaults {
		f, _ := newFault(n, false, a)
		s.faults[n] = f
	}
	go s.lockHolder()
	s.client = &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil, // the mesh redirects traffic itself; never an env proxy
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		},
	}
	listen := envOr("LISTEN", "0.0.0.0:8080")
	admin := envOr("ADMIN", "127.0.0.1:0")

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		log.Fatalf("%s: listen %s: %v", s.name, listen, err)
	}
	if admin != "127.0.0.1:0" && admin != "" {
		aln, err := net.Listen("tcp", admin)
		if err != nil {
			log.Fatalf("%s: admin listen %s: %v", s.name, admin, err)
		}
		amux := http.NewServeMux()
		amux.HandleFunc("POST /fault", s.setFault)
		amux.HandleFunc("GET /faults", s.listFaults)
		amux.HandleFunc("GET /healthz", healthz)
		go func() { log.Fatal(http.Serve(aln, amux)) }()
	}
	switch p := os.Getenv("PROTOCOL"); p {
	case "", "http":
	case "grpc":
		log.Fatal(s.serveGRPC(ln, admin))
	default:
		log.Fatalf("%s: PROTOCOL %q: want http or grpc", s.name, p)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", healthz)
	mux.HandleFunc("/", s.serve)
	log.Printf("svc-go %s listening on %s (admin %s), calls %v, work %q, forward-headers %v, pid %d",
		s.name, ln.Addr(), admin, s.calls, os.Getenv("WORK"), s.forward, os.Getpid())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0)}
	log.Fatal(srv.Serve(ln))
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, "ok\n")
}

// serve does the request's work, then calls every downstream in order.
func (s *service) serve(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	s.requestWork()

	status := http.StatusOK
	var parts []string
	for _, u := range s.calls {
		code, err := s.call(r, u)
		if err != nil || code < 200 || code > 299 {
			status = http.StatusBadGateway
		}
		if err != nil {
			parts = append(parts, hostOf(u)+"=ERR")
		} else {
			parts = append(parts, hostOf(u)+"="+strconv.Itoa(code))
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(status)
	fmt.Fprintf(w, "%s %s [%s]\n", s.name, statusWord(status), strings.Join(parts, " "))
}

// lockHolder is the lock fault: while it is on, a goroutine holds the hot
// lock across a slow call (a sleep of the fault's amount), lets it go for a
// quarter of that on average, and again; each request takes the lock on its way
// (requestWork), so requests queue behind the holder — lock contention, not
// work of their own. Same in svc.py and Svc.java.
func (s *service) lockHolder() {
	for {
		s.mu.Lock()
		f := s.faults["lock"]
		s.mu.Unlock()
		if !f.On || f.dur <= 0 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		s.hot.Lock()
		time.Sleep(f.dur)
		s.hot.Unlock()
		// Free for a quarter of the hold on average, at random: a fixed
		// cycle would let requests sent one after the other fall into
		// step with it and never wait.
		time.Sleep(time.Duration(rand.Int64N(int64(f.dur)/2 + 1)))
	}
}

// requestWork does one request's WORK plus the faults that are on, on the
// calling goroutine: the same for an HTTP request and a gRPC call.
func (s *service) requestWork() {
	s.mu.Lock()
	faults := make(map[string]fault, len(s.faults))
	for k, v := range s.faults {
		faults[k] = v
	}
	s.mu.Unlock()

	wk := s.work
	if f := faults["cpu"]; f.On {
		wk.cpu += f.dur
	}
	if f := faults["slow"]; f.On {
		wk.sleep += f.dur
	}
	if f := faults["lock"]; f.On {
		// The hot lock is held by lockHolder most of the time: the
		// request waits for it.
		s.hot.Lock()
		s.hot.Unlock() //nolint:staticcheck // an empty critical section: the wait is the point
	}
	if f := faults["hold"]; f.On {
		wk.lock += f.dur // busy work while holding the hot lock
	}
	if f := faults["disk"]; f.On {
		wk.disk += f.size
	}
	s.doWork(wk)
	if f := faults["gc"]; f.On {
		s.gcStorm(f.size)
	}
}

func statusWord(code int) string {
	if code == http.StatusOK {
		return "ok"
	}
	return "fail"
}

func (s *service) call(in *http.Request, u string) (int, error) {
	req, err := http.NewRequestWithContext(in.Context(), http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	if s.forward {
		for _, h := range forwarded {
			if v := in.Header.Get(h); v != "" {
				req.Header.Set(h, v)
			}
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	// Drain so the connection goes back to the keep-alive pool.
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// hostOf names a downstream in the response body: its host without the port.
func hostOf(u string) string {
	h := strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
	if i := strings.IndexAny(h, "/"); i >= 0 {
		h = h[:i]
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

func (s *service) doWork(wk work) {
	spin(wk.cpu)
	if wk.lock > 0 {
		s.hot.Lock()
		spin(wk.lock)
		s.hot.Unlock()
	}
	if wk.alloc > 0 {
		allocDrop(wk.alloc)
	}
	if wk.disk > 0 {
		writeSync(wk.disk)
	}
	if wk.sleep > 0 {
		time.Sleep(wk.sleep)
	}
}

// allocDrop allocates n bytes in 4 KiB pieces, touches them and drops them.
func allocDrop(n int64) {
	var keep [][]byte
	for n > 0 {
		b := make([]byte, min(n, 4096))
		b[0] = 1
		keep = append(keep, b)
		n -= int64(len(b))
	}
	runtime.KeepAlive(keep)
}

// node is a 64-byte object of the gc fault's allocation storm.
type node struct {
	next *node
	buf  [56]byte
}

// gcStorm allocates n bytes as a chain of small pointerful objects and keeps
// the chain alive until 8 later storms replace it, so the collector runs often
// and has a large live set to work through.
func (s *service) gcStorm(n int64) {
	var head *node
	for i := int64(0); i < n/64; i++ {
		head = &node{next: head}
		head.buf[0] = byte(i)
	}
	s.retainMu.Lock()
	s.retained[s.retainAt%len(s.retained)] = head
	s.retainAt++
	s.retainMu.Unlock()
}

// writeSync writes n bytes to a temporary file and fsyncs it.
func writeSync(n int64) {
	f, err := os.CreateTemp("", "svc-disk-*")
	if err != nil {
		return
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 64<<10)
	for n > 0 {
		m := min(n, int64(len(buf)))
		if _, err := f.Write(buf[:m]); err != nil {
			return
		}
		n -= m
	}
	f.Sync()
}

func (s *service) setFault(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name   string `json:"name"`
		On     bool   `json:"on"`
		Amount string `json:"amount"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&body); err != nil {
		http.Error(w, "bad JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	if _, ok := faultDefaults[body.Name]; !ok {
		http.Error(w, fmt.Sprintf("unknown fault %q: want lock, hold, gc, slow, disk or cpu", body.Name), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	amount := body.Amount
	if amount == "" {
		amount = s.faults[body.Name].Amount
	}
	f, err := newFault(body.Name, body.On, amount)
	if err == nil {
		s.faults[body.Name] = f
	}
	s.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.listFaults(w, r)
}

func (s *service) listFaults(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	b, _ := json.Marshal(s.faults)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// newFault parses amount as a duration (lock, slow, cpu) or a size (gc, disk).
func newFault(name string, on bool, amount string) (fault, error) {
	f := fault{On: on, Amount: amount}
	var err error
	switch name {
	case "gc", "disk":
		f.size, err = parseSize(amount)
	default:
		f.dur, err = parseDur(amount)
	}
	if err != nil {
		return f, fmt.Errorf("fault %s: amount: %v", name, err)
	}
	return f, nil
}

// parseWork reads "cpu=2ms,sleep=0ms,lock=0ms,alloc=0KB,disk=0KB".
func parseWork(s string) (work, error) {
	var wk work
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return wk, fmt.Errorf("%q: want key=value", kv)
		}
		var err error
		switch strings.TrimSpace(k) {
		case "cpu":
			wk.cpu, err = parseDur(v)
		case "sleep":
			wk.sleep, err = parseDur(v)
		case "lock":
			wk.lock, err = parseDur(v)
		case "alloc":
			wk.alloc, err = parseSize(v)
		case "disk":
			wk.disk, err = parseSize(v)
		default:
			return wk, fmt.Errorf("unknown key %q: want cpu, sleep, lock, alloc or disk", k)
		}
		if err != nil {
			return wk, fmt.Errorf("%s: %v", k, err)
		}
	}
	return wk, nil
}

// parseDur accepts a number with unit us, ms or s (a bare number is ms).
func parseDur(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suf string
		d   time.Duration
	}{{"us", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}}
	mul := time.Millisecond
	for _, u := range units {
		if strings.HasSuffix(s, u.suf) {
			s, mul = strings.TrimSuffix(s, u.suf), u.d
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad duration %q (want e.g. 20ms)", s)
	}
	return time.Duration(v * float64(mul)), nil
}

// parseSize accepts a number with unit B, KB, MB or GB (powers of 1024; a bare number is bytes).
func parseSize(s string) (int64, error) {
	s = strings.ToUpper(strings.TrimSpace(s))
	mul := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suf) {
			s, mul = strings.TrimSuffix(s, u.suf), u.m
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 64KB)", s)
	}
	return int64(v * float64(mul)), nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
