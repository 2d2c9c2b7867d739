// Package mesh describes and runs the demo's service mesh: a topology of
// uninstrumented forwarding services (demo/services/), their sidecars and the
// faults injected into them.
package mesh

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Languages a service can be written in: the three builds of demo/services/.
const (
	LangGo     = "go"
	LangJava   = "java"
	LangPython = "python"
)

// Protocols the services speak to each other, their sidecars and the load
// generator: HTTP/1.1, or gRPC (one unary method) over HTTP/2.
const (
	ProtocolHTTP = "http"
	ProtocolGRPC = "grpc"
)

// ErrInvalid is wrapped by every error Validate returns.
var ErrInvalid = errors.New("invalid topology")

// Topology is a set of services, the one that receives the load, and the load.
type Topology struct {
	Services []Service
	// Entry is the service the load generator calls.
	Entry string
	// Phases of the load, run in order (rates usually increasing, as in
	// Protractor's experiments).
	Phases []Phase
	// Protocol is ProtocolHTTP ("" is the same) or ProtocolGRPC: every
	// hop, the sidecars' included, speaks it (the fault API stays HTTP/1).
	Protocol string
}

// Service is one service of a topology.
type Service struct {
	Name string
	// Language is LangGo, LangJava or LangPython.
	Language string
	// Calls are the names of the services it calls, in order, once each per request.
	Calls []string
	// Replicas is at least 1 after Load/Default.
	Replicas int
	// Work is the per-request work in the services' WORK syntax, normalised
	// ("cpu=1ms,sleep=0ms,lock=0ms,alloc=0KB,disk=0KB" order, only keys given).
	Work string
}

// Phase is one step of the load: Rate requests per second for Duration.
type Phase struct {
	Rate     float64
	Duration time.Duration
}

//go:embed default.yaml
var defaultYAML []byte

// Default returns the built-in topology (default.yaml), modelled on
// Protractor's Figure 6.6.
func Default() *Topology {
	t, err := Parse(defaultYAML)
	if err != nil {
		panic("mesh: embedded default.yaml: " + err.Error())
	}
	return t
}

// Load reads and validates a topology file.
func Load(path string) (*Topology, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// fileTopology is the YAML form.
type fileTopology struct {
	Entry    string        `yaml:"entry"`
	Protocol string        `yaml:"protocol"`
	Services []fileService `yaml:"services"`
	Load     []filePhase   `yaml:"load"`
}

type fileService struct {
	Name     string   `yaml:"name"`
	Language string   `yaml:"language"`
	Calls    []string `yaml:"calls"`
	Replicas *int     `yaml:"replicas"`
	Work     fileWork `yaml:"work"`
}

type filePhase struct {
	Rate     float64 `yaml:"rate"`
	Duration string  `yaml:"duration"`
}

// fileWork accepts the work either as a WORK string ("cpu=1ms,sleep=2ms") or
// as a mapping ({cpu: 1ms, sleep: 2ms}); it keeps key=value pairs in order.
type fileWork [][2]string

func (w *fileWork) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		for _, kv := range strings.Split(n.Value, ",") {
			if kv = strings.TrimSpace(kv); kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("line %d: work %q: want key=value", n.Line, kv)
			}
			*w = append(*w, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			*w = append(*w, [2]string{n.Content[i].Value, n.Content[i+1].Value})
		}
	default:
		return fmt.Errorf("line %d: work: want a string or a mapping", n.Line)
	}
	return nil
}

