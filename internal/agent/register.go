package agent

import (
	"context"
	"errors"
	"time"

	"github.com/rootline/rootline/internal/agentapi"
)

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
		if errors.Is(err, agentapi.ErrUnknownAgent) {
			a.logger.Info("server forgot the agent; registering again", "agent", id)
			id = ""
			a.mu.Lock()
			a.agentID = ""
			a.mu.Unlock()
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
		if u := serverTracesURL(a.cfg.ServerURL, reply); u != a.serverTraces.Load().(string) {
			a.serverTraces.Store(u)
			switch {
			case a.relay == nil || a.cfg.Relay.URL != "":
			case u == "":
				a.logger.Info("the server names no OTLP/HTTP receiver: the relay takes no spans (the node's processes send theirs to the server)")
			default:
				a.logger.Info("relaying the node's spans", "to", u)
			}
		}
		a.mu.Lock()
		a.agentID = id
		a.mu.Unlock()
		if reply.HeartbeatSeconds > 0 {
			interval = time.Duration(reply.HeartbeatSeconds) * time.Second
		}
		timer.Reset(interval)
	}
}

// sync registers (id == "") or heartbeats.
func (a *Agent) sync(ctx context.Context, id string) (agentapi.RegistrationReply, error) {
	reg := agentapi.Registration{AgentID: id, Host: a.cfg.Host, DumpURL: a.dumpURL, Kinds: a.kinds(), Version: a.cfg.Version,
		Processes: []agentapi.Process{}}
	for _, p := range a.processes() {
		// Empty kinds would mean "all the agent's kinds" to the server.
		if len(p.Kinds) > 0 {
			reg.Processes = append(reg.Processes, p)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return a.server.Register(ctx, reg)
}

func (a *Agent) deregister(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.server.Deregister(ctx, id); err != nil {
		a.logger.Warn("deregister", "err", err)
		return
	}
	a.logger.Info("deregistered", "agent", id)
}
