package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/agentapi"
)

// Component is an optional part of the agent that lives as long as it (the
// kernel metrics of internal/kmetrics). It serves routes on the agent's API
// (behind the same bearer token as the dump API), exports its series on
// /metrics, and runs a background loop.
type Component interface {
	// Routes registers the component's handlers on the agent's /api/ mux.
	Routes(api *http.ServeMux)
	// Collector exports the component's metrics; nil for none.
	Collector() prometheus.Collector
	// Run works until ctx ends; the agent's Run calls it in a goroutine.
	Run(ctx context.Context) error
	// Close releases the component; the agent's Close calls it once.
	Close() error
}

// AddComponent adds c to the agent. Call it before Run; the agent owns c from
// now on and closes it.
func (a *Agent) AddComponent(c Component) error {
	if col := c.Collector(); col != nil {
		if err := a.reg.Register(col); err != nil {
			return fmt.Errorf("agent: register component metrics: %w", err)
		}
	}
	a.mu.Lock()
	a.components = append(a.components, c)
	a.mu.Unlock()
	a.srv.Handler = a.Handler()
	return nil
}

// runComponents runs every component until ctx ends; the returned func
// waits for them to return.
func (a *Agent) runComponents(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	for _, c := range a.componentList() {
		wg.Go(func() {
			if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				a.logger.Warn("agent component stopped", "err", err)
			}
		})
	}
	return wg.Wait
}

func (a *Agent) componentList() []Component {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Component(nil), a.components...)
}

func (a *Agent) closeComponents() error {
	var errs []error
	for _, c := range a.componentList() {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Processes returns the current targets, by pid.
func (a *Agent) Processes() []agentapi.Process { return a.processes() }

// Config is the agent's configuration with defaults resolved (host name,
// trimmed server URL).
func (a *Agent) Config() Config { return a.cfg }
