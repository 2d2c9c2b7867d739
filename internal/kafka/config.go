// Package kafka is Rootline's ingest stage on Apache Kafka, between the
// receivers and the detectors of a scale-out deployment:
//
//	receivers → Producer ──(topic, keyed by service)──▶ Detector (consumer group) → span store
//	                                                       └─▶ capture trigger, exporter
//
// The Producer (`rootline server --role ingester`) acknowledges a client
// only once Kafka acknowledged every record of the request with acks=all;
// when Kafka cannot take them it answers "retry later" and nothing the
// client saw acknowledged is lost. Records are keyed by service, so each
// service's spans live on one partition and its detector windows on the
// consumer that owns the partition (the "sticky" routing Protractor asked
// for). The Detector (`--role detector`) consumes in a group: it detects,
// writes the spans (idempotently, keyed by trace and span id) and commits
// offsets only after the store acknowledged them, so a detector killed at
// any moment loses nothing and stores nothing twice. When a partition moves
// to a new owner, the owner rebuilds the detector windows of its services
// from the partition's recent records before it consumes, so detection goes
// on without a cold start.
//
// Agents' registrations travel through a compacted topic, so every detector
// knows every agent whichever server the agent talks to (see AgentLog).
package kafka

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/rootline/rootline/internal/tlsconf"
)

// PasswordEnv is the environment variable the SASL password is read from
// when no password file is configured.
const PasswordEnv = "ROOTLINE_KAFKA_PASSWORD"

// Config configures the connection, the topics and the stage's bounds.
type Config struct {
	// Brokers are seed brokers, host:port.
	Brokers []string `yaml:"brokers"`
	// Topic carries spans (default "rootline-spans"); AgentsTopic carries
	// agent registrations (default "rootline-agents", compacted).
	Topic       string `yaml:"topic"`
	AgentsTopic string `yaml:"agents_topic"`
	// Group is the detectors' consumer group (default "rootline-detectors").
	Group string `yaml:"group"`
	// ClientID names this process to the brokers (default "rootline").
	ClientID string `yaml:"client_id"`
	// Partitions and ReplicationFactor are used when a topic is created
	// (defaults 12 and 0: min(3, brokers)). More partitions than detectors
	// leaves room to add detectors; services are spread over them by a hash
	// of their name.
	Partitions        int32 `yaml:"partitions"`
	ReplicationFactor int16 `yaml:"replication_factor"`
	// Retention of the spans topic when created (default 24h): detectors
	// that fall behind catch up within it, and window rebuilds read it.
	Retention time.Duration `yaml:"retention"`
	// TLS to the brokers.
	TLS tlsconf.Client `yaml:"tls"`
	// SASL authentication: Mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512,
	// with Username and the password in PasswordFile or
	// ROOTLINE_KAFKA_PASSWORD (never logged).
	SASL SASL `yaml:"sasl"`
	// Compression of produced batches: none, gzip, snappy, lz4 (default) or
	// zstd.
	Compression string `yaml:"compression"`
	// ProduceTimeout bounds how long a client request waits for Kafka's
	// acknowledgement before it is answered "retry later" (default 10s).
	ProduceTimeout time.Duration `yaml:"produce_timeout"`
	// MaxBufferedBytes bounds the spans waiting for Kafka; beyond it
	// requests are answered 429 / RESOURCE_EXHAUSTED (default 256 MiB).
	MaxBufferedBytes int `yaml:"max_buffered_bytes"`
	// MaxRecordBytes bounds one record (default 900 KiB, under Kafka's
	// default message.max.bytes of 1 MiB); a request's spans of a service
	// are split over as many records as needed.
	MaxRecordBytes int `yaml:"max_record_bytes"`
	// MaxPollRecords bounds the records a detector stores and commits at
	// once (default 2000).
	MaxPollRecords int `yaml:"max_poll_records"`
	// RebuildRecords and RebuildAge bound how far back a new owner of a
	// partition reads to rebuild its detector windows (defaults 50000
	// records and 1h); it stops earlier once every service it saw has a
	// full window.
	RebuildRecords int64         `yaml:"rebuild_records"`
	RebuildAge     time.Duration `yaml:"rebuild_age"`
}

