// Package export forwards enriched spans (with Rootline's anomaly attributes)
// to another OTLP backend. Export never slows ingest: committed spans are
// queued without blocking and dropped, counted, when the queue is full or the
// backend keeps failing.
package export

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rootline/rootline/internal/model"
)

// Config of the OTLP/gRPC exporter.
type Config struct {
	// Endpoint is host:port of an OTLP/gRPC receiver; empty disables export.
	Endpoint string `yaml:"endpoint"`
	// Queue bounds the spans waiting to be sent.
	Queue int `yaml:"queue"`
	// BatchSpans bounds the spans per export request.
	BatchSpans int `yaml:"batch_spans"`
	// Timeout bounds one export request.
	Timeout time.Duration `yaml:"timeout"`
	// Retries of a failed request before its spans are dropped.
	Retries int `yaml:"retries"`
}

// DefaultConfig returns the defaults (export disabled).
func DefaultConfig() Config {
	return Config{Queue: 50_000, BatchSpans: 2_000, Timeout: 10 * time.Second, Retries: 3}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Endpoint == "" {
		return nil
	}
	if c.Queue < 1 || c.BatchSpans < 1 || c.Timeout <= 0 || c.Retries < 0 {
		return errors.New("export: queue and batch_spans must be ≥ 1, timeout positive, retries ≥ 0")
	}
	return nil
}

// Exporter implements pipeline.Sink.
type Exporter struct {
	cfg    Config
	conn   *grpc.ClientConn
	client ptraceotlp.GRPCClient
	queue  chan *model.Span
	logger *slog.Logger

	sent, dropped, failed prometheus.Counter
}

// New dials the endpoint lazily (gRPC connects on first use). reg may be nil.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Exporter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := grpc.NewClient(cfg.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("export endpoint %q: %w", cfg.Endpoint, err)
	}
	e := &Exporter{
		cfg: cfg, conn: conn, client: ptraceotlp.NewGRPCClient(conn),
		queue:   make(chan *model.Span, cfg.Queue),
		logger:  logger.With("component", "export"),
		sent:    prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_export_spans_sent_total", Help: "Spans exported to the OTLP endpoint."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_export_spans_dropped_total", Help: "Spans not exported because the export queue was full."}),
		failed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_export_spans_failed_total", Help: "Spans dropped after the export endpoint kept failing."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{e.sent, e.dropped, e.failed} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return e, nil
}

// OnCommitted queues spans for export without blocking. A provisional
// copy of a span still in flight (model.AttrInFlight) is not exported: a
// downstream backend would keep it beside the final one.
func (e *Exporter) OnCommitted(spans []*model.Span) {
	for _, s := range spans {
		if s.InFlight() {
			continue
		}
		select {
		case e.queue <- s:
		default:
			e.dropped.Inc()
		}
	}
}

// Run sends batches until ctx ends, then flushes what is queued (bounded by
// the configured timeout) and closes the connection.
func (e *Exporter) Run(ctx context.Context) error {
	batch := make([]*model.Span, 0, e.cfg.BatchSpans)
	flush := func(ctx context.Context) {
		if len(batch) > 0 {
			e.send(ctx, batch)
			batch = batch[:0]
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case s := <-e.queue:
			batch = append(batch, s)
			if len(batch) == e.cfg.BatchSpans {
				flush(ctx)
			}
		case <-tick.C:
			flush(ctx)
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timeout)
			for drained := false; !drained; {
				select {
				case s := <-e.queue:
					batch = append(batch, s)
					if len(batch) == e.cfg.BatchSpans {
						flush(fctx)
					}
				default:
					drained = true
				}
			}
			flush(fctx)
			cancel()
			return e.conn.Close()
		}
	}
}

func (e *Exporter) send(ctx context.Context, spans []*model.Span) {
	req := ptraceotlp.NewExportRequestFromTraces(ToPdata(spans))
	backoff := 200 * time.Millisecond
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
		_, err := e.client.Export(rctx, req)
		cancel()
		if err == nil {
			e.sent.Add(float64(len(spans)))
			return
		}
		if attempt >= e.cfg.Retries || ctx.Err() != nil {
			e.failed.Add(float64(len(spans)))
			e.logger.Warn("export failed; spans dropped", "spans", len(spans), "endpoint", e.cfg.Endpoint, "err", err)
			return
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff *= 2
	}
}

// ToPdata converts spans to OTLP, grouping them by resource.
func ToPdata(spans []*model.Span) ptrace.Traces {
	td := ptrace.NewTraces()
	byRes := map[string]ptrace.SpanSlice{}
	for _, s := range spans {
		key := resourceKey(s)
		ss, ok := byRes[key]
		if !ok {
			rs := td.ResourceSpans().AppendEmpty()
			putAttrs(rs.Resource().Attributes(), s.Resource)
			if _, has := rs.Resource().Attributes().Get(model.AttrServiceName); !has {
				rs.Resource().Attributes().PutStr(model.AttrServiceName, s.Service)
			}
			sc := rs.ScopeSpans().AppendEmpty()
			sc.Scope().SetName(s.Scope)
			ss = sc.Spans()
			byRes[key] = ss
		}
		ps := ss.AppendEmpty()
		ps.SetTraceID(pcommon.TraceID(s.TraceID))
		ps.SetSpanID(pcommon.SpanID(s.SpanID))
		ps.SetParentSpanID(pcommon.SpanID(s.ParentSpanID))
		ps.SetName(s.Name)
		ps.SetKind(ptrace.SpanKind(s.Kind))
		ps.SetStartTimestamp(pcommon.Timestamp(s.Start))
		ps.SetEndTimestamp(pcommon.Timestamp(s.End()))
		ps.Status().SetCode(ptrace.StatusCode(s.StatusCode))
		ps.Status().SetMessage(s.StatusMessage)
		putAttrs(ps.Attributes(), s.Attributes)
		for _, ev := range s.Events {
			pe := ps.Events().AppendEmpty()
			pe.SetTimestamp(pcommon.Timestamp(ev.Time))
			pe.SetName(ev.Name)
			putAttrs(pe.Attributes(), ev.Attributes)
		}
		for _, l := range s.Links {
			pl := ps.Links().AppendEmpty()
			pl.SetTraceID(pcommon.TraceID(l.TraceID))
			pl.SetSpanID(pcommon.SpanID(l.SpanID))
			putAttrs(pl.Attributes(), l.Attributes)
		}
	}
	return td
}

func resourceKey(s *model.Span) string {
	k := s.Service + "\x00" + s.Scope
	for _, kv := range s.Resource {
		k += "\x00" + kv.Key + "=" + kv.Value.String()
	}
	return k
}

func putAttrs(m pcommon.Map, kvs []model.KeyValue) {
	for _, kv := range kvs {
		switch kv.Value.Type {
		case model.TypeBool:
			m.PutBool(kv.Key, kv.Value.Int != 0)
		case model.TypeInt:
			m.PutInt(kv.Key, kv.Value.Int)
		case model.TypeFloat:
			m.PutDouble(kv.Key, kv.Value.Float)
		case model.TypeBytes:
			m.PutEmptyBytes(kv.Key).FromRaw([]byte(kv.Value.Str))
		default:
			m.PutStr(kv.Key, kv.Value.Str)
		}
	}
}
