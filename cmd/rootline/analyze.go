package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rootline/rootline/internal/store/factory"
	"github.com/rootline/rootline/internal/store/sqlite"
)

// analyzeCommand is one `rootline analyze <name>` subcommand. Each lives in a
// file of its own (analyze_<name>.go) and registers itself in init, so that
// analyses are added as siblings.
type analyzeCommand struct {
	// Summary is the one-line description shown by `rootline analyze --help`.
	Summary string
	// Run parses args (the flags after the subcommand's name) and runs it;
	// it returns the process exit code (0 ok, 1 failure, 2 bad usage).
	Run func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// analyzeCommands holds the registered subcommands by name.
var analyzeCommands = map[string]analyzeCommand{}

func registerAnalyze(name string, c analyzeCommand) {
	if _, dup := analyzeCommands[name]; dup {
		panic("rootline analyze: subcommand registered twice: " + name)
	}
	analyzeCommands[name] = c
}

func analyzeUsage() string {
	var b strings.Builder
	b.WriteString(`Usage: rootline analyze <analysis> [flags]

Offline analyses of what Rootline stored: on a stopped server's data directory
(--data-dir) or, where the analysis says so, against a running server's URL.

Analyses:
`)
	names := make([]string, 0, len(analyzeCommands))
	for n := range analyzeCommands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-18s %s\n", n, analyzeCommands[n].Summary)
	}
	if len(names) == 0 {
		b.WriteString("  (none in this build)\n")
	}
	b.WriteString("\nRun 'rootline analyze <analysis> --help' for its flags.\n")
	return b.String()
}

func runAnalyze(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, analyzeUsage())
		return 2
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, analyzeUsage())
		return 0
	}
	c, ok := analyzeCommands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "rootline analyze: unknown analysis %q\n\n%s", args[0], analyzeUsage())
		return 2
	}
	return c.Run(ctx, args[1:], stdout, stderr)
}

// openDataDir opens the store of a stopped server's data directory, in the
// embedded layout a server uses by default (the database and the blobs in
// the directory). A directory without a database is refused, not given an
// empty one; a running server holds the directory's lock.
func openDataDir(dir string) (*factory.Storage, error) {
	if _, err := os.Stat(filepath.Join(dir, sqlite.DBFile)); err != nil {
		return nil, fmt.Errorf("%s is not a Rootline data directory (no %s)", dir, sqlite.DBFile)
	}
	var cfg factory.Config
	cfg.ApplyDefaults(dir)
	st, err := factory.Open(cfg, factory.Options{})
	if errors.Is(err, sqlite.ErrDirInUse) {
		return nil, fmt.Errorf("%w: stop the server first, or use --server with its URL", err)
	}
	if err != nil {
		return nil, fmt.Errorf("open the store in %s: %w", dir, err)
	}
	return st, nil
}

// analyzeToken is the bearer token for a server or agent: the content of
// file (--auth.token-file) when given, else ROOTLINE_AUTH_TOKEN.
func analyzeToken(file string) (string, error) {
	if file == "" {
		return os.Getenv("ROOTLINE_AUTH_TOKEN"), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read auth token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
