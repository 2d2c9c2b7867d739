package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/export"
)

// The span relay: `rootline run` sends each process's span batches to its
// node's agent (POST agentapi.TracesPath, an OTLP/HTTP trace request), and
// the agent sends what its node's processes sent to the server in one
// request every RelayConfig.Every. A server pays per request (the HTTP
// exchange, decompression, a commit), so ten processes' batches a second
// cost it several times what one batch of all their spans does, and gzip
// compresses the resources and attribute names the processes share once.
//
// An ExportTraceServiceRequest is one repeated field (resource_spans = 1),
// and protobuf merges repeated fields of concatenated messages: the relay
// checks each body's framing (every field a well-formed resource_spans)
// and concatenates the bodies as they are, without decoding the spans. A
// batch the server refuses as malformed (400) is sent again body by body,
// so that one bad body loses only its own spans.
//
// The relay answers a body at once once it holds it (200); beyond
// MaxPendingBytes held (the server is slow, down or refusing) it answers
// 503 with Retry-After, which `rootline run` retries and then sends
// directly. A batch the server answers "retry later", or does not answer,
// is sent again for up to RetryTime; then its spans are dropped and
// counted.

// RelayConfig configures the span relay.
type RelayConfig struct {
	// Disabled turns the relay off: TracesPath answers 404 and
	// `rootline run` sends to the server directly.
	Disabled bool `yaml:"disabled"`
	// URL is the server's OTLP/HTTP traces endpoint. Empty: the port the
	// server's registration reply names (its OTLP/HTTP receiver) on the
	// host of ServerURL, /v1/traces; until the agent has registered, or
	// when the server runs no receiver in the process the agent registers
	// with, the relay takes nothing (404).
	URL string `yaml:"url"`
	// Every is how often the held spans are sent (default 1s).
	Every time.Duration `yaml:"every"`
	// MaxBodyBytes bounds one body, decompressed (default 8 MiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxPendingBytes bounds the bodies held, those being sent included
	// (default 64 MiB).
	MaxPendingBytes int64 `yaml:"max_pending_bytes"`
	// RetryTime bounds how long one batch is retried (default 30s).
	RetryTime time.Duration `yaml:"retry_time"`
}

func (c RelayConfig) withDefaults() RelayConfig {
	if c.Every <= 0 {
		c.Every = time.Second
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 8 << 20
	}
	if c.MaxPendingBytes <= 0 {
		c.MaxPendingBytes = 64 << 20
	}
	if c.RetryTime <= 0 {
		c.RetryTime = 30 * time.Second
	}
	return c
}

// relayFlushBytes sends the held bodies before Every when they reach it.
const relayFlushBytes = 4 << 20

// relay is the agent's span relay.
type relay struct {
	cfg    RelayConfig
	log    *slog.Logger
	poster export.Poster // URL set per batch (endpoint)
	// endpoint returns the server's traces URL ("" unknown yet).
	endpoint func() string

	mu      sync.Mutex
	pending [][]byte
	held    int64 // bytes of pending and of the batch being sent
	kick    chan struct{}

	raw, zipped []byte // the batch being sent (the send loop's only)
	// broken says why the server refused the agent itself (its token, a
	// wrong endpoint): the relay takes nothing more, so that the processes
	// send to the server with their own credentials.
	broken atomic.Value // string

	bodies  *prometheus.CounterVec // by outcome
	batches *prometheus.CounterVec // by outcome
	bytes   *prometheus.CounterVec // by direction
}

