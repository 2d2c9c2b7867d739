package main

import (
	"go/parser"
	"go/token"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// agentRoleFiles are the files of this package that wire the agent role.
var agentRoleFiles = []string{"agent.go", "kmetrics.go", "profilers.go", "profilers_linux.go", "profilers_other.go", "sweep_linux.go"}

// serverPackages must not be linked by the agent: it runs as root on every
// node, and the server's code (storage, ingest, capture trigger, queries)
// has no business there. (internal/export is not one: `rootline run`'s
// shipper encodes its spans with it, and the agent links the run role for
// its datapath sweeper. Nor is internal/anomaly: the detector is an
// algorithm with no storage or I/O, which `rootline run --sample` runs next
// to the service; should it ever import a server package, that package is
// caught here.)
var serverPackages = []string{"store", "capture", "pipeline", "query", "server", "receiver", "blob"}

// TestAgentLinksNoServerPackage: the packages the agent role imports, and
// everything they import in turn, include no package of the server.
func TestAgentLinksNoServerPackage(t *testing.T) {
	const module = "github.com/rootline/rootline/"
	roots := []string{module + "internal/agent"}
	fset := token.NewFileSet()
	for _, name := range agentRoleFiles {
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, module) && !slices.Contains(roots, p) {
				roots = append(roots, p)
			}
		}
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command lists the dependencies: %v", err)
	}
	for _, goos := range []string{"linux", "darwin"} {
		cmd := exec.Command(goBin, append([]string{"list", "-deps"}, roots...)...)
		cmd.Env = append(cmd.Environ(), "GOOS="+goos)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %v (GOOS=%s): %v", roots, goos, err)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, module+"internal/agentapi") {
			t.Fatalf("GOOS=%s: the agent's dependencies lack internal/agentapi: is the list right?\n%s", goos, out)
		}
		for _, d := range deps {
			rel, ok := strings.CutPrefix(d, module+"internal/")
			if !ok {
				continue
			}
			if top, _, _ := strings.Cut(rel, "/"); slices.Contains(serverPackages, top) {
				t.Errorf("GOOS=%s: the agent role (%v) links %s", goos, roots, d)
			}
		}
	}
}
