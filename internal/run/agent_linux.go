//go:build linux

package run

import (
	"context"
	"log/slog"
	"time"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/tlsconf"
)

// agentClient is the client of the local agent (Options.Agent).
func agentClient(o Options) (*agentapi.AgentClient, error) {
	tlsCfg, err := tlsconf.Client{CAFile: o.AgentCAFile}.Config()
	if err != nil {
		return nil, err
	}
	return agentapi.NewAgentClient(o.Agent, agentapi.ClientOptions{Token: o.Token, TLS: tlsCfg, Timeout: 3 * time.Second})
}

// registerWithAgent tells the local agent about the process, so that its
// profilers record it under the run's service name. A refusal (not the
// caller's process, a wrong token) is final; other failures are retried
// twice.
func registerWithAgent(o Options, pid int, log *slog.Logger) {
	c, err := agentClient(o)
	for attempt := 0; err == nil && attempt < 3; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Second)
		}
		_, err = c.RegisterProcess(context.Background(), agentapi.Process{PID: int64(pid), Service: o.Service, InstanceID: o.Instance})
		if err == nil {
			log.Debug("registered with the agent", "pid", pid)
			return
		}
		if st := agentapi.StatusOf(err); st/100 == 4 {
			break
		}
	}
	log.Info("not registered with a local agent (profilers will not record this process)", "agent", o.Agent, "err", err)
}

// unregisterFromAgent tells the agent the process is gone.
func unregisterFromAgent(o Options, pid int) {
	c, err := agentClient(o)
	if err != nil {
		return
	}
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.ForgetProcess(ctx, int64(pid))
}
