// Package server wires the `rootline server` role: receivers → pipeline
// (detection, capture trigger, export) → storage (built by
// internal/store/factory; SQLite by default) → query API.
package server

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/capture"
	"github.com/rootline/rootline/internal/diagnosis"
	"github.com/rootline/rootline/internal/export"
	"github.com/rootline/rootline/internal/httpjson"
	"github.com/rootline/rootline/internal/kafka"
	"github.com/rootline/rootline/internal/pipeline"
	"github.com/rootline/rootline/internal/receiver"
	"github.com/rootline/rootline/internal/store/cassandra"
	"github.com/rootline/rootline/internal/store/factory"
	"github.com/rootline/rootline/internal/store/s3"
	"github.com/rootline/rootline/internal/tlsconf"
)

// Config is the whole server configuration. It loads from YAML (--config) and
// flags override it; the auth token comes from the environment or a file so it
// never appears in a process listing.
type Config struct {
	// Role is what this process does (docs/deployment.md): "all" (the
	// default: receivers, detection, storage and query in one process),
	// "ingester" (receivers into Kafka, the query API and UI, the agents'
	// registrations) or "detector" (a Kafka consumer that detects, stores
	// and triggers captures).
	Role string `yaml:"role"`
	// Kafka configures the ingest stage of the ingester and detector roles.
	Kafka kafka.Config `yaml:"kafka"`
	// AdvertiseURL is the base URL at which agents reach a detector's
	// capture API (its --query.addr) to upload evidence; default: http://
	// and the bound address, with the host name for an unspecified host.
	AdvertiseURL string `yaml:"advertise_url"`

	DataDir string `yaml:"data_dir"`
	// Listen addresses.
	OTLPGRPCAddr string `yaml:"otlp_grpc_addr"`
	OTLPHTTPAddr string `yaml:"otlp_http_addr"`
	ZipkinAddr   string `yaml:"zipkin_addr"`
	QueryAddr    string `yaml:"query_addr"`
	// MaxRequestBytes bounds one receiver request (decompressed for HTTP).
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
	// Receiver holds the receivers' security and bounds.
	Receiver ReceiverConfig `yaml:"receiver"`
	// QueryTLS serves the query port over TLS (a client CA makes it ask for
	// client certificates).
	QueryTLS tlsconf.Server `yaml:"query_tls"`
	// MemoryLimit is the process's soft memory limit (Go's GOMEMLIMIT); 0
	// sets none. The receivers' memory for requests in flight and the intake
	// queue default to shares of it, and the server refuses to start when
	// its bounded parts add up to more (docs/security.md).
	MemoryLimit ByteSize `yaml:"memory_limit"`

	Pipeline pipeline.Config `yaml:"pipeline"`
	Detector anomaly.Config  `yaml:"detector"`
	Capture  capture.Config  `yaml:"capture"`
	// Diagnosis is the incident rule and the verdicts' bounds
	// (docs/diagnosis.md).
	Diagnosis diagnosis.Config `yaml:"diagnosis"`
	Retention Retention        `yaml:"retention"`
	Export    export.Config    `yaml:"export"`
	// Storage chooses a backend per kind of data (storage.spans.type,
	// storage.artifacts.type, storage.metrics.type); see StorageConfig.
	Storage factory.Config `yaml:"storage"`
	// SQLite is the layout before Storage existed; its synchronous setting
	// still applies to storage.spans.sqlite (StorageConfig).
	SQLite SQLite `yaml:"sqlite"`

	AuthTokenFile   string        `yaml:"auth_token_file"`
	AuthToken       string        `yaml:"-"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	LogLevel        string        `yaml:"log_level"`
	LogFormat       string        `yaml:"log_format"`
}

// Retention is tail sampling by age and size, on the server's clock.
type Retention struct {
	Normal    time.Duration `yaml:"normal"`
	Anomalous time.Duration `yaml:"anomalous"`
	// MaxBytes caps the store's size. 0 (the default) sizes the cap from the
	// data directory's filesystem (DefaultMaxBytes); negative means no cap.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxDiskFraction is the share of the data directory's filesystem the
	// automatic cap allows (MaxBytes 0).
	MaxDiskFraction float64 `yaml:"max_disk_fraction"`
	// MaxClockSkew: a span whose end is further than this from the time it
	// arrives is flagged (rootline.clock_skew_ms) and aged from its receive
	// time. 0 means store.DefaultMaxClockSkew (1h); negative disables it.
	MaxClockSkew time.Duration `yaml:"max_clock_skew"`
	Interval     time.Duration `yaml:"interval"`
}

// ReceiverConfig is what the three receivers share beyond their addresses
// (receiver.Config has the meaning of each bound). Zero bounds take the
// receivers' defaults; MaxInflightBytes defaults to a quarter of MemoryLimit.
type ReceiverConfig struct {
	TLS tlsconf.Server `yaml:"tls"`
	// AuthTokenFile holds the bearer token spans must come with; without
	// it (and without ROOTLINE_INGEST_TOKEN) the server's auth token is
	// asked for, as Rootline's own senders (rootline run, the agent) send it.
	AuthTokenFile string `yaml:"auth_token_file"`
	AuthToken     string `yaml:"-"`
	// AllowUnauthenticated takes spans without a token or client
	// certificate, even beyond loopback: for networks where only trusted
	// senders can reach the receivers.
	AllowUnauthenticated bool `yaml:"allow_unauthenticated"`

	receiver.Admission `yaml:",inline"`
	Limits             receiver.Limits            `yaml:"limits"`
	Cardinality        receiver.CardinalityConfig `yaml:"cardinality"`
}

// SQLite is the embedded store's section of the layout before Storage; it
// is the same setting as storage.spans.sqlite.synchronous.
type SQLite struct {
	// Synchronous is FULL (an acknowledged span survives power loss) or
	// NORMAL (it survives a crash of the server process; faster). Empty: the
	// storage section's value, FULL by default.
	Synchronous string `yaml:"synchronous"`
}

// StorageConfig is Storage with the older settings folded in (--data-dir for
// the directories, sqlite.synchronous) and defaults applied, validated.
func (c Config) StorageConfig() (factory.Config, error) {
	st := c.Storage
	if st.Spans.SQLite != nil { // do not modify c's section
		cp := *st.Spans.SQLite
		st.Spans.SQLite = &cp
	}
	if st.Artifacts.FS != nil {
		cp := *st.Artifacts.FS
		st.Artifacts.FS = &cp
	}
	if legacy := strings.ToUpper(c.SQLite.Synchronous); legacy != "" {
		switch {
		case st.Spans.Type != "" && !strings.EqualFold(st.Spans.Type, factory.TypeSQLite):
			return st, fmt.Errorf("sqlite.synchronous is set but storage.spans.type is %q", st.Spans.Type)
		case st.Spans.SQLite == nil:
			st.Spans.SQLite = &factory.SQLiteConfig{Synchronous: legacy}
		case st.Spans.SQLite.Synchronous == "":
			st.Spans.SQLite.Synchronous = legacy
		case !strings.EqualFold(st.Spans.SQLite.Synchronous, legacy):
			return st, fmt.Errorf("sqlite.synchronous (%s) and storage.spans.sqlite.synchronous (%s) disagree: set one",
				legacy, st.Spans.SQLite.Synchronous)
		}
	}
	if st.Spans.Cassandra != nil {
		cp := *st.Spans.Cassandra
		st.Spans.Cassandra = &cp
	}
	if st.Artifacts.S3 != nil {
		cp := *st.Artifacts.S3
		st.Artifacts.S3 = &cp
	}
	st.ApplyDefaults(c.DataDir)
	if sq := st.Spans.SQLite; sq != nil && sq.CacheMiB == 0 {
		sq.CacheMiB = c.sqliteCacheMiB()
	}
	if cs := st.Spans.Cassandra; cs != nil && cs.TTL == 0 && c.Retention.Normal > 0 && c.Retention.Anomalous > 0 {
		// The TTL backs up the retention sweep: a day past the longest
		// period, so that it never takes what the sweep would keep.
		cs.TTL = max(c.Retention.Normal, c.Retention.Anomalous) + 24*time.Hour
	}
	return st, st.Validate()
}

// Roles of a server process.
const (
	RoleAll      = "all"
	RoleIngester = "ingester"
	RoleDetector = "detector"
)

// Defaults of the automatic size cap (Retention.MaxBytes 0).
const (
	DefaultMaxDiskFraction = 0.5
	// maxBytesFloor keeps the automatic cap from being tiny on a small
	// filesystem; maxBytesCeiling keeps it below the filesystem's size, so
	// the cap, not a full disk, is what stops growth.
	maxBytesFloor   = 1 << 30
	maxBytesCeiling = 0.9
)

// DefaultMaxBytes is the automatic size cap for a filesystem of fsBytes:
// fraction of it, at least 1 GiB, at most 90 % of the filesystem.
func DefaultMaxBytes(fsBytes int64, fraction float64) int64 {
	c := max(int64(float64(fsBytes)*fraction), maxBytesFloor)
	return min(c, int64(float64(fsBytes)*maxBytesCeiling))
}

// DefaultConfig returns the defaults: everything embedded under
// ./rootline-data, every listener on loopback.
func DefaultConfig() Config {
	k := kafka.Config{}
	k.ApplyDefaults()
	rd := receiver.DefaultConfig()
	rd.MaxInflightBytes = 0 // a share of MemoryLimit
	pipe := pipeline.DefaultConfig()
	pipe.QueueBytes = 0 // a share of MemoryLimit
	det := anomaly.DefaultConfig()
	// A full window costs 20 B × 500 per key: 20,000 keys keep the
	// detector within 200 MB, inside the default memory limit.
	det.MaxKeys = 20_000
	return Config{
		Role:            RoleAll,
		Kafka:           k,
		DataDir:         "rootline-data",
		OTLPGRPCAddr:    rd.GRPCAddr,
		OTLPHTTPAddr:    rd.HTTPAddr,
		ZipkinAddr:      rd.ZipkinAddr,
		QueryAddr:       "127.0.0.1:16686",
		MaxRequestBytes: rd.MaxRequestBytes,
		Receiver:        ReceiverConfig{Admission: rd.Admission, Limits: rd.Limits, Cardinality: rd.Cardinality},
		MemoryLimit:     1 << 30,
		Pipeline:        pipe,
		Detector:        det,
		Capture:         capture.DefaultConfig(),
		Diagnosis:       diagnosis.DefaultConfig(),
		Retention: Retention{Normal: 24 * time.Hour, Anomalous: 7 * 24 * time.Hour, Interval: 5 * time.Minute,
			MaxDiskFraction: DefaultMaxDiskFraction},
		Export:          export.DefaultConfig(),
		ShutdownTimeout: 30 * time.Second,
		LogLevel:        "info",
		LogFormat:       "text",
	}
}

// withDerived returns c with the bounds left at 0 set from MemoryLimit: a
// quarter of it for the receivers' requests in flight, an eighth for the
// intake queue (256 MiB and 128 MiB without a limit).
func (c Config) withDerived() Config {
	limit := int64(c.MemoryLimit)
	if limit == 0 {
		limit = 1 << 30
	}
	if c.Receiver.MaxInflightBytes == 0 {
		c.Receiver.MaxInflightBytes = limit / 4
	}
	if c.Pipeline.QueueBytes == 0 {
		c.Pipeline.QueueBytes = limit / 8
	}
	return c
}

// receiverConfig is the receiver package's configuration.
func (c Config) receiverConfig() receiver.Config {
	r := c.Receiver
	return receiver.Config{
		GRPCAddr: c.OTLPGRPCAddr, HTTPAddr: c.OTLPHTTPAddr, ZipkinAddr: c.ZipkinAddr,
		MaxRequestBytes: c.MaxRequestBytes, Limits: r.Limits, Cardinality: r.Cardinality,
		Admission: r.Admission, TLS: r.TLS, AuthToken: r.AuthToken,
	}
}

// Validate checks the configuration as a whole.
func (c Config) Validate() error {
	c = c.withDerived()
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir must not be empty"))
	}
	if c.MaxRequestBytes < 1024 {
		errs = append(errs, fmt.Errorf("--receiver.max-request-bytes must be ≥ 1024, got %d", c.MaxRequestBytes))
	}
	errs = append(errs, c.Pipeline.Validate(), c.Detector.Validate(), c.Capture.Validate(), c.Export.Validate())
	if !c.Diagnosis.Disabled {
		errs = append(errs, c.Diagnosis.Validate())
	}
	if c.Retention.Normal < 0 || c.Retention.Anomalous < 0 {
		errs = append(errs, errors.New("retention periods must not be negative"))
	}
	if f := c.Retention.MaxDiskFraction; c.Retention.MaxBytes == 0 && (f <= 0 || f > 1) {
		errs = append(errs, fmt.Errorf("--retention.max-disk-fraction must be in (0, 1], got %v", f))
	}
	if c.Retention.Interval <= 0 {
		errs = append(errs, errors.New("--retention.interval must be positive"))
	}
	st, err := c.StorageConfig()
	if err != nil {
		errs = append(errs, err)
	}
	switch c.Role {
	case RoleAll:
	case RoleIngester, RoleDetector:
		k := c.Kafka
		k.ApplyDefaults()
		errs = append(errs, k.Validate())
		if st.Spans.Type == factory.TypeSQLite {
			errs = append(errs, fmt.Errorf("--role %s shares its span store with the other roles: set storage.spans.type to cassandra (SQLite is one process's)", c.Role))
		}
	default:
		errs = append(errs, fmt.Errorf("--role must be all, ingester or detector, got %q", c.Role))
	}
	if st.Spans.Type != factory.TypeSQLite && c.Retention.MaxBytes > 0 {
		errs = append(errs, fmt.Errorf("--retention.max-bytes caps the SQLite store only; storage.spans.type is %s", st.Spans.Type))
	}
	if c.AuthToken == "" && !isLoopback(c.QueryAddr) {
		errs = append(errs, fmt.Errorf("the query/agent API on %q is reachable beyond loopback and can read artifacts and trigger dumps: "+
			"set a token with ROOTLINE_AUTH_TOKEN or --auth.token-file, or bind it to 127.0.0.1", c.QueryAddr))
	}
	if err := c.QueryTLS.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("query_tls: %w", err))
	}
	if err := c.receiverConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Receiver.AuthToken == "" && c.Receiver.TLS.ClientCAFile == "" && !c.Receiver.AllowUnauthenticated {
		for _, a := range []struct{ flag, addr string }{{"--otlp.grpc.addr", c.OTLPGRPCAddr}, {"--otlp.http.addr", c.OTLPHTTPAddr}, {"--zipkin.addr", c.ZipkinAddr}} {
			if a.addr != "" && !isLoopback(a.addr) {
				errs = append(errs, fmt.Errorf("the receiver on %q (%s) takes spans from beyond loopback, and spans decide which processes get profiled: "+
					"set a token with ROOTLINE_INGEST_TOKEN, --receiver.auth.token-file or ROOTLINE_AUTH_TOKEN, or a client CA with --receiver.tls.client-ca-file, "+
					"or bind it to 127.0.0.1, or take unauthenticated spans with --receiver.allow-unauthenticated", a.addr, a.flag))
			}
		}
	}
	if c.MemoryLimit < 0 {
		errs = append(errs, fmt.Errorf("--memory-limit must not be negative, got %d", c.MemoryLimit))
	} else if bound := c.memoryBound(); c.MemoryLimit > 0 && bound > int64(c.MemoryLimit) {
		var parts []string
		for _, p := range c.memoryParts() {
			parts = append(parts, fmt.Sprintf("%s %s", p.name, ByteSize(p.bytes/(1<<20)<<20)))
		}
		errs = append(errs, fmt.Errorf("the server's bounded memory adds up to %s (%s), more than --memory-limit %s: "+
			"raise the limit or lower those bounds", ByteSize(bound/(1<<20)<<20), strings.Join(parts, ", "), c.MemoryLimit))
	}
	return errors.Join(errs...)
}

// isLoopback reports whether a listen address only accepts local connections.
func isLoopback(addr string) bool { return httpjson.IsLoopback(addr) }

// Load builds the configuration from defaults, an optional YAML file named by
// --config, flags, and ROOTLINE_AUTH_TOKEN. It returns flag.ErrHelp for -h.
func Load(args []string, usage func(fs *flag.FlagSet)) (Config, error) {
	cfg := DefaultConfig()
	if os.Getenv("GOMEMLIMIT") != "" {
		// The runtime has read it already; it replaces the default, and
		// the configuration file and flags may still change it.
		cfg.MemoryLimit = ByteSize(debug.SetMemoryLimit(-1))
	}
	if path := findConfigArg(args); path != "" {
		if err := cfg.LoadFile(path); err != nil {
			return cfg, err
		}
	}
	fs := flag.NewFlagSet("rootline server", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if usage != nil {
		fs.Usage = func() { usage(fs) }
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	cfg.AuthToken = os.Getenv("ROOTLINE_AUTH_TOKEN")
	if cfg.AuthTokenFile != "" {
		b, err := os.ReadFile(cfg.AuthTokenFile)
		if err != nil {
			return cfg, fmt.Errorf("read auth token: %w", err)
		}
		cfg.AuthToken = strings.TrimSpace(string(b))
	}
	cfg.Capture.AuthToken = cfg.AuthToken
	cfg.Receiver.AuthToken = os.Getenv("ROOTLINE_INGEST_TOKEN")
	if cfg.Receiver.AuthTokenFile != "" {
		b, err := os.ReadFile(cfg.Receiver.AuthTokenFile)
		if err != nil {
			return cfg, fmt.Errorf("read receiver auth token: %w", err)
		}
		cfg.Receiver.AuthToken = strings.TrimSpace(string(b))
	}
	if cfg.Receiver.AuthToken == "" {
		cfg.Receiver.AuthToken = cfg.AuthToken
	}
	if cfg.Receiver.AllowUnauthenticated {
		cfg.Receiver.AuthToken = ""
	}
	return cfg, cfg.Validate()
}

// LoadFile decodes the YAML file path onto c: the fields it names replace
// c's, an unknown field is an error.
func (c *Config) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && err != io.EOF {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func findConfigArg(args []string) string {
	for i, a := range args {
		for _, p := range []string{"--config=", "-config="} {
			if strings.HasPrefix(a, p) {
				return strings.TrimPrefix(a, p)
			}
		}
		if (a == "--config" || a == "-config") && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// RegisterFlags binds every setting to a flag; the current values are the
// defaults shown by --help.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.String("config", "", "YAML configuration file (keys as in docs/configuration.md); flags override it")
	fs.StringVar(&c.Role, "role", c.Role, "all (one process), or ingester / detector of a scale-out deployment with Kafka between them (docs/deployment.md)")
	fs.Func("kafka.brokers", "comma-separated Kafka brokers host:port (roles ingester and detector)", func(v string) error {
		c.Kafka.Brokers = splitList(v)
		return nil
	})
	fs.StringVar(&c.Kafka.Topic, "kafka.topic", c.Kafka.Topic, "Kafka topic of spans (created when missing)")
	fs.StringVar(&c.Kafka.Group, "kafka.group", c.Kafka.Group, "consumer group of the detectors")
	fs.StringVar(&c.AdvertiseURL, "advertise-url", c.AdvertiseURL, "detector: base URL agents upload evidence to (default: --query.addr, https when --query.tls.* is set)")
	fs.Func("storage.cassandra.servers", "comma-separated Cassandra nodes (storage.spans.type cassandra)", func(v string) error {
		if c.Storage.Spans.Cassandra == nil {
			c.Storage.Spans.Cassandra = &cassandra.Config{}
		}
		c.Storage.Spans.Cassandra.Servers = splitList(v)
		return nil
	})
	fs.Func("storage.cassandra.keyspace", "Cassandra keyspace (default rootline)", func(v string) error {
		if c.Storage.Spans.Cassandra == nil {
			c.Storage.Spans.Cassandra = &cassandra.Config{}
		}
		c.Storage.Spans.Cassandra.Keyspace = v
		return nil
	})
	fs.Func("storage.s3.endpoint", "S3 endpoint URL (storage.artifacts.type s3); credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY", func(v string) error {
		if c.Storage.Artifacts.S3 == nil {
			c.Storage.Artifacts.S3 = &s3.Config{}
		}
		c.Storage.Artifacts.S3.Endpoint = v
		return nil
	})
	fs.Func("storage.s3.bucket", "S3 bucket (default rootline)", func(v string) error {
		if c.Storage.Artifacts.S3 == nil {
			c.Storage.Artifacts.S3 = &s3.Config{}
		}
		c.Storage.Artifacts.S3.Bucket = v
		return nil
	})
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory of the embedded store: the SQLite database (rootline.db) and artifact blobs (blobs/), unless storage.* sections name other directories")
	fs.StringVar(&c.Storage.Spans.Type, "storage.spans.type", c.Storage.Spans.Type, "span store (with artifact metadata): sqlite (default) or cassandra")
	fs.StringVar(&c.Storage.Artifacts.Type, "storage.artifacts.type", c.Storage.Artifacts.Type, "artifact content store: fs (default; <data-dir>/blobs) or s3")
	fs.StringVar(&c.Storage.Metrics.Type, "storage.metrics.type", c.Storage.Metrics.Type, "metric point store: the span store's type (default; in its database)")
	fs.StringVar(&c.OTLPGRPCAddr, "otlp.grpc.addr", c.OTLPGRPCAddr, "OTLP/gRPC receiver address (empty disables)")
	fs.StringVar(&c.OTLPHTTPAddr, "otlp.http.addr", c.OTLPHTTPAddr, "OTLP/HTTP receiver address, POST /v1/traces protobuf or JSON (empty disables)")
	fs.StringVar(&c.ZipkinAddr, "zipkin.addr", c.ZipkinAddr, "Zipkin v2 JSON receiver address, POST /api/v2/spans (empty disables)")
	fs.StringVar(&c.QueryAddr, "query.addr", c.QueryAddr, "query API, agent API, UI, /metrics, /healthz address; beyond loopback it needs an auth token")
	fs.Int64Var(&c.MaxRequestBytes, "receiver.max-request-bytes", c.MaxRequestBytes, "largest accepted receiver request in bytes (after decompression); larger ones get 413 / RESOURCE_EXHAUSTED")
	c.registerReceiverFlags(fs)
	fs.Var(&c.MemoryLimit, "memory-limit", "memory limit of the process (e.g. 1GiB; 0: none; Go's soft limit GOMEMLIMIT is set to it less SQLite's page caches and 1/16); the receivers' in-flight memory and the intake queue default to 1/4 and 1/8 of it, and the server refuses to start when its bounds add up to more")
	fs.StringVar(&c.QueryTLS.CertFile, "query.tls.cert-file", c.QueryTLS.CertFile, "serve the query port over TLS with this PEM certificate (chain)")
	fs.StringVar(&c.QueryTLS.KeyFile, "query.tls.key-file", c.QueryTLS.KeyFile, "PEM private key of --query.tls.cert-file")
	fs.StringVar(&c.QueryTLS.ClientCAFile, "query.tls.client-ca-file", c.QueryTLS.ClientCAFile, "require query clients to present a certificate signed by a CA in this PEM file (mutual TLS)")

	fs.IntVar(&c.Pipeline.QueueSpans, "pipeline.queue-spans", c.Pipeline.QueueSpans, "spans waiting for commit before receivers push back (HTTP 429 / gRPC RESOURCE_EXHAUSTED)")
	fs.Int64Var(&c.Pipeline.QueueBytes, "pipeline.queue-bytes", c.Pipeline.QueueBytes, "memory of the spans waiting for commit before receivers push back (0: 1/8 of --memory-limit)")
	fs.IntVar(&c.Pipeline.MaxBatchSpans, "pipeline.max-batch-spans", c.Pipeline.MaxBatchSpans, "most spans committed in one group commit")
	fs.DurationVar(&c.Pipeline.CommitDelay, "pipeline.commit-delay", c.Pipeline.CommitDelay, "how long a small commit waits for more requests to join it (0: none); acknowledgements of small exports wait that much longer")
	fs.IntVar(&c.Pipeline.CommitDelaySpans, "pipeline.commit-delay-spans", c.Pipeline.CommitDelaySpans, "a commit with at least this many spans does not wait (see -pipeline.commit-delay)")
	fs.StringVar(&c.Pipeline.KeyBy, "detector.key-by", c.Pipeline.KeyBy, `detector key: "operation" (service.name + span name) or "service"`)
	fs.IntVar(&c.Detector.Window, "detector.window", c.Detector.Window, "sliding window size W (durations kept per key)")
	fs.Float64Var(&c.Detector.Threshold, "detector.threshold", c.Detector.Threshold, "a span is anomalous when its duration > threshold × the window's median")
	fs.IntVar(&c.Detector.MinFill, "detector.min-fill", c.Detector.MinFill, "durations a key's window needs before any verdict")
	fs.IntVar(&c.Detector.MaxKeys, "detector.max-keys", c.Detector.MaxKeys, "keys tracked; the least recently seen key is forgotten beyond it")

	fs.BoolVar(&c.Diagnosis.Disabled, "diagnosis.disabled", c.Diagnosis.Disabled, "open no incidents and compute no verdicts")
	c.Diagnosis.RegisterRuleFlags(fs)
	fs.DurationVar(&c.Diagnosis.VerdictEvery, "diagnosis.verdict-every", c.Diagnosis.VerdictEvery, "how often an incident's verdict is computed again while evidence may still arrive, while the incident is young (then every tenth of its age, up to 30s)")
	fs.DurationVar(&c.Diagnosis.EvidenceWait, "diagnosis.evidence-wait", c.Diagnosis.EvidenceWait, "how long after an incident closes its verdict keeps being updated (snapshots and profiles arrive late)")
	fs.DurationVar(&c.Diagnosis.Lookback, "diagnosis.lookback", c.Diagnosis.Lookback, "how far before an incident's onset its baseline traces are read")

	fs.DurationVar(&c.Capture.Pre, "capture.pre", c.Capture.Pre, "evidence window starts this long before an anomalous span")
	fs.DurationVar(&c.Capture.Post, "capture.post", c.Capture.Post, "evidence window ends this long after an anomalous span")
	fs.BoolVar(&c.Capture.EagerPaths, "capture.eager-paths", c.Capture.EagerPaths, "compute each capture's kernel critical paths as soon as it completes; by default, only while an incident is open or settling, and for earlier captures (within --diagnosis.lookback) when one opens, the others when asked for")
	fs.DurationVar(&c.Capture.Settle, "capture.settle", c.Capture.Settle, "wait after a window closes before asking the agent (coalesces overlapping anomalies)")
	fs.DurationVar(&c.Capture.MaxWindow, "capture.max-window", c.Capture.MaxWindow, "longest coalesced capture window")
	fs.Int64Var(&c.Capture.BudgetBytesPerMinute, "capture.budget-bytes-per-minute", c.Capture.BudgetBytesPerMinute, "artifact bytes accepted per process per minute")
	fs.DurationVar(&c.Capture.MinInterval, "capture.min-interval", c.Capture.MinInterval, "least time between two captures of one process; anomalies meanwhile join the waiting capture (0: none)")
	fs.DurationVar(&c.Capture.MaxDelay, "capture.max-delay", c.Capture.MaxDelay, "how much later than first due anomalies coalescing into a pending capture may make it (each moves its window's end); later ones start the next capture (0: no bound)")
	fs.DurationVar(&c.Capture.AskedInterval, "capture.asked-interval", c.Capture.AskedInterval, "least time between two captures of one process when an open incident's verdict asked for the second (it lacks kernel paths); stands for capture.min-interval then")
	fs.IntVar(&c.Capture.MaxPerMinute, "capture.max-per-minute", c.Capture.MaxPerMinute, "captures requested per minute over all processes, at most 3 within any 3/N of a minute; more wait, or are skipped once too late for their window (0: no bound)")
	fs.Float64Var(&c.Capture.SuspectShare, "capture.suspect-share", c.Capture.SuspectShare, "share of --capture.max-per-minute kept for the processes of the services open incidents rank most suspect; the others' captures use the rest and leave one of every burst free (0: first come, first served)")
	fs.IntVar(&c.Capture.Suspects, "capture.suspects", c.Capture.Suspects, "how many of each open incident's most suspect services (its verdict's culprit, then its ranking) --capture.suspect-share is kept for")
	fs.IntVar(&c.Capture.Concurrency, "capture.concurrency", c.Capture.Concurrency, "dump requests in flight")
	fs.IntVar(&c.Capture.MaxPerAgent, "capture.max-per-agent", c.Capture.MaxPerAgent, "captures one agent works on at once; more wait at the server, suspects first, until their window is older than --capture.max-window (0: no bound)")
	fs.DurationVar(&c.Capture.CaptureTimeout, "capture.timeout", c.Capture.CaptureTimeout, "time an agent has to complete a capture")
	fs.StringVar(&c.Capture.AgentTLS.CAFile, "capture.agent-tls.ca-file", c.Capture.AgentTLS.CAFile, "PEM bundle of the CAs to trust for agents whose dump URL is https (default: the system's)")
	fs.StringVar(&c.Capture.AgentTLS.CertFile, "capture.agent-tls.cert-file", c.Capture.AgentTLS.CertFile, "client certificate (PEM) for agents that require mutual TLS")
	fs.StringVar(&c.Capture.AgentTLS.KeyFile, "capture.agent-tls.key-file", c.Capture.AgentTLS.KeyFile, "its private key (PEM)")
	fs.Func("capture.kinds", "comma-separated evidence kinds to request (e.g. cpu,jfr,kernel); empty asks for all an agent offers", func(s string) error {
		c.Capture.Kinds = splitList(s)
		return nil
	})

	fs.DurationVar(&c.Retention.Normal, "retention.normal", c.Retention.Normal, "keep traces without anomalous or error spans this long (0 = forever)")
	fs.DurationVar(&c.Retention.Anomalous, "retention.anomalous", c.Retention.Anomalous, "keep traces with an anomalous or error span this long (0 = forever)")
	fs.Int64Var(&c.Retention.MaxBytes, "retention.max-bytes", c.Retention.MaxBytes, "size cap of the store in bytes; oldest normal traces go first (0 = automatic, see -retention.max-disk-fraction; negative = no cap)")
	fs.Float64Var(&c.Retention.MaxDiskFraction, "retention.max-disk-fraction", c.Retention.MaxDiskFraction, "automatic size cap: this share of the data directory's filesystem, at least 1 GiB and at most 90% of it")
	fs.DurationVar(&c.Retention.MaxClockSkew, "retention.max-clock-skew", c.Retention.MaxClockSkew, "spans ending further than this from their receive time are flagged rootline.clock_skew_ms and aged from receipt (0 = 1h, negative = off)")
	fs.DurationVar(&c.Retention.Interval, "retention.interval", c.Retention.Interval, "how often retention runs")

	fs.StringVar(&c.Export.Endpoint, "export.otlp.endpoint", c.Export.Endpoint, "also send enriched spans to this OTLP/gRPC endpoint (host:port, plaintext)")
	fs.StringVar(&c.SQLite.Synchronous, "sqlite.synchronous", c.SQLite.Synchronous, "storage.spans.sqlite.synchronous: FULL (default): acknowledged spans survive power loss; NORMAL: they survive a server crash (faster)")
	fs.StringVar(&c.AuthTokenFile, "auth.token-file", c.AuthTokenFile, "file holding the bearer token of every /api/ route, /metrics and the agent API, and of the receivers unless they have their own (or set ROOTLINE_AUTH_TOKEN)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "on SIGTERM, time allowed to drain receivers and commit queued spans")
	fs.StringVar(&c.LogLevel, "log.level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log.format", c.LogFormat, "text or json")
}

// registerReceiverFlags binds the receivers' security and bounds.
func (c *Config) registerReceiverFlags(fs *flag.FlagSet) {
	r := &c.Receiver
	fs.StringVar(&r.TLS.CertFile, "receiver.tls.cert-file", r.TLS.CertFile, "serve the three receivers over TLS with this PEM certificate (chain)")
	fs.StringVar(&r.TLS.KeyFile, "receiver.tls.key-file", r.TLS.KeyFile, "PEM private key of --receiver.tls.cert-file")
	fs.StringVar(&r.TLS.ClientCAFile, "receiver.tls.client-ca-file", r.TLS.ClientCAFile, "require senders to present a certificate signed by a CA in this PEM file (mutual TLS); it authenticates them in place of a token")
	fs.StringVar(&r.AuthTokenFile, "receiver.auth.token-file", r.AuthTokenFile, "file holding the bearer token spans and metrics must come with (or set ROOTLINE_INGEST_TOKEN; default: the server's auth token)")
	fs.BoolVar(&r.AllowUnauthenticated, "receiver.allow-unauthenticated", r.AllowUnauthenticated, "take spans without a token or client certificate, even on addresses beyond loopback (trusted networks only)")
	fs.IntVar(&r.MaxConcurrentRequests, "receiver.max-concurrent-requests", r.MaxConcurrentRequests, "requests each receiver decodes and stores at once; more get 429 / RESOURCE_EXHAUSTED to retry")
	fs.Int64Var(&r.MaxInflightBytes, "receiver.max-inflight-bytes", r.MaxInflightBytes, "memory all requests in flight may hold, bodies and decoding (0: 1/4 of --memory-limit); past it 429 / RESOURCE_EXHAUSTED to retry")
	fs.IntVar(&r.MaxConnections, "receiver.max-connections", r.MaxConnections, "open connections per receiver; more wait to be accepted")
	fs.DurationVar(&r.ReadHeaderTimeout, "receiver.read-header-timeout", r.ReadHeaderTimeout, "time for a TLS handshake and a request's headers")
	fs.DurationVar(&r.ReadTimeout, "receiver.read-timeout", r.ReadTimeout, "time for a whole request, body included (gRPC: a message); then the connection or stream is closed")
	fs.DurationVar(&r.IdleTimeout, "receiver.idle-timeout", r.IdleTimeout, "a connection without requests is closed after this long")
	l := &r.Limits
	fs.IntVar(&l.MaxAttributeDepth, "receiver.limits.max-attribute-depth", l.MaxAttributeDepth, "deepest nesting of array and map attribute values; deeper requests get 400 / INVALID_ARGUMENT")
	fs.IntVar(&l.MaxAttributes, "receiver.limits.max-attributes", l.MaxAttributes, "attributes kept per span, event, link, resource and scope; the rest are counted in rootline.dropped_attributes")
	fs.IntVar(&l.MaxEvents, "receiver.limits.max-events", l.MaxEvents, "events kept per span; the rest are counted in rootline.dropped_events")
	fs.IntVar(&l.MaxLinks, "receiver.limits.max-links", l.MaxLinks, "links kept per span; the rest are counted in rootline.dropped_links")
	fs.IntVar(&l.MaxValueBytes, "receiver.limits.max-value-bytes", l.MaxValueBytes, "attribute values and status messages are cut to this many bytes")
	fs.IntVar(&l.MaxNameBytes, "receiver.limits.max-name-bytes", l.MaxNameBytes, "service, span, event and metric names are cut to this many bytes; longer attribute keys are dropped")
	cd := &r.Cardinality
	fs.IntVar(&cd.MaxServices, "receiver.cardinality.max-services", cd.MaxServices, "services known at once; spans of more go under the service rootline-overflow")
	fs.IntVar(&cd.MaxNewServicesPerMinute, "receiver.cardinality.max-new-services-per-minute", cd.MaxNewServicesPerMinute, "services first seen per minute; more go under rootline-overflow")
	fs.IntVar(&cd.MaxOperationsPerService, "receiver.cardinality.max-operations-per-service", cd.MaxOperationsPerService, "span names known per service; more go under the operation rootline-overflow")
	fs.IntVar(&cd.MaxOperations, "receiver.cardinality.max-operations", cd.MaxOperations, "span names known over all services; more go under rootline-overflow")
	fs.DurationVar(&cd.ForgetAfter, "receiver.cardinality.forget-after", cd.ForgetAfter, "a service or span name without spans for this long stops counting against the caps")
}
