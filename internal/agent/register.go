package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rootline/rootline/internal/capture"
)

// errUnknownAgent is the server's 404 to a heartbeat: it forgot the agent.
var errUnknownAgent = errors.New("server does not know this agent")

// registerLoop registers with the server and heartbeats every interval the
// server asks for, and early when the target set changes. A heartbeat the
// server answers 404 registers again at once; failures are retried with
// exponential backoff. On shutdown the agent deregisters.
func (a *Agent) registerLoop(ctx context.Context) {
	var id string
	interval := 10 * time.Second
	backoff := a.retryMin
	failing := false
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			if id != "" {
				a.deregister(id)
			}
			return
		case <-timer.C:
		case <-a.changed:
			if id == "" { // not registered: the retry timer is running
				continue
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		reply, err := a.sync(ctx, id)
		if errors.Is(err, errUnknownAgent) {
			a.logger.Info("server forgot the agent; registering again", "agent", id)
			id = ""
			reply, err = a.sync(ctx, "")
		}
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			a.metrics.serverErrors.Inc()
			if !failing {
				a.logger.Warn("cannot reach the Rootline server; retrying", "server", a.cfg.ServerURL, "err", err)
			}
			failing = true
			timer.Reset(backoff)
			backoff = min(2*backoff, a.retryMax)
			continue
		}
		if failing || id == "" {
			a.logger.Info("registered with the Rootline server", "agent", reply.AgentID, "server", a.cfg.ServerURL, "heartbeatSeconds", reply.HeartbeatSeconds)
		}
		failing, backoff, id = false, a.retryMin, reply.AgentID
		if reply.HeartbeatSeconds > 0 {
			interval = time.Duration(reply.HeartbeatSeconds) * time.Second
		}
		timer.Reset(interval)
	}
}

// sync registers (id == "") or heartbeats.
func (a *Agent) sync(ctx context.Context, id string) (capture.RegistrationReply, error) {
	reg := capture.Registration{AgentID: id, Host: a.cfg.Host, DumpURL: a.dumpURL, Kinds: a.kinds(), Version: a.cfg.Version,
		Processes: []capture.Process{}}
	for _, p := range a.processes() {
		// Empty kinds would mean "all the agent's kinds" to the server.
		if len(p.Kinds) > 0 {
			reg.Processes = append(reg.Processes, p)
		}
	}
	method, path := http.MethodPost, "/api/v1/agents"
	if id != "" {
		method, path = http.MethodPut, "/api/v1/agents/"+id
	}
	body, _ := json.Marshal(reg)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var reply capture.RegistrationReply
	resp, err := a.call(ctx, method, a.cfg.ServerURL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return reply, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound && id != "" {
		return reply, errUnknownAgent
	}
	if resp.StatusCode != http.StatusOK {
		return reply, serverError(resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&reply); err != nil {
		return reply, fmt.Errorf("bad registration reply: %w", err)
	}
	if reply.AgentID == "" {
		return reply, errors.New("bad registration reply: no agentId")
	}
	return reply, nil
}

func (a *Agent) deregister(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := a.call(ctx, http.MethodDelete, a.cfg.ServerURL+"/api/v1/agents/"+id, "", nil)
	if err != nil {
		a.logger.Warn("deregister", "err", err)
		return
	}
	resp.Body.Close()
	a.logger.Info("deregistered", "agent", id)
}

// call sends one request to the server with the bearer token.
func (a *Agent) call(ctx context.Context, method, url, contentType string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if a.cfg.AuthToken != "" {
		req.Header.Set("Authorization", "Bearer "+a.cfg.AuthToken)
	}
	return a.client.Do(req)
}

// serverError describes a non-success answer with the server's message.
func serverError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var e struct {
		Error string `json:"error"`
	}
	msg := string(bytes.TrimSpace(b))
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	return fmt.Errorf("server answered %s: %s", resp.Status, msg)
}
