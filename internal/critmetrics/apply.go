package critmetrics

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/kmetrics"
)

// ApplyResult is what Apply did, with the measured cost of the kernel
// metrics before and after.
type ApplyResult struct {
	// Applied counts the requests some agent accepted.
	Applied int `json:"applied"`
	// Agents are the agents' addresses and how many requests each took.
	Agents []AgentApplied `json:"agents"`
	// Refused are the requests no agent took, with the agents' answers
	// (typically a container that has gone since it was recorded).
	Refused []Refusal `json:"refused,omitempty"`
	// Before and After are the kernel metrics' BPF cost on this host over
	// the same window, before and after the config; nil when it could not
	// be measured (OverheadNote says why).
	Before       *BPFCost `json:"before,omitempty"`
	After        *BPFCost `json:"after,omitempty"`
	OverheadNote string   `json:"overheadNote,omitempty"`
}

// AgentApplied is one agent's share.
type AgentApplied struct {
	Agent    string `json:"agent"`
	Accepted int    `json:"accepted"`
}

// Refusal is a request every agent refused.
type Refusal struct {
	Container string   `json:"container"`
	Errors    []string `json:"errors"`
}

// BPFCost is the CPU time of the agent's kernel-metric programs (km_*) on
// this host over a window, from the kernel's BPF statistics. The programs
// run in the context of the tasks whose events they record, so this time is
// charged to the workloads, not to the agent process: it is the overhead the
// config changes.
type BPFCost struct {
	Window   string `json:"window"`
	Programs int    `json:"programs"`
	// RunsPerSecond and NsPerSecond are summed over the programs; NsPerRun
	// is their ratio. 1e7 ns/s is 1 % of one CPU.
	RunsPerSecond float64 `json:"runsPerSecond"`
	NsPerSecond   float64 `json:"nsPerSecond"`
	NsPerRun      float64 `json:"nsPerRun"`
}

// ApplyOptions configure Apply.
type ApplyOptions struct {
	// Agents are the agents' addresses (unix:/path or http(s)://host:port).
	Agents []string
	// Token is sent to the agents.
	Token string
	// TLS configures https agents (nil: the system's roots).
	TLS *tls.Config
	// Window is how long the cost is measured before and after (default
	// 30 s; negative: not measured).
	Window time.Duration
	// Progress, when set, is told what is happening.
	Progress func(msg string)
}

// Apply sends reqs to the agents, each request to every agent (a container
// is a cgroup path on one node; the other agents refuse it as unknown), and
// measures the kernel metrics' BPF cost on this host over Window before and
// after.
func Apply(ctx context.Context, reqs []kmetrics.ConfigRequest, o ApplyOptions) (*ApplyResult, error) {
	if len(o.Agents) == 0 {
		return nil, fmt.Errorf("critmetrics: no agent to apply the config to")
	}
	if o.Window == 0 {
		o.Window = 30 * time.Second
	}
	progress := func(msg string) {
		if o.Progress != nil {
			o.Progress(msg)
		}
	}
	clients := make([]*agentapi.AgentClient, len(o.Agents))
	for i, a := range o.Agents {
		// A socket must be root's or ours: the token goes with every request.
		c, err := agentapi.NewAgentClient(a, agentapi.ClientOptions{Token: o.Token, TLS: o.TLS, Timeout: 30 * time.Second,
			SocketOwners: []uint32{0, uint32(os.Getuid())}})
		if err != nil {
			return nil, fmt.Errorf("critmetrics: agent %s: %w", a, err)
		}
		defer c.CloseIdleConnections()
		clients[i] = c
	}
	res := &ApplyResult{}
	var meter *bpfMeter
	if o.Window > 0 {
		var err error
		if meter, err = startBPFMeter(); err != nil {
			res.OverheadNote = "not measured: " + err.Error()
		} else {
			defer meter.Close()
			progress(fmt.Sprintf("measuring the kernel metrics' BPF cost for %s before", o.Window))
			if res.Before, err = meter.measure(ctx, o.Window); err != nil {
				return nil, err
			}
		}
	}
	accepted := make([]int, len(clients))
	for _, r := range reqs {
		body, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		var errs []string
		ok := false
		for i, c := range clients {
			err := putConfig(ctx, c, body)
			if err == nil {
				ok = true
				accepted[i]++
				continue
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			errs = append(errs, o.Agents[i]+": "+err.Error())
		}
		if ok {
			res.Applied++
		} else {
			res.Refused = append(res.Refused, Refusal{Container: r.Container, Errors: errs})
		}
	}
	for i, a := range o.Agents {
		res.Agents = append(res.Agents, AgentApplied{Agent: a, Accepted: accepted[i]})
	}
	progress(fmt.Sprintf("applied %d of %d requests", res.Applied, len(reqs)))
	if meter != nil {
		progress(fmt.Sprintf("measuring the kernel metrics' BPF cost for %s after", o.Window))
		var err error
		if res.After, err = meter.measure(ctx, o.Window); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func putConfig(ctx context.Context, c *agentapi.AgentClient, body []byte) error {
	resp, err := c.Do(ctx, http.MethodPut, "/api/v1/kmetrics/config", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(msg, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s: %s", resp.Status, e.Error)
		}
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}
