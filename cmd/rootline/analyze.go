package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/store/factory"
	"github.com/rootline/rootline/internal/store/sqlite"
	"github.com/rootline/rootline/internal/tlsconf"
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

// sourceFlags are where an analysis reads from: a stopped server's data
// directory, or a running server's query API.
type sourceFlags struct {
	dataDir string
	apiClient
}

// register adds --data-dir, --server and the flags of the connection to a
// server to fs; timeout is --timeout's default.
func (f *sourceFlags) register(fs *flag.FlagSet, timeout time.Duration) {
	fs.StringVar(&f.dataDir, "data-dir", "", "a stopped server's data directory (read offline)")
	fs.StringVar(&f.server, "server", "", "a running server's query URL instead, e.g. http://127.0.0.1:16686")
	fs.StringVar(&f.tokenFile, "auth.token-file", "", "with --server: file holding the bearer token (or set ROOTLINE_AUTH_TOKEN)")
	fs.StringVar(&f.tls.CAFile, "tls.ca-file", "", "with --server: PEM bundle of the CAs to trust for an https server")
	fs.DurationVar(&f.timeout, "timeout", timeout, "with --server: how long to wait for the answer")
}

// check reports a source given twice or not at all.
func (f *sourceFlags) check() error {
	if (f.dataDir == "") == (f.server == "") {
		return errors.New("give one of --data-dir and --server")
	}
	return nil
}

// parse parses fs's flags; arguments left over are an error.
func (f *sourceFlags) parse(fs *flag.FlagSet, args []string) error { return parseFlagsOnly(fs, args) }

// parseFlagsOnly parses fs's flags; arguments left over are an error.
func parseFlagsOnly(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return nil
}

// parseRange parses --from and --to (parseWhen: 0 for an empty one).
func parseRange(from, to string, now time.Time) (int64, int64, error) {
	f, err1 := parseWhen(from, now)
	t, err2 := parseWhen(to, now)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("--from/--to: %w", err)
	}
	return f, t, nil
}

// printJSON writes v indented and returns the exit code.
func printJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return 1
	}
	return 0
}

// apiClient asks a running server's query API, for the analyses that take
// --server.
type apiClient struct {
	server    string // the query URL
	tokenFile string // "" : ROOTLINE_AUTH_TOKEN, if set
	tls       tlsconf.Client
	timeout   time.Duration
}

// get GETs path with query q from the server and decodes its JSON into v;
// an answer other than 200 is an error with the server's message.
func (c apiClient) get(ctx context.Context, path string, q url.Values, v any) error {
	u, err := url.Parse(c.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--server %q is not an http(s) URL", c.server)
	}
	token, err := analyzeToken(c.tokenFile)
	if err != nil {
		return err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if u.Scheme == "https" {
		if tr.TLSClientConfig, err = c.tls.Config(); err != nil {
			return err
		}
	}
	client := &http.Client{Timeout: c.timeout, Transport: tr}
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("server answered %s: %s", resp.Status, e.Error)
		}
		return fmt.Errorf("server answered %s", resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	return nil
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

// parseWhen reads a time as --from and --to take it: RFC 3339, Unix
// nanoseconds, or a duration before now ("30m"); "" is zero.
func parseWhen(s string, now time.Time) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if ns, err := strconv.ParseInt(s, 10, 64); err == nil && ns >= 0 {
		return ns, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixNano(), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d).UnixNano(), nil
	}
	return 0, fmt.Errorf("%q is neither an RFC 3339 time, Unix nanoseconds nor a duration before now (30m)", s)
}
