package mesh

import (
	"strings"
	"testing"
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