func newRelay(cfg RelayConfig, client *http.Client, token string, endpoint func() string, logger *slog.Logger) *relay {
	cfg = cfg.withDefaults()
	return &relay{
		cfg: cfg, log: logger.With("component", "relay"), endpoint: endpoint,
		poster: export.Poster{Token: token, Client: client, Gzip: true, MaxTime: cfg.RetryTime, RetryNetwork: true},
		kick:   make(chan struct{}, 1),
		bodies: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_agent_relay_requests_total",
			Help: "Span batches the node's processes sent to the relay, by outcome (held, empty, malformed, too_large, full, no_server)."}, []string{"outcome"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_agent_relay_batches_total",
			Help: "Requests the relay sent to the server, by outcome (sent, failed; split: a batch refused as malformed, sent again body by body)."}, []string{"outcome"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_agent_relay_bytes_total",
			Help: "Bytes through the relay: in (the bodies held, decompressed), out (sent to the server, gzipped), dropped (bodies the server did not take)."}, []string{"direction"}),
	}
}

func (r *relay) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.bodies, r.batches, r.bytes}
}

// serverTracesURL is the server's OTLP/HTTP traces endpoint from its
// registration reply: its receiver's port on the host of serverURL.
func serverTracesURL(serverURL string, reply agentapi.RegistrationReply) string {
	u, err := url.Parse(serverURL)
	if err != nil || reply.OTLPHTTPPort <= 0 {
		return ""
	}
	scheme := "http"
	if reply.OTLPHTTPTLS {
		scheme = "https"
	}
	return (&url.URL{Scheme: scheme, Host: net.JoinHostPort(u.Hostname(), strconv.Itoa(reply.OTLPHTTPPort)), Path: "/v1/traces"}).String()
}

// handle serves POST TracesPath: an OTLP/HTTP protobuf trace request,
// identity or gzip.
func (r *relay) handle(w http.ResponseWriter, req *http.Request) {
	refuse := func(code int, outcome, msg string) {
		r.bodies.WithLabelValues(outcome).Inc()
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		http.Error(w, msg, code)
	}
	if r.endpoint() == "" {
		refuse(http.StatusNotFound, "no_server", "the agent knows no OTLP/HTTP endpoint of the server to relay spans to; send them to the server")
		return
	}
	if why, _ := r.broken.Load().(string); why != "" {
		refuse(http.StatusNotFound, "no_server", "the server refuses the agent's spans ("+why+"); send them to the server")
		return
	}
	if mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); mt != "application/x-protobuf" {
		refuse(http.StatusUnsupportedMediaType, "malformed", "the relay takes OTLP/HTTP protobuf (Content-Type: application/x-protobuf)")
		return
	}
	var in io.Reader = http.MaxBytesReader(w, req.Body, r.cfg.MaxBodyBytes)
	switch req.Header.Get("Content-Encoding") {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(in)
		if err != nil {
			refuse(http.StatusBadRequest, "malformed", "gzip: "+err.Error())
			return
		}
		in = zr
	default:
		refuse(http.StatusUnsupportedMediaType, "malformed", "Content-Encoding must be gzip or identity")
		return
	}
	body, err := io.ReadAll(io.LimitReader(in, r.cfg.MaxBodyBytes+1))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge) || int64(len(body)) > r.cfg.MaxBodyBytes:
		refuse(http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("a body beyond %d bytes", r.cfg.MaxBodyBytes))
		return
	case err != nil:
		refuse(http.StatusBadRequest, "malformed", "reading the body: "+err.Error())
		return
	}
	if err := checkTraceRequest(body); err != nil {
		refuse(http.StatusBadRequest, "malformed", err.Error())
		return
	}
	if len(body) == 0 {
		r.bodies.WithLabelValues("empty").Inc()
	} else {
		r.mu.Lock()
		full := r.held+int64(len(body)) > r.cfg.MaxPendingBytes
		if !full {
			r.pending = append(r.pending, body)
			r.held += int64(len(body))
		}
		kick := r.held >= relayFlushBytes
		r.mu.Unlock()
		if full {
			refuse(http.StatusServiceUnavailable, "full", "the relay holds as many spans as it may; retry later")
			return
		}
		r.bodies.WithLabelValues("held").Inc()
		r.bytes.WithLabelValues("in").Add(float64(len(body)))
		if kick {
			select {
			case r.kick <- struct{}{}:
			default:
			}
		}
	}
	// An empty ExportTraceServiceResponse: everything taken.
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// checkTraceRequest checks that b is a sequence of well-formed
// ExportTraceServiceRequest.resource_spans fields (1, length-delimited),
// the framing concatenation needs. The spans inside are the server's to
// decode and check.
func checkTraceRequest(b []byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("not an OTLP trace request: %w", protowire.ParseError(n))
		}
		if num != 1 || typ != protowire.BytesType {
			return fmt.Errorf("not an OTLP trace request: field %d (wire type %d) where only resource_spans (1, bytes) may be", num, typ)
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return fmt.Errorf("not an OTLP trace request: %w", protowire.ParseError(m))
		}
		b = b[m:]
	}
	return nil
}

