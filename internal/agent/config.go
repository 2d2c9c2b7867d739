package agent

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/httpjson"
	"github.com/rootline/rootline/internal/tlsconf"
)

// maxSocketPath is the longest unix socket path (sun_path holds 108 bytes
// with the terminating NUL).
const maxSocketPath = 107

// Config configures an agent.
type Config struct {
	// ServerURL is the Rootline server's base URL (e.g. http://127.0.0.1:16686).
	ServerURL string `yaml:"server_url"`
	// ListenAddr is where the agent serves its API over TCP: /metrics and
	// /healthz to anyone, the /api/ routes only to callers with the token
	// (see Socket for callers on this machine).
	ListenAddr string `yaml:"listen_addr"`
	// TLS serves ListenAddr over TLS (certificate and key, and a client CA
	// for mutual TLS); the dump URL registered is then https.
	TLS tlsconf.Server `yaml:"tls"`
	// Socket is the unix socket of the agent's API for callers on this
	// machine ("" for none). Each request on it is authorized by its
	// caller's uid (SO_PEERCRED): root may use every route; another user
	// may register, dump and list only processes it owns. Without a token
	// it is the only way into the /api/ routes, and the dump URL the agent
	// registers.
	Socket string `yaml:"socket"`
	// SocketMode is the socket file's permission bits. Any local user must
	// be able to connect for `rootline run` to register the processes it
	// starts as that user (the uid check does the rest); 0600 limits the
	// socket to root, 0660 to SocketGroup.
	SocketMode os.FileMode `yaml:"socket_mode"`
	// SocketGroup, when set, is the group the socket file belongs to.
	SocketGroup string `yaml:"socket_group"`
	// AdvertiseURL is the base URL the server reaches the agent at; the dump
	// URL registered is AdvertiseURL + "/api/v1/dump". Empty derives it from
	// the bound listen address.
	AdvertiseURL string `yaml:"advertise_url"`
	// ServerTLS configures the connections to an https ServerURL (a CA
	// bundle to trust, a client certificate for mutual TLS).
	ServerTLS tlsconf.Client `yaml:"server_tls"`
	// Host names this node (host.name of its spans); empty uses os.Hostname.
	Host string `yaml:"host"`
	// AuthToken, when set, is sent to the server as a bearer token and
	// required on the agent's API over TCP; a caller with it may use every
	// route. It is required when ListenAddr is reachable beyond loopback,
	// and for the server's dump requests to come over TCP.
	AuthToken string `yaml:"-"`
	// Targets are processes to record besides the discovered ones.
	Targets []TargetSpec `yaml:"targets"`
	// Containers are cgroups v2 the cgroup profilers (the kernel flight
	// recorder) record as a whole; their processes are targets. Each must
	// exist when the agent starts; one removed is followed again when its
	// path is created again.
	Containers []ContainerSpec `yaml:"containers"`
	// Discover scans /proc every DiscoverInterval for JVMs and for processes
	// with an OpenTelemetry service name in their environment.
	Discover         bool          `yaml:"discover"`
	DiscoverInterval time.Duration `yaml:"discover_interval"`
	// MaxWindow bounds the window of one dump request.
	MaxWindow time.Duration `yaml:"max_window"`
	// MaxConcurrentDumps bounds dumps running at once; more wait.
	MaxConcurrentDumps int `yaml:"max_concurrent_dumps"`
	// DumpTimeout bounds one dump, uploads included.
	DumpTimeout time.Duration `yaml:"dump_timeout"`
	// MaxHeldBytes bounds the memory of the recorders' windows copied when
	// their dump request is accepted and not yet encoded (default 256 MiB).
	// A dump waits for one of MaxConcurrentDumps, which can take a minute
	// on a busy node, while the kernel flight recorder keeps only its
	// retention (60 s): its window is copied at once, and encoded when the
	// dump's turn comes. A request whose copy would go beyond this bound is
	// refused with 429 Too Many Requests, which the server takes as "busy,
	// ask again later". 0: windows are copied when their dump starts.
	MaxHeldBytes int64 `yaml:"max_held_bytes"`
	// DumpNice is the nice value (0–19) of the threads that build a dump
	// (JFR parsing, symbolization, kernel snapshots): a capture is asked for
	// when the node's services are slow, and its CPU must not make them
	// slower. 0: the agent's own priority.
	DumpNice int `yaml:"dump_nice"`
	// Relay is the span relay: `rootline run`'s span batches of this node
	// sent on to the server in one request a second (relay.go).
	Relay RelayConfig `yaml:"relay"`
	// Version is reported in the registration.
	Version string `yaml:"-"`
}

