package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/capture"
)

// AgentLog shares agent registrations between the processes of a
// deployment through the compacted agents topic: each registration and
// heartbeat a process serves is published under the agent's id, a
// deregistration as a tombstone, and every process applies what the others
// published. An agent then needs to know one server (an ingester behind a
// load balancer), and every detector can ask it for evidence.
type AgentLog struct {
	cfg Config
	cl  *kgo.Client
	log *slog.Logger
}

// NewAgentLog connects to the brokers; it reads the agents topic from its
// start, so the last registration of every agent is applied.
func NewAgentLog(cfg Config, logger *slog.Logger) (*AgentLog, error) {
	opts, err := cfg.clientOpts()
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.DefaultProduceTopic(cfg.AgentsTopic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(30*time.Second),
		kgo.ConsumeTopics(cfg.AgentsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(time.Second),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &AgentLog{cfg: cfg, cl: cl, log: logger.With("component", "kafka-agents")}, nil
}

// Publish sends a registration (gone false) or a deregistration without
// waiting for it; a failure is logged (the agent's next heartbeat, every
// few seconds, publishes it again).
func (a *AgentLog) Publish(reg agentapi.Registration, gone bool) {
	r := &kgo.Record{Key: []byte(reg.AgentID), Timestamp: time.Now()}
	if !gone {
		r.Value, _ = json.Marshal(reg) // a Registration always marshals
	}
	a.cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
		if err != nil {
			a.log.Warn("publishing an agent registration failed", "agent", reg.AgentID, "err", err)
		}
	})
}

// Follow applies every published registration to m until ctx ends.
func (a *AgentLog) Follow(ctx context.Context, m *capture.Manager) error {
	for {
		fetches := a.cl.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return nil
		}
		fetches.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.Canceled) {
				a.log.Debug("reading agent registrations", "err", err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Value == nil {
				m.RemoveAgent(string(r.Key))
				return
			}
			var reg agentapi.Registration
			if err := json.Unmarshal(r.Value, &reg); err != nil || reg.AgentID != string(r.Key) {
				a.log.Warn("skipping a malformed agent registration", "offset", r.Offset)
				return
			}
			m.ApplyAgent(reg, r.Timestamp)
		})
	}
}

// Close flushes what was published (at most 5 s) and closes the client.
func (a *AgentLog) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.cl.Flush(ctx)
	a.cl.Close()
}