// Parse decodes and validates a topology. Unknown YAML fields are errors.
func Parse(b []byte) (*Topology, error) {
	var f fileTopology
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: empty file", ErrInvalid)
	} else if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	t := &Topology{Entry: f.Entry, Protocol: f.Protocol}
	var errs []error
	for i, fs := range f.Services {
		s := Service{Name: fs.Name, Language: fs.Language, Calls: fs.Calls, Replicas: 1}
		if fs.Replicas != nil {
			s.Replicas = *fs.Replicas
		}
		work, err := normaliseWork(fs.Work)
		if err != nil {
			errs = append(errs, fmt.Errorf("services[%d] (%s).work: %v", i, fs.Name, err))
		}
		s.Work = work
		t.Services = append(t.Services, s)
	}
	for i, fp := range f.Load {
		p := Phase{Rate: fp.Rate}
		d, err := time.ParseDuration(fp.Duration)
		if err != nil {
			errs = append(errs, fmt.Errorf("load[%d].duration: %q is not a duration (want e.g. 30s)", i, fp.Duration))
		}
		p.Duration = d
		t.Phases = append(t.Phases, p)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

type workKey struct {
	key  string
	size bool
}

// workKeys are the WORK keys in their canonical order; true marks a size.
var workKeys = []workKey{{"cpu", false}, {"sleep", false}, {"lock", false}, {"alloc", true}, {"disk", true}}

// normaliseWork checks each key and value and writes them in canonical order.
func normaliseWork(w fileWork) (string, error) {
	vals := map[string]string{}
	for _, kv := range w {
		k, v := kv[0], kv[1]
		i := slices.IndexFunc(workKeys, func(wk workKey) bool { return wk.key == k })
		if i < 0 {
			return "", fmt.Errorf("unknown key %q: want cpu, sleep, lock, alloc or disk", k)
		}
		if _, dup := vals[k]; dup {
			return "", fmt.Errorf("key %q given twice", k)
		}
		var err error
		if workKeys[i].size {
			_, err = ParseSize(v)
		} else {
			_, err = ParseWorkDuration(v)
		}
		if err != nil {
			return "", fmt.Errorf("%s: %v", k, err)
		}
		vals[k] = v
	}
	var parts []string
	for _, wk := range workKeys {
		if v, ok := vals[wk.key]; ok {
			parts = append(parts, wk.key+"="+v)
		}
	}
	return strings.Join(parts, ","), nil
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,19}$`)

// Validate checks names, languages, callees, the entry, replicas, the load
// phases and that the call graph has no cycle. Every error names the field.
func (t *Topology) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(t.Services) == 0 {
		bad("services: none given")
	}
	switch t.Protocol {
	case "", ProtocolHTTP, ProtocolGRPC:
	default:
		bad("protocol: %q is not http or grpc", t.Protocol)
	}
	index := map[string]int{}
	for i, s := range t.Services {
		switch {
		case s.Name == "":
			bad("services[%d].name: missing", i)
		case !nameRE.MatchString(s.Name):
			// Names become host names, namespace and interface-name parts.
			bad("services[%d].name: %q must be 1-20 of a-z, 0-9, '-', starting with a letter", i, s.Name)
		default:
			if j, dup := index[s.Name]; dup {
				bad("services[%d].name: %q already used by services[%d]", i, s.Name, j)
			} else {
				index[s.Name] = i
			}
		}
		switch s.Language {
		case LangGo, LangJava, LangPython:
		case "":
			bad("services[%d] (%s).language: missing (want go, java or python)", i, s.Name)
		default:
			bad("services[%d] (%s).language: %q is not go, java or python", i, s.Name, s.Language)
		}
		if s.Replicas < 1 {
			bad("services[%d] (%s).replicas: %d, want at least 1", i, s.Name, s.Replicas)
		}
	}
	for i, s := range t.Services {
		seen := map[string]bool{}
		for j, c := range s.Calls {
			if _, ok := index[c]; !ok {
				bad("services[%d] (%s).calls[%d]: unknown service %q", i, s.Name, j, c)
			}
			if c == s.Name {
				bad("services[%d] (%s).calls[%d]: a service cannot call itself", i, s.Name, j)
			}
			if seen[c] {
				bad("services[%d] (%s).calls[%d]: %q listed twice", i, s.Name, j, c)
			}
			seen[c] = true
		}
	}
	switch _, ok := index[t.Entry]; {
	case t.Entry == "":
		bad("entry: missing")
	case !ok:
		bad("entry: unknown service %q", t.Entry)
	}
	for i, p := range t.Phases {
		if p.Rate <= 0 {
			bad("load[%d].rate: %v, want > 0 requests per second", i, p.Rate)
		}
		if p.Duration <= 0 {
			bad("load[%d].duration: %v, want > 0", i, p.Duration)
		}
	}
	if len(errs) == 0 {
		if cyc := t.cycle(); cyc != nil {
			bad("services: calls form a cycle %s", strings.Join(cyc, " → "))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// cycle returns one cycle of the call graph (first node repeated at the end), or nil.
func (t *Topology) cycle() []string {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var found []string
	var visit func(n string) bool
	visit = func(n string) bool {
		color[n] = grey
		stack = append(stack, n)
		for _, c := range t.Service(n).Calls {
			switch color[c] {
			case grey:
				i := slices.Index(stack, c)
				found = append(slices.Clone(stack[i:]), c)
				return true
			case white:
				if visit(c) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return false
	}
	for _, s := range t.Services {
		if color[s.Name] == white && visit(s.Name) {
			return found
		}
	}
	return nil
}

// GRPC says whether the services speak gRPC.
func (t *Topology) GRPC() bool { return t.Protocol == ProtocolGRPC }

// Service returns the named service, or nil.
func (t *Topology) Service(name string) *Service {
	for i := range t.Services {
		if t.Services[i].Name == name {
			return &t.Services[i]
		}
	}
	return nil
}

// StartOrder lists the services callees first, so each service's downstreams
// are up before it starts (the topology is acyclic after Validate).
func (t *Topology) StartOrder() []string {
	done := map[string]bool{}
	var out []string
	var visit func(n string)
	visit = func(n string) {
		if done[n] {
			return
		}
		done[n] = true
		for _, c := range t.Service(n).Calls {
			visit(c)
		}
		out = append(out, n)
	}
	for _, s := range t.Services {
		visit(s.Name)
	}
	return out
}

// Visits counts how many times each service is called per request sent to
// the entry (Protractor's Fig 6.6: E twice, J three times). Services not
// reachable from the entry are absent.
func (t *Topology) Visits() map[string]int {
	v := map[string]int{}
	var walk func(n string)
	walk = func(n string) {
		v[n]++
		for _, c := range t.Service(n).Calls {
			walk(c)
		}
	}
	if t.Service(t.Entry) != nil {
		walk(t.Entry)
	}
	return v
}

// ParseWorkDuration parses a WORK duration: a number with unit us, ms or s (a
// bare number is ms). Must match parseDur in demo/services/*.
func ParseWorkDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	mul := time.Millisecond
	for _, u := range []struct {
		suf string
		d   time.Duration
	}{{"us", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}} {
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

// ParseSize parses a WORK or fault size: a number with unit B, KB, MB or GB
// (powers of 1024; a bare number is bytes). Must match parseSize in demo/services/*.
func ParseSize(s string) (int64, error) {
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
