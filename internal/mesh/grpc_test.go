package mesh

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestGRPCServiceCmd(t *testing.T) {
	cmd := GRPCServiceCmd("/repo", GRPCDeps{Python: "/venv/bin/python3", JavaLib: "/lib/grpc-java"})
	for _, tc := range []struct {
		lang, want string
	}{
		{LangGo, "/repo/build/demo/svc-go"},
		{LangJava, "java -XX:TieredStopAtLevel=1 -cp /repo/build/demo/java:/lib/grpc-java/* Svc"},
		{LangPython, "/venv/bin/python3 /repo/demo/services/python/svc.py"},
	} {
		if got := strings.Join(cmd(Service{Name: "x", Language: tc.lang}), " "); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.lang, got, tc.want)
		}
	}
}

// rawCodec passes gRPC messages through as bytes (as the services do).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// grpcSink is a downstream gRPC service that records the method and
// metadata of each call and answers with code.
type grpcSink struct {
	addr string
	mu   sync.Mutex
	got  []metadata.MD
	meth []string
}

func newGRPCSink(t *testing.T, code codes.Code) *grpcSink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &grpcSink{addr: ln.Addr().String()}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		var req []byte
		if err := ss.RecvMsg(&req); err != nil {
			return err
		}
		md, _ := metadata.FromIncomingContext(ss.Context())
		m, _ := grpc.MethodFromServerStream(ss)
		s.mu.Lock()
		s.got, s.meth = append(s.got, md), append(s.meth, m)
		s.mu.Unlock()
		if code != codes.OK {
			return status.Error(code, "no")
		}
		out := []byte("sink ok\n")
		return ss.SendMsg(&out)
	}))
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return s
}

func (s *grpcSink) take() ([]metadata.MD, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, meth := s.got, s.meth
	s.got, s.meth = nil, nil
	return got, meth
}

// TestServicesGRPCContract runs the three builds of demo/services/ with
// PROTOCOL=grpc against the same checks: the answer, the calls downstream
// and what they carry, a failed downstream, and the fault API (HTTP/1).
func TestServicesGRPCContract(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the demo services")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	t.Cleanup(svcClient.CloseIdleConnections)
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "build", "demo", "svc-go"), "./demo/services/go")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	langs := []string{LangGo}
	topo := &Topology{Services: []Service{{Language: LangJava}, {Language: LangPython}}}
	deps, derr := FindGRPCDeps(topo)
	if derr == nil {
		for _, src := range []string{"Svc.java", "SvcGrpc.java"} {
			javac := exec.Command("javac", "-cp", filepath.Join(dir, "build", "demo", "java")+":"+filepath.Join(deps.JavaLib, "*"),
				"-d", filepath.Join(dir, "build", "demo", "java"), filepath.Join("demo", "services", "java", src))
			javac.Dir = root
			if out, err := javac.CombinedOutput(); err != nil {
				t.Fatalf("javac: %v\n%s", err, out)
			}
		}
		langs = append(langs, LangJava, LangPython)
	} else {
		t.Logf("Go only: %v", derr)
	}
	// The Python service from the repository, the rest from dir.
	if err := os.MkdirAll(filepath.Join(dir, "demo", "services"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "demo", "services", "python"), filepath.Join(dir, "demo", "services", "python")); err != nil {
		t.Fatal(err)
	}
	cmdOf := GRPCServiceCmd(dir, deps)
	ok, failing := newGRPCSink(t, codes.OK), newGRPCSink(t, codes.Internal)
	dead := svcDeadAddr(t)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			argv := cmdOf(Service{Language: lang})
			start := func(env ...string) (*grpc.ClientConn, string) {
				listen, adm := svcFreeAddr(t), svcFreeAddr(t)
				cmd := exec.Command(argv[0], argv[1:]...)
				cmd.Env = append(os.Environ(), append([]string{"PROTOCOL=grpc", "SERVICE_NAME=svc-" + lang, "LISTEN=" + listen, "ADMIN=" + adm,
					"WORK=cpu=1ms,lock=1ms,alloc=16KB,disk=4KB,sleep=1ms"}, env...)...)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					cmd.Process.Kill()
					cmd.Wait()
					if n := strings.Count(stderr.String(), "\n"); n != 1 || !strings.Contains(stderr.String(), "protocol grpc") {
						t.Errorf("%d log lines, want only the start-up line, which names the protocol:\n%s", n, stderr.String())
					}
				})
				svcWaitUp(t, "http://"+adm+"/healthz")
				cc, err := grpc.NewClient(listen, grpc.WithTransportCredentials(insecure.NewCredentials()),
					grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.WaitForReady(true)))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cc.Close() })
				return cc, "http://" + adm
			}
			call := func(cc *grpc.ClientConn, md ...string) (string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				ctx = metadata.AppendToOutgoingContext(ctx, md...)
				req, resp := []byte{}, []byte(nil)
				err := cc.Invoke(ctx, "/any.Service/Method", &req, &resp)
				return string(resp), err
			}
			base, admin := start("CALLS=http://"+ok.addr+"/,http://"+ok.addr+"/", "FORWARD_HEADERS=1")
			plain, _ := start("CALLS=http://" + ok.addr + "/")
			broken, _ := start("CALLS=http://" + ok.addr + "/,http://" + dead + "/")
			fails, _ := start("CALLS=http://" + failing.addr + "/")

			ok.take()
			for range 5 {
				body, err := call(base, "traceparent", tp, "x-b3-traceid", "abc", "x-request-id", "r1", "x-other", "no")
				if err != nil || body != "svc-"+lang+" ok [127.0.0.1=0 127.0.0.1=0]\n" {
					t.Errorf("call = %q, %v", body, err)
				}
			}
			got, meth := ok.take()
			if len(got) != 10 {
				t.Errorf("downstream saw %d calls, want 10", len(got))
			}
			for i, md := range got {
				if first(md, "traceparent") != tp || first(md, "x-b3-traceid") != "abc" || first(md, "x-request-id") != "r1" || first(md, "x-other") != "" ||
					meth[i] != "/rootline.demo.Svc/Call" {
					t.Errorf("call %d downstream: %s %v", i, meth[i], md)
					break
				}
			}
			if _, err := call(plain, "traceparent", tp, "x-request-id", "r1"); err != nil {
				t.Error(err)
			}
			if got, _ := ok.take(); len(got) != 1 || first(got[0], "traceparent") != "" || first(got[0], "x-request-id") != "" {
				t.Errorf("without FORWARD_HEADERS trace metadata must not be forwarded: %v", got)
			}
			_, err := call(broken)
			if s := status.Convert(err); s.Code() != codes.Unavailable || s.Message() != "svc-"+lang+" fail [127.0.0.1=0 127.0.0.1=14]\n" {
				t.Errorf("dead downstream: %v", err)
			}
			_, err = call(fails)
			if s := status.Convert(err); s.Code() != codes.Unavailable || s.Message() != "svc-"+lang+" fail [127.0.0.1=13]\n" {
				t.Errorf("failing downstream: %v", err)
			}
			if code, body := svcPost(t, admin+"/fault", `{"name":"slow","on":true,"amount":"300ms"}`); code != 200 || !strings.Contains(body, `"slow":{"on":true,"amount":"300ms"}`) {
				t.Errorf("slow on: %d %q", code, body)
			}
			t0 := time.Now()
			if _, err := call(base); err != nil {
				t.Error(err)
			}
			if d := time.Since(t0); d < 300*time.Millisecond {
				t.Errorf("slow fault on: call took %v", d)
			}
		})
	}
}

func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
