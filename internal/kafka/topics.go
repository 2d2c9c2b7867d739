package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnsureTopics creates the spans and agents topics when they do not exist
// (an existing topic is left as it is). Both roles call it at start, so
// either may come up first.
func EnsureTopics(ctx context.Context, cfg Config) error {
	opts, err := cfg.clientOpts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	rf := cfg.ReplicationFactor
	if rf == 0 {
		brokers, err := adm.ListBrokers(ctx)
		if err != nil {
			return fmt.Errorf("kafka: list brokers at %v: %w", cfg.Brokers, err)
		}
		rf = int16(min(3, len(brokers)))
	}
	minISR := strconv.Itoa(int(min(rf, 2)))
	retention := strconv.FormatInt(cfg.Retention.Milliseconds(), 10)
	spans := map[string]*string{"min.insync.replicas": &minISR, "retention.ms": &retention}
	compact, agentsISR := "compact", minISR
	agents := map[string]*string{"cleanup.policy": &compact, "min.insync.replicas": &agentsISR}
	for _, t := range []struct {
		name       string
		partitions int32
		configs    map[string]*string
	}{{cfg.Topic, cfg.Partitions, spans}, {cfg.AgentsTopic, 1, agents}} {
		res, err := adm.CreateTopic(ctx, t.partitions, rf, t.configs, t.name)
		if err == nil {
			err = res.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("kafka: create topic %s: %w", t.name, err)
		}
	}
	return nil
}