// SASL configures SASL authentication.
type SASL struct {
	Mechanism    string `yaml:"mechanism"`
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
}

// ApplyDefaults fills in the defaults of unset fields.
func (c *Config) ApplyDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Topic, "rootline-spans")
	def(&c.AgentsTopic, "rootline-agents")
	def(&c.Group, "rootline-detectors")
	def(&c.ClientID, "rootline")
	def(&c.Compression, "lz4")
	if c.Partitions == 0 {
		c.Partitions = 12
	}
	if c.Retention == 0 {
		c.Retention = 24 * time.Hour
	}
	if c.ProduceTimeout == 0 {
		c.ProduceTimeout = 10 * time.Second
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = 256 << 20
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = 900 << 10
	}
	if c.MaxPollRecords == 0 {
		c.MaxPollRecords = 2000
	}
	if c.RebuildRecords == 0 {
		c.RebuildRecords = 50_000
	}
	if c.RebuildAge == 0 {
		c.RebuildAge = time.Hour
	}
}

// Validate checks the configuration (after ApplyDefaults).
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("kafka: brokers must name at least one broker (--kafka.brokers)"))
	}
	for _, b := range c.Brokers {
		if !strings.Contains(b, ":") {
			errs = append(errs, fmt.Errorf("kafka: broker %q must be host:port", b))
		}
	}
	if c.Topic == c.AgentsTopic {
		errs = append(errs, errors.New("kafka: topic and agents_topic must differ"))
	}
	if _, ok := codecs[c.Compression]; !ok {
		errs = append(errs, fmt.Errorf("kafka: compression must be none, gzip, snappy, lz4 or zstd, got %q", c.Compression))
	}
	if c.Partitions < 1 || c.ReplicationFactor < 0 || c.ProduceTimeout <= 0 || c.MaxBufferedBytes < 1<<20 ||
		c.MaxRecordBytes < 1<<10 || c.MaxPollRecords < 1 || c.RebuildRecords < 0 || c.RebuildAge < 0 || c.Retention < 0 {
		errs = append(errs, errors.New("kafka: partitions, produce_timeout, max_poll_records must be positive, max_buffered_bytes ≥ 1 MiB, max_record_bytes ≥ 1 KiB, the rest not negative"))
	}
	switch strings.ToUpper(c.SASL.Mechanism) {
	case "":
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		if c.SASL.Username == "" {
			errs = append(errs, errors.New("kafka: sasl.username is required with a SASL mechanism"))
		}
	default:
		errs = append(errs, fmt.Errorf("kafka: sasl.mechanism must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", c.SASL.Mechanism))
	}
	return errors.Join(errs...)
}

var codecs = map[string]kgo.CompressionCodec{
	"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
	"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
}

// clientOpts validates the configuration and returns the options every
// client of the stage shares: brokers, identity, TLS and SASL.
func (c Config) clientOpts() ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
		// Reconnect soon after a broker comes back.
		kgo.RetryBackoffFn(func(tries int) time.Duration { return min(time.Duration(tries)*100*time.Millisecond, time.Second) }),
	}
	tc, err := c.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc.Clone()))
	}
	if m := strings.ToUpper(c.SASL.Mechanism); m != "" {
		pw := os.Getenv(PasswordEnv)
		if c.SASL.PasswordFile != "" {
			b, err := os.ReadFile(c.SASL.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("kafka: sasl password file: %w", err)
			}
			pw = strings.TrimSpace(string(b))
		}
		switch m {
		case "PLAIN":
			opts = append(opts, kgo.SASL(plain.Auth{User: c.SASL.Username, Pass: pw}.AsMechanism()))
		case "SCRAM-SHA-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: c.SASL.Username, Pass: pw}.AsSha256Mechanism()))
		case "SCRAM-SHA-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: c.SASL.Username, Pass: pw}.AsSha512Mechanism()))
		}
	}
	return opts, nil
}