// run sends the held bodies every Every (sooner when they reach
// relayFlushBytes) until ctx ends, then once more within a few seconds.
func (r *relay) run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-r.kick:
		}
		// A tick that came with the end (select picks either) flushes
		// with the end's context too: the run's is cancelled, and what
		// is held would be dropped.
		if ctx.Err() != nil {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			r.flush(fctx)
			cancel()
			return
		}
		r.flush(ctx)
	}
}

// flush sends what is held, in requests of at most relayFlushBytes (the
// server's default request limit is 8 MiB decompressed) unless one body is
// larger.
func (r *relay) flush(ctx context.Context) {
	r.mu.Lock()
	all := r.pending
	r.pending = nil
	r.mu.Unlock()
	for len(all) > 0 {
		n, size := 1, int64(len(all[0]))
		for n < len(all) && size+int64(len(all[n])) <= relayFlushBytes {
			size += int64(len(all[n]))
			n++
		}
		r.flushParts(ctx, all[:n], size)
		all = all[n:]
	}
}

// flushParts sends bodies of size bytes in all as one request.
func (r *relay) flushParts(ctx context.Context, parts [][]byte, size int64) {
	r.raw = r.raw[:0]
	for _, p := range parts {
		r.raw = append(r.raw, p...)
	}
	defer func() {
		r.mu.Lock()
		r.held -= size
		r.mu.Unlock()
	}()
	err := r.send(ctx, r.raw)
	if code := export.StatusOf(err); (code == http.StatusBadRequest || code == http.StatusRequestEntityTooLarge) && len(parts) > 1 {
		// One body the server could not decode, or a server whose limit
		// is below the batch: the bodies one by one.
		r.batches.WithLabelValues("split").Inc()
		var bad int
		for _, p := range parts {
			if err := r.send(ctx, p); err != nil {
				bad++
				r.drop(len(p))
			}
		}
		if bad > 0 {
			r.log.Warn("the server refused bodies of the node's processes; their spans are dropped", "bodies", bad, "of", len(parts))
		}
		return
	}
	switch code := export.StatusOf(err); code {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType:
		r.broken.Store(err.Error())
		r.log.Error("the server refuses the relay's requests: the relay takes no more spans, the node's processes send theirs directly", "to", r.endpoint(), "err", err)
	}
	if err != nil {
		r.drop(int(size))
		r.log.Warn("cannot send the node's spans to the server; they are dropped (counted in rootline_agent_relay_bytes_total)", "bodies", len(parts), "bytes", size, "err", err)
	}
}

func (r *relay) drop(n int) {
	r.batches.WithLabelValues("failed").Inc()
	r.bytes.WithLabelValues("dropped").Add(float64(n))
}

// send gzips raw and posts it to the server, retrying.
func (r *relay) send(ctx context.Context, raw []byte) error {
	u := r.endpoint()
	if u == "" {
		return errors.New("no OTLP/HTTP endpoint of the server known")
	}
	r.zipped = export.AppendGzip(r.zipped[:0], raw)
	p := &r.poster
	p.URL = u
	if err := p.PostRetrying(ctx, r.zipped); err != nil {
		return err
	}
	r.batches.WithLabelValues("sent").Inc()
	r.bytes.WithLabelValues("out").Add(float64(len(r.zipped)))
	return nil
}
