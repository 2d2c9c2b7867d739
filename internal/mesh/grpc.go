package mesh

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// GRPCDeps are what the demo's services need beyond DefaultServiceCmd's to
// speak gRPC (PROTOCOL=grpc): the Python interpreter that has grpcio and
// the grpc-java jars, both of which scripts/deps.sh installs.
type GRPCDeps struct {
	// Python is an interpreter that imports grpc.
	Python string
	// JavaLib is the directory of grpc-java's runtime jars.
	JavaLib string
}

// FindGRPCDeps finds them: the venv scripts/deps.sh makes ($ROOTLINE_VENV,
// ~/.cache/rootline/venv) and $ROOTLINE_GRPC_JAVA or
// ~/.cache/rootline/grpc-java-1.85.1. Only the languages t uses are
// looked for; a missing one is an error that says how to install it.
func FindGRPCDeps(t *Topology) (GRPCDeps, error) {
	var d GRPCDeps
	uses := map[string]bool{}
	for _, s := range t.Services {
		uses[s.Language] = true
	}
	home, _ := os.UserHomeDir()
	var errs []error
	if uses[LangPython] {
		venv := os.Getenv("ROOTLINE_VENV")
		if venv == "" {
			venv = filepath.Join(home, ".cache", "rootline", "venv")
		}
		d.Python = filepath.Join(venv, "bin", "python3")
		if err := exec.Command(d.Python, "-c", "import grpc").Run(); err != nil {
			errs = append(errs, fmt.Errorf("no grpcio for the Python services (%s -c 'import grpc': %v): run scripts/deps.sh or set ROOTLINE_VENV", d.Python, err))
		}
	}
	if uses[LangJava] {
		d.JavaLib = os.Getenv("ROOTLINE_GRPC_JAVA")
		if d.JavaLib == "" {
			d.JavaLib = filepath.Join(home, ".cache", "rootline", "grpc-java-1.85.1")
		}
		if _, err := os.Stat(filepath.Join(d.JavaLib, ".complete")); err != nil {
			errs = append(errs, fmt.Errorf("no grpc-java for the Java services in %s: run scripts/deps.sh (it needs Maven) or set ROOTLINE_GRPC_JAVA", d.JavaLib))
		}
	}
	return d, errors.Join(errs...)
}

// GRPCServiceCmd gives the demo's services in gRPC mode: DefaultServiceCmd's,
// the Java one with grpc-java on its class path (for SvcGrpc, which make
// demo-services builds next to Svc) and the Python one run by d.Python.
func GRPCServiceCmd(repoRoot string, d GRPCDeps) func(Service) []string {
	def := DefaultServiceCmd(repoRoot)
	return func(s Service) []string {
		argv := def(s)
		switch strings.ToLower(s.Language) {
		case LangJava:
			for i := range argv {
				if i > 0 && argv[i-1] == "-cp" {
					argv[i] += string(os.PathListSeparator) + filepath.Join(d.JavaLib, "*")
				}
			}
		case LangPython:
			if len(argv) > 0 {
				argv[0] = d.Python
			}
		}
		return argv
	}
}
