package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/agent"
	"github.com/rootline/rootline/internal/kmetrics"
	"github.com/rootline/rootline/internal/procfs"
)

// kmetricsFlags are the agent's per-container kernel metrics settings.
type kmetricsFlags struct {
	enabled  bool
	metrics  string
	rate     uint
	interval time.Duration
	otlpURL  string
	only     string
}

func addKmetricsFlags(fs *flag.FlagSet, k *kmetricsFlags) {
	k.interval = 15 * time.Second
	k.rate = 1
	fs.BoolVar(&k.enabled, "kmetrics", false, "load the per-container eBPF kernel metrics (API /api/v1/kmetrics, /metrics, OTLP push); needs root")
	fs.StringVar(&k.metrics, "kmetrics.enable", "", "kernel metrics enabled for every container from the start (comma-separated names, or all); others are enabled through PUT /api/v1/kmetrics/config")
	fs.UintVar(&k.rate, "kmetrics.sample", k.rate, "default sampling rate of the metrics in --kmetrics.enable: record 1 event in N")
	fs.DurationVar(&k.interval, "kmetrics.push-interval", k.interval, "how often the kernel metrics are pushed to the server as OTLP (0: never)")
	fs.StringVar(&k.only, "kmetrics.cgroups", "", "report only the containers whose cgroup path is one of these or below one (comma-separated, e.g. /kubepods.slice): the node's other workloads can have services of the same names (default: every container)")
	fs.StringVar(&k.otlpURL, "kmetrics.otlp-url", "", "OTLP/HTTP metrics endpoint (default: the --server host, port 4318, /v1/metrics)")
}

// startKmetrics loads the BPF programs and adds the component to a.
func startKmetrics(a *agent.Agent, k kmetricsFlags, cfg agent.Config, logger *slog.Logger) error {
	if !k.enabled {
		return nil
	}
	metrics, err := kmetrics.ParseMetrics(k.metrics)
	if err != nil {
		return err
	}
	var only []string
	for p := range strings.SplitSeq(k.only, ",") {
		if p = strings.TrimSpace(p); p != "" {
			if !strings.HasPrefix(p, "/") {
				return fmt.Errorf("--kmetrics.cgroups: %q is not a cgroup path (it starts with /)", p)
			}
			only = append(only, p)
		}
	}
	var dflt kmetrics.Entry
	for _, m := range metrics {
		dflt.Enabled |= 1 << m
		dflt.Rate[m] = uint32(max(k.rate, 1))
	}
	kern, err := kmetrics.LoadKernel()
	if err != nil {
		return err
	}
	targets := func() []kmetrics.Target {
		var out []kmetrics.Target
		for _, p := range a.Processes() {
			out = append(out, kmetrics.Target{PID: int(p.PID), Service: p.Service})
		}
		return out
	}
	m, err := kmetrics.New(kern, kmetrics.Options{Targets: targets, Default: dflt, Logger: logger, Only: only})
	if err != nil {
		kern.Close()
		return err
	}
	c := &kmetrics.Component{Manager: m, Interval: k.interval, Logger: logger}
	if k.interval > 0 {
		u := k.otlpURL
		if u == "" {
			if u, err = defaultOTLPMetricsURL(cfg.ServerURL); err != nil {
				m.Close()
				return err
			}
		}
		tlsCfg, err := cfg.ServerTLS.Config()
		if err != nil {
			m.Close()
			return err
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tlsCfg
		// The node's CPU time goes with every push: the diagnosis tells
		// a slowdown the hypervisor caused (every service slower, the
		// node's CPUs stolen) from one of the services'.
		c.Pusher = &kmetrics.Pusher{URL: u, Token: cfg.AuthToken, Host: cfg.Host, Client: &http.Client{Transport: tr, Timeout: 30 * time.Second},
			Node: readNodeCPU}
	}
	if err := a.AddComponent(c); err != nil {
		m.Close()
		return err
	}
	logger.Info("kernel metrics loaded", "default", metrics, "push", c.Pusher != nil)
	return nil
}

func defaultOTLPMetricsURL(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", fmt.Errorf("kmetrics: server URL: %w", err)
	}
	u.Host = net.JoinHostPort(u.Hostname(), "4318")
	u.Path = "/v1/metrics"
	return u.String(), nil
}

// readNodeCPU reads the node's steal and busy CPU time from /proc/stat.
func readNodeCPU() (kmetrics.NodeCPU, error) {
	t, err := procfs.NodeCPUSums([]int{procfs.StatSteal},
		[]int{procfs.StatUser, procfs.StatNice, procfs.StatSystem, procfs.StatIRQ, procfs.StatSoftIRQ})
	if err != nil {
		return kmetrics.NodeCPU{}, err
	}
	return kmetrics.NodeCPU{Steal: t[0], Busy: t[1]}, nil
}
