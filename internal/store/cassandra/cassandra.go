// Package cassandra is Rootline's span store on Apache Cassandra, for
// deployments whose traffic outgrows one machine (the choice of Jaeger and of
// Protractor): spans, their search indices, services and operations,
// dependencies, artifact metadata with its span links, and metric points.
// Artifact content goes to a store.BlobStore (S3 in a scale-out deployment).
//
// Each span is one row of the spans table, partitioned by trace, holding the
// span in model's binary codec plus the columns retention and the
// dependency query read. Search goes through index tables partitioned by the
// hour of a span's start (a "bucket") so that no partition grows without
// bound: per operation, per tag, per time shard and for anomalous spans. An
// index row only nominates a candidate; every candidate is checked against
// its span row, so an index row left behind by a rewritten span never
// returns a wrong trace. The buckets table lists which hours hold data for
// each index, so a search walks only hours that exist, newest first.
//
// Writes are idempotent: a span's row and index rows are keyed by its trace
// and span ids, so a batch written twice (a client's retry, a Kafka record
// consumed again after a crash) is stored once. Every row is written with the
// configured TTL as a backstop; Purge applies the exact retention policy
// (normal and important traces, orphan blobs) as a sweep.
//
// The schema is created by `rootline storage init` (Init): idempotent and
// versioned in the meta table; Open refuses a keyspace whose schema is
// missing or of another version.
package cassandra

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gocql/gocql"

	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/tlsconf"
)

var (
	_ store.Store       = (*Store)(nil)
	_ store.WriteProber = (*Store)(nil)
)

// PasswordEnv is the environment variable the password is read from when no
// password file is configured.
const PasswordEnv = "ROOTLINE_CASSANDRA_PASSWORD"

// Config configures the connection and the keyspace.
type Config struct {
	// Servers are contact points, host or host:port (default port 9042).
	Servers []string `yaml:"servers"`
	// Keyspace holds Rootline's tables (default "rootline").
	Keyspace string `yaml:"keyspace"`
	// LocalDC, when set, routes queries to that datacenter's nodes first.
	LocalDC string `yaml:"local_dc"`
	// Consistency of reads and writes (default LOCAL_QUORUM: a write a
	// client saw acknowledged survives the loss of a replica).
	Consistency string `yaml:"consistency"`
	// Username and the password (PasswordFile, or the environment variable
	// ROOTLINE_CASSANDRA_PASSWORD) enable password authentication.
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
	// TLS to the nodes.
	TLS tlsconf.Client `yaml:"tls"`
	// Timeout bounds one query (default 10s); ConnectTimeout one connection
	// attempt (default 5s).
	Timeout        time.Duration `yaml:"timeout"`
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// TTL is written on every row as a backstop of retention: data nobody
	// purged goes after it. 0 disables it; the server sets it from its
	// retention periods when left 0 (see server.Config.StorageConfig).
	TTL time.Duration `yaml:"ttl"`
	// Parallelism bounds the queries one write or search has in flight
	// (default 32).
	Parallelism int `yaml:"parallelism"`
	// ReplicationFactor and Datacenters are used by Init only, when it
	// creates the keyspace: SimpleStrategy with ReplicationFactor (default 1),
	// or NetworkTopologyStrategy with a factor per datacenter.
	ReplicationFactor int            `yaml:"replication_factor"`
	Datacenters       map[string]int `yaml:"datacenters"`
}

