package autoscale

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PID is Envoy's process id.
func (e *Envoy) PID() int { return e.cmd.Process.Pid }

// Envoy is a real Envoy in front of the replicas: one listener routing every
// request to one cluster whose endpoints come from the pool's EDS file.
type Envoy struct {
	cmd   *exec.Cmd
	done  chan struct{}
	admin string // http://host:port
	// URL is the listener's address for the load ("http://127.0.0.1:port/").
	URL string
}

// StartEnvoy runs bin with a bootstrap in dir: a listener on an ephemeral
// loopback port, route timeout timeout, least-request balancing over the
// cluster's EDS endpoints (file eds, watched in its directory).
func StartEnvoy(ctx context.Context, bin, dir, cluster, eds string, timeout time.Duration) (*Envoy, error) {
	boot := map[string]any{
		"admin": map[string]any{"address": sockAddr(0)},
		"node":  map[string]any{"id": "autoscale", "cluster": "autoscale"},
		"static_resources": map[string]any{
			"listeners": []any{map[string]any{
				"name":    "ingress",
				"address": sockAddr(0),
				"filter_chains": []any{map[string]any{"filters": []any{map[string]any{
					"name": "envoy.filters.network.http_connection_manager",
					"typed_config": map[string]any{
						"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
						"stat_prefix": "ingress",
						"route_config": map[string]any{"virtual_hosts": []any{map[string]any{
							"name": "all", "domains": []string{"*"},
							"routes": []any{map[string]any{
								"match": map[string]any{"prefix": "/"},
								"route": map[string]any{"cluster": cluster, "timeout": durString(timeout)},
							}},
						}}},
						"http_filters": []any{map[string]any{"name": "envoy.filters.http.router",
							"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}},
					},
				}}}},
			}},
			"clusters": []any{map[string]any{
				"name":            cluster,
				"type":            "EDS",
				"connect_timeout": "0.5s",
				"lb_policy":       "LEAST_REQUEST",
				// The load generator bounds what is in flight; Envoy's own
				// default limits (1024) must not be what fails requests.
				"circuit_breakers": map[string]any{"thresholds": []any{map[string]any{
					"max_connections": 100000, "max_pending_requests": 100000, "max_requests": 100000}}},
				"eds_cluster_config": map[string]any{"eds_config": map[string]any{
					"resource_api_version": "V3",
					"path_config_source": map[string]any{
						"path":              eds,
						"watched_directory": map[string]any{"path": filepath.Dir(eds)},
					},
				}},
			}},
		},
	}
	b, err := json.MarshalIndent(boot, "", " ")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "envoy.json")
	if err := os.WriteFile(cfg, b, 0o644); err != nil {
		return nil, err
	}
	addrFile := filepath.Join(dir, "envoy-admin.txt")
	log, err := os.Create(filepath.Join(dir, "envoy.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-c", cfg, "--admin-address-path", addrFile, "--log-level", "warn",
		"--base-id", strconv.Itoa(os.Getpid()%100000+200000), "--concurrency", "1")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("autoscale: start envoy: %w", err)
	}
	e := &Envoy{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); log.Close(); close(e.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			e.admin = "http://" + strings.TrimSpace(string(b))
			if port, err := e.listenerPort(ctx); err == nil {
				e.URL = fmt.Sprintf("http://127.0.0.1:%d/", port)
				return e, nil
			}
		}
		select {
		case <-e.done:
			return nil, fmt.Errorf("autoscale: envoy exited at start (see %s)", filepath.Join(dir, "envoy.log"))
		case <-ctx.Done():
			e.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.Close()
			return nil, fmt.Errorf("autoscale: envoy not ready after 30s (see %s)", filepath.Join(dir, "envoy.log"))
		}
	}
}

func sockAddr(port int) map[string]any {
	return map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": port}}
}

func durString(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s" }

func (e *Envoy) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.admin+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("autoscale: envoy admin %s: %s", path, resp.Status)
	}
	return b, err
}

func (e *Envoy) listenerPort(ctx context.Context) (int, error) {
	b, err := e.get(ctx, "/listeners?format=json")
	if err != nil {
		return 0, err
	}
	var ls struct {
		ListenerStatuses []struct {
			LocalAddress struct {
				SocketAddress struct {
					PortValue int `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal(b, &ls); err != nil {
		return 0, err
	}
	if len(ls.ListenerStatuses) == 0 || ls.ListenerStatuses[0].LocalAddress.SocketAddress.PortValue == 0 {
		return 0, fmt.Errorf("autoscale: envoy has no listener yet")
	}
	return ls.ListenerStatuses[0].LocalAddress.SocketAddress.PortValue, nil
}

// HostRequests are the cluster's endpoints in Envoy (by port) with the
// requests Envoy sent each (its rq_total).
func (e *Envoy) HostRequests(ctx context.Context, cluster string) (map[int]int64, error) {
	b, err := e.get(ctx, "/clusters")
	if err != nil {
		return nil, err
	}
	out := map[int]int64{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		// cluster::127.0.0.1:port::rq_total::N
		f := strings.Split(sc.Text(), "::")
		if len(f) != 4 || f[0] != cluster || f[2] != "rq_total" {
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		port, err1 := strconv.Atoi(f[1][i+1:])
		n, err2 := strconv.ParseInt(f[3], 10, 64)
		if i < 0 || err1 != nil || err2 != nil {
			continue
		}
		out[port] = n
	}
	return out, sc.Err()
}

// WaitHosts waits until Envoy's cluster has exactly n endpoints.
func (e *Envoy) WaitHosts(ctx context.Context, cluster string, n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		h, err := e.HostRequests(ctx, cluster)
		if err == nil && len(h) == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("autoscale: envoy cluster %s has %d endpoints, want %d (%v)", cluster, len(h), n, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close stops Envoy.
func (e *Envoy) Close() error {
	terminate(e.cmd.Process, e.done)
	return nil
}

// terminate sends p SIGTERM and waits for done (closed when p has been
// reaped), killing p after 5 s.
func terminate(p *os.Process, done <-chan struct{}) {
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.Kill()
		<-done
	}
}