// DefaultSocket is where the agent's unix socket is by default, and where
// `rootline run` looks for it.
const DefaultSocket = agentapi.DefaultSocket

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		ServerURL:          "http://127.0.0.1:16686",
		ListenAddr:         "127.0.0.1:7070",
		Socket:             DefaultSocket,
		SocketMode:         0o666,
		Discover:           true,
		DiscoverInterval:   5 * time.Second,
		MaxWindow:          10 * time.Minute,
		MaxConcurrentDumps: 2,
		DumpTimeout:        2 * time.Minute,
		MaxHeldBytes:       256 << 20,
		DumpNice:           10,
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if u, err := url.Parse(c.ServerURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("agent server URL %q must be an absolute http(s) URL", c.ServerURL))
	}
	if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
		errs = append(errs, fmt.Errorf("agent listen address %q: %v", c.ListenAddr, err))
	} else if c.AuthToken == "" && !isLoopback(c.ListenAddr) {
		errs = append(errs, fmt.Errorf("the agent API on %q is reachable beyond loopback and can trigger dumps: "+
			"set a token with ROOTLINE_AUTH_TOKEN or --auth.token-file, or bind it to 127.0.0.1", c.ListenAddr))
	}
	if c.AdvertiseURL != "" {
		if u, err := url.Parse(c.AdvertiseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("agent advertise URL %q must be an absolute http(s) URL", c.AdvertiseURL))
		} else if c.AuthToken == "" {
			errs = append(errs, fmt.Errorf("agent advertise URL %q: without a token the agent takes dump requests only on its unix socket (--socket); "+
				"set a token with ROOTLINE_AUTH_TOKEN or --auth.token-file", c.AdvertiseURL))
		}
	}
	if c.Socket == "" && c.AuthToken == "" {
		errs = append(errs, errors.New("the agent needs a token (ROOTLINE_AUTH_TOKEN or --auth.token-file) or a unix socket (--socket): "+
			"without either nobody could register processes or request dumps"))
	}
	if c.Socket != "" {
		if !filepath.IsAbs(c.Socket) {
			errs = append(errs, fmt.Errorf("agent socket %q must be an absolute path", c.Socket))
		} else if len(c.Socket) > maxSocketPath {
			errs = append(errs, fmt.Errorf("agent socket %q is longer than the %d bytes a unix socket path may have", c.Socket, maxSocketPath))
		}
		if c.SocketMode&^0o777 != 0 {
			errs = append(errs, fmt.Errorf("agent socket mode %#o: only permission bits (0–0777)", c.SocketMode))
		}
	}
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("agent listener: %w", err))
	}
	if c.Discover && c.DiscoverInterval <= 0 {
		errs = append(errs, errors.New("agent discover interval must be positive"))
	}
	if c.MaxWindow <= 0 || c.DumpTimeout <= 0 {
		errs = append(errs, errors.New("agent max window and dump timeout must be positive"))
	}
	if c.DumpNice < 0 || c.DumpNice > 19 {
		errs = append(errs, fmt.Errorf("agent dump nice %d must be within 0–19", c.DumpNice))
	}
	if c.MaxHeldBytes < 0 {
		errs = append(errs, errors.New("agent max held bytes must not be negative (0: windows are copied when their dump starts)"))
	}
	if c.MaxConcurrentDumps < 1 {
		errs = append(errs, errors.New("agent max concurrent dumps must be ≥ 1"))
	}
	for i, t := range c.Targets {
		if t.PID <= 0 && t.Command == "" {
			errs = append(errs, fmt.Errorf("agent targets[%d]: needs pid or cmd", i))
		}
	}
	for i, c := range c.Containers {
		if c.Cgroup == "" && c.CgroupID == 0 {
			errs = append(errs, fmt.Errorf("agent containers[%d]: needs a cgroup path or id", i))
		}
	}
	return errors.Join(errs...)
}

// isLoopback reports whether a listen address only accepts local connections
// (the server's rule).
func isLoopback(addr string) bool { return httpjson.IsLoopback(addr) }

// hostname returns h or the OS host name.
func hostname(h string) string {
	if h != "" {
		return h
	}
	if n, err := os.Hostname(); err == nil && n != "" {
		return n
	}
	return "localhost"
}

// TargetSpec names processes to record: one pid, or every process whose
// command line contains Command. Service overrides the discovered service name.
type TargetSpec struct {
	PID        int    `yaml:"pid"`
	Command    string `yaml:"cmd"`
	Service    string `yaml:"service"`
	InstanceID string `yaml:"service_instance_id"`
}

// ParseTargetSpec parses a flag value: comma-separated key=value pairs with
// keys pid, cmd, service and instance (e.g. "pid=1234" or
// "service=checkout,cmd=checkout.jar"). A value may not contain a comma.
func ParseTargetSpec(s string) (TargetSpec, error) {
	var t TargetSpec
	if strings.TrimSpace(s) == "" {
		return t, errors.New("target: empty")
	}
	err := eachKeyValue("target", s, func(k, v string) error {
		switch k {
		case "pid":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return fmt.Errorf("target %q: pid must be a positive integer", s)
			}
			t.PID = n
		case "cmd":
			t.Command = v
		case "service":
			t.Service = v
		case "instance":
			t.InstanceID = v
		default:
			return fmt.Errorf("target %q: unknown key %q (want pid, cmd, service or instance)", s, k)
		}
		return nil
	})
	if err != nil {
		return t, err
	}
	if t.PID == 0 && t.Command == "" {
		return t, fmt.Errorf("target %q: needs pid= or cmd=", s)
	}
	if t.PID != 0 && t.Command != "" {
		return t, fmt.Errorf("target %q: pid= and cmd= are exclusive", s)
	}
	return t, nil
}

// String formats the spec as ParseTargetSpec reads it.
func (t TargetSpec) String() string {
	var parts []string
	if t.PID != 0 {
		parts = append(parts, "pid="+strconv.Itoa(t.PID))
	}
	if t.Service != "" {
		parts = append(parts, "service="+t.Service)
	}
	if t.InstanceID != "" {
		parts = append(parts, "instance="+t.InstanceID)
	}
	if t.Command != "" {
		parts = append(parts, "cmd="+t.Command)
	}
	return strings.Join(parts, ",")
}

// eachKeyValue calls fn with each key=value of a comma-separated flag value
// s of the given kind ("target", "cgroup"), stopping at the first error.
func eachKeyValue(kind, s string, fn func(k, v string) error) error {
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || v == "" {
			return fmt.Errorf("%s %q: %q is not key=value", kind, s, part)
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}