// ApplyDefaults fills in the defaults of unset fields.
func (c *Config) ApplyDefaults() {
	if c.Keyspace == "" {
		c.Keyspace = "rootline"
	}
	if c.Consistency == "" {
		c.Consistency = "LOCAL_QUORUM"
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	if c.Parallelism == 0 {
		c.Parallelism = 32
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = 1
	}
}

// Validate checks the configuration (after ApplyDefaults).
func (c Config) Validate() error {
	var errs []error
	if len(c.Servers) == 0 {
		errs = append(errs, errors.New("cassandra: servers must name at least one node"))
	}
	if !validName(c.Keyspace) {
		errs = append(errs, fmt.Errorf("cassandra: keyspace %q must be 1-48 letters, digits or underscores, starting with a letter", c.Keyspace))
	}
	if _, err := gocql.ParseConsistencyWrapper(c.Consistency); err != nil {
		errs = append(errs, fmt.Errorf("cassandra: consistency %q: %w", c.Consistency, err))
	}
	if c.Timeout < 0 || c.ConnectTimeout < 0 || c.TTL < 0 || c.Parallelism < 1 {
		errs = append(errs, errors.New("cassandra: timeout, connect_timeout and ttl must not be negative, parallelism must be ≥ 1"))
	}
	if c.PasswordFile != "" && c.Username == "" {
		errs = append(errs, errors.New("cassandra: password_file needs a username"))
	}
	for dc, rf := range c.Datacenters {
		if rf < 1 || !validName(dc) && !strings.ContainsAny(dc, "-.") {
			errs = append(errs, fmt.Errorf("cassandra: datacenter %q: replication factor must be ≥ 1", dc))
		}
	}
	return errors.Join(errs...)
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 48 || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// password returns the configured password: the file's content, else the
// environment's. It is never logged.
func (c Config) password() (string, error) {
	if c.PasswordFile != "" {
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("cassandra: password file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return os.Getenv(PasswordEnv), nil
}

// cluster builds the driver's configuration; keyspace "" connects to none.
func (c Config) cluster(keyspace string) (*gocql.ClusterConfig, error) {
	cl := gocql.NewCluster(c.Servers...)
	cl.Keyspace = keyspace
	cl.Consistency, _ = gocql.ParseConsistencyWrapper(c.Consistency)
	cl.Timeout = c.Timeout
	cl.WriteTimeout = c.Timeout
	cl.ConnectTimeout = c.ConnectTimeout
	cl.ProtoVersion = 4
	cl.NumConns = 2
	// Reconnect on a short, bounded backoff so that a node that comes back
	// is used within seconds (the default waits up to a minute).
	cl.ReconnectionPolicy = &gocql.ExponentialReconnectionPolicy{MaxRetries: 1 << 20, InitialInterval: 200 * time.Millisecond, MaxInterval: 2 * time.Second}
	cl.ReconnectInterval = 2 * time.Second
	cl.RetryPolicy = &gocql.SimpleRetryPolicy{NumRetries: 1}
	if c.LocalDC != "" {
		cl.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.DCAwareRoundRobinPolicy(c.LocalDC))
	} else {
		cl.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy())
	}
	if c.Username != "" {
		pw, err := c.password()
		if err != nil {
			return nil, err
		}
		cl.Authenticator = gocql.PasswordAuthenticator{Username: c.Username, Password: pw}
	}
	tc, err := c.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("cassandra: %w", err)
	}
	if tc != nil {
		cl.SslOpts = &gocql.SslOptions{Config: tc, EnableHostVerification: !tc.InsecureSkipVerify}
	}
	return cl, nil
}

// Store implements store.Store on Cassandra. It is safe for concurrent use.
type Store struct {
	cfg     Config
	log     *slog.Logger
	session *gocql.Session
	blobs   store.BlobStore
	ttl     int // seconds, 0: none
	closed  atomic.Bool
}

// Open connects to the keyspace of cfg (after ApplyDefaults) and checks its
// schema. blobs keeps artifact content; the Store does not close it.
func Open(ctx context.Context, cfg Config, blobs store.BlobStore, logger *slog.Logger) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if blobs == nil {
		return nil, errors.New("cassandra: a blob store is required for artifact content")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "cassandra")
	cl, err := cfg.cluster(cfg.Keyspace)
	if err != nil {
		return nil, err
	}
	sess, err := cl.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("cassandra: connect to %v, keyspace %s (does it exist? run `rootline storage init`): %w",
			cfg.Servers, cfg.Keyspace, unavailable(err))
	}
	s := &Store{cfg: cfg, log: logger, session: sess, blobs: blobs, ttl: int(cfg.TTL / time.Second)}
	if err := s.checkSchema(ctx); err != nil {
		sess.Close()
		return nil, err
	}
	logger.Info("opened", "servers", cfg.Servers, "keyspace", cfg.Keyspace, "consistency", cfg.Consistency, "ttl", cfg.TTL)
	return s, nil
}

// Close closes the session. It may be called more than once.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.session.Close()
	return nil
}

func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// ProbeWrite writes a short-lived row nobody reads.
func (s *Store) ProbeWrite(ctx context.Context) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	err := s.session.Query(`INSERT INTO meta (key, value) VALUES ('probe', ?) USING TTL 60`,
		time.Now().UTC().Format(time.RFC3339Nano)).WithContext(ctx).Exec()
	if err != nil {
		return fmt.Errorf("cassandra: probe write: %w", unavailable(err))
	}
	return nil
}

// unavailable marks driver errors a later attempt may not meet (no node
// reachable, a timeout, not enough replicas) as store.ErrUnavailable, so
// receivers answer "retry later". Errors of the request itself (a query
// the schema does not allow) stay as they are.
func unavailable(err error) error {
	if err == nil || errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.Canceled) {
		return err
	}
	var re gocql.RequestError
	if errors.As(err, &re) {
		switch re.Code() {
		case gocql.ErrCodeSyntax, gocql.ErrCodeInvalid, gocql.ErrCodeUnauthorized, gocql.ErrCodeConfig:
			return err
		}
	}
	return errors.Join(store.ErrUnavailable, err)
}

// wrap prefixes an error of op and classifies it.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("cassandra: %s: %w", op, unavailable(err))
}

func newID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b[:])
}
