package mesh

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServicesContract runs the three builds of demo/services/ against the
// same checks: they must behave identically.
func TestServicesContract(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the demo services")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	t.Cleanup(svcClient.CloseIdleConnections)
	dir := t.TempDir()
	commands := map[string][]string{}

	build := exec.Command("go", "build", "-o", filepath.Join(dir, "svc-go"), "./demo/services/go")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	commands[LangGo] = []string{filepath.Join(dir, "svc-go")}
	if _, err := exec.LookPath("javac"); err == nil {
		javac := exec.Command("javac", "-d", filepath.Join(dir, "java"), "demo/services/java/Svc.java")
		javac.Dir = root
		if out, err := javac.CombinedOutput(); err != nil {
			t.Fatalf("javac: %v\n%s", err, out)
		}
		commands[LangJava] = []string{"java", "-cp", filepath.Join(dir, "java"), "Svc"}
	}
	if _, err := exec.LookPath("python3"); err == nil {
		commands[LangPython] = []string{"python3", filepath.Join(root, "demo/services/python/svc.py")}
	}

	// The downstream: records which trace headers arrive and on how many connections.
	var mu sync.Mutex
	var got []http.Header
	conns := map[string]bool{}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		conns[r.RemoteAddr] = true
		mu.Unlock()
		if r.URL.Path == "/fail" {
			http.Error(w, "no", http.StatusServiceUnavailable)
		}
	}))
	defer sink.Close()
	dead := "http://" + svcDeadAddr(t) + "/"

	for _, lang := range []string{LangGo, LangJava, LangPython} {
		t.Run(lang, func(t *testing.T) {
			argv := commands[lang]
			if argv == nil {
				t.Skipf("no %s toolchain", lang)
			}
			start := func(env ...string) (base, admin string) {
				listen, adm := svcFreeAddr(t), svcFreeAddr(t)
				cmd := exec.Command(argv[0], argv[1:]...)
				cmd.Env = append(os.Environ(), append([]string{"SERVICE_NAME=svc-" + lang, "LISTEN=" + listen, "ADMIN=" + adm, "WORK=cpu=1ms,lock=1ms,alloc=16KB,disk=4KB,sleep=1ms"}, env...)...)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					cmd.Process.Kill()
					cmd.Wait()
					if n := strings.Count(stderr.String(), "\n"); n != 1 {
						t.Errorf("%d log lines, want only the start-up line:\n%s", n, stderr.String())
					}
				})
				svcWaitUp(t, "http://"+listen+"/healthz")
				return "http://" + listen, "http://" + adm
			}
			base, admin := start("CALLS="+sink.URL+"/a,"+sink.URL+"/b", "FORWARD_HEADERS=1")
			plain, _ := start("CALLS=" + sink.URL + "/c")
			broken, _ := start("CALLS=" + sink.URL + "/ok," + dead)
			failing, _ := start("CALLS=" + sink.URL + "/fail")

			mu.Lock()
			got, conns = nil, map[string]bool{}
			mu.Unlock()
			for range 5 {
				code, body := svcGet(t, base+"/", map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
					"X-B3-TraceId": "abc", "x-request-id": "r1", "x-other": "no"})
				if code != 200 || body != "svc-"+lang+" ok [127.0.0.1=200 127.0.0.1=200]\n" {
					t.Errorf("GET / = %d %q", code, body)
				}
			}
			mu.Lock()
			if len(got) != 10 {
				t.Errorf("downstream saw %d calls, want 10", len(got))
			}
			for _, h := range got {
				if h.Get("traceparent") == "" || h.Get("x-b3-traceid") != "abc" || h.Get("x-request-id") != "r1" || h.Get("x-other") != "" {
					t.Errorf("forwarded headers: %v", h)
					break
				}
			}
			// Keep-alive: five sequential requests reuse one or two connections.
			if len(conns) > 2 {
				t.Errorf("%d downstream connections for 5 sequential requests: no keep-alive", len(conns))
			}
			got = nil
			mu.Unlock()

			svcGet(t, plain+"/", map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-request-id": "r1"})
			mu.Lock()
			if len(got) != 1 || got[0].Get("traceparent") != "" || got[0].Get("x-request-id") != "" {
				t.Errorf("without FORWARD_HEADERS trace headers must not be forwarded: %v", got)
			}
			mu.Unlock()

			if code, body := svcGet(t, broken+"/", nil); code != 502 || body != "svc-"+lang+" fail [127.0.0.1=200 127.0.0.1=ERR]\n" {
				t.Errorf("dead downstream: %d %q", code, body)
			}
			if code, body := svcGet(t, failing+"/", nil); code != 502 || body != "svc-"+lang+" fail [127.0.0.1=503]\n" {
				t.Errorf("failing downstream: %d %q", code, body)
			}
			if code, body := svcGet(t, base+"/healthz", nil); code != 200 || body != "ok\n" {
				t.Errorf("healthz: %d %q", code, body)
			}

			// Faults.
			if code, body := svcPost(t, admin+"/fault", `{"name":"nope","on":true}`); code != 400 || !strings.Contains(body, `unknown fault "nope"`) {
				t.Errorf("unknown fault: %d %q", code, body)
			}
			if code, body := svcPost(t, admin+"/fault", `{"name":"slow","on":true,"amount":"soon"}`); code != 400 || !strings.Contains(body, "fault slow: amount") {
				t.Errorf("bad amount: %d %q", code, body)
			}
			if code, body := svcPost(t, admin+"/fault", `{"name":"slow","on":true,"amount":"300ms"}`); code != 200 || !strings.Contains(body, `"slow":{"on":true,"amount":"300ms"}`) {
				t.Errorf("slow on: %d %q", code, body)
			}
			t0 := time.Now()
			svcGet(t, base+"/", nil)
			if d := time.Since(t0); d < 300*time.Millisecond {
				t.Errorf("slow fault on: request took %v", d)
			}
			for _, f := range []string{`{"name":"slow","on":false}`, `{"name":"lock","on":true,"amount":"2ms"}`, `{"name":"gc","on":true,"amount":"64KB"}`,
				`{"name":"disk","on":true,"amount":"8KB"}`, `{"name":"cpu","on":true,"amount":"2ms"}`, `{"name":"hold","on":true,"amount":"1ms"}`} {
				if code, body := svcPost(t, admin+"/fault", f); code != 200 {
					t.Errorf("POST %s: %d %q", f, code, body)
				}
			}
			if code, _ := svcGet(t, base+"/", nil); code != 200 {
				t.Errorf("with every fault on: %d", code)
			}
			code, body := svcGet(t, admin+"/faults", nil)
			var faults map[string]struct {
				On     bool   `json:"on"`
				Amount string `json:"amount"`
			}
			if err := json.Unmarshal([]byte(body), &faults); code != 200 || err != nil || len(faults) != 6 ||
				faults["slow"].On || faults["slow"].Amount != "300ms" || !faults["lock"].On || faults["lock"].Amount != "2ms" {
				t.Errorf("GET /faults: %d %q (%v)", code, body, err)
			}
		})
	}
}

// svcClient talks to the services; its idle connections are closed after the
// test (goleak runs in TestMain).
var svcClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}

func svcFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// svcDeadAddr returns the address of a downstream that accepts and closes at once. A port merely left free
// could be handed to a service the test starts later, which would then answer it.
func svcDeadAddr(t *testing.T) string {
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
			c.Close()
		}
	}()
	return ln.Addr().String()
}

func svcWaitUp(t *testing.T, u string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := svcClient.Get(u)
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not up: %v", u, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func svcGet(t *testing.T, u string, headers map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return svcDo(t, req)
}

func svcPost(t *testing.T, u, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return svcDo(t, req)
}

func svcDo(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := svcClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
