package receiver

import (
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/model"
)

// Names and attributes of spans past a cardinality cap. Such a span is still
// stored and acknowledged; it is filed under the overflow name, and keeps the
// name it came with in an attribute (its resource keeps service.name too).
const (
	OverflowService        = "rootline-overflow"
	OverflowOperation      = "rootline-overflow"
	AttrOverflowService    = "rootline.overflow.service"
	AttrOverflowOperation  = "rootline.overflow.operation"
	cardinalitySweepPeriod = time.Minute
)

// CardinalityConfig caps the services and operations spans may name: each
// new name becomes a row of the store's service and operation lists, a key
// of the anomaly detector and an entry of the UI's menus, so a client that
// makes names up (an ID in a span name, a service per pod) must not be able
// to make them grow without end. Zero fields take DefaultCardinality's.
type CardinalityConfig struct {
	// MaxServices bounds the services known at once.
	MaxServices int `yaml:"max_services"`
	// MaxNewServicesPerMinute bounds the services first seen in one minute.
	MaxNewServicesPerMinute int `yaml:"max_new_services_per_minute"`
	// MaxOperationsPerService bounds the operations (span names) known of
	// one service, and MaxOperations those of all services.
	MaxOperationsPerService int `yaml:"max_operations_per_service"`
	MaxOperations           int `yaml:"max_operations"`
	// ForgetAfter: a service or operation without spans for this long no
	// longer counts against the caps.
	ForgetAfter time.Duration `yaml:"forget_after"`
}

// DefaultCardinality returns the default caps.
func DefaultCardinality() CardinalityConfig {
	return CardinalityConfig{MaxServices: 10_000, MaxNewServicesPerMinute: 100, MaxOperationsPerService: 1_000,
		MaxOperations: 50_000, ForgetAfter: 24 * time.Hour}
}

func (c CardinalityConfig) withDefaults() CardinalityConfig {
	d := DefaultCardinality()
	orDefault(&c.MaxServices, d.MaxServices)
	orDefault(&c.MaxNewServicesPerMinute, d.MaxNewServicesPerMinute)
	orDefault(&c.MaxOperationsPerService, d.MaxOperationsPerService)
	orDefault(&c.MaxOperations, d.MaxOperations)
	orDefault(&c.ForgetAfter, d.ForgetAfter)
	return c
}

// Validate reports every negative field.
func (c CardinalityConfig) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{
		{"max_services", c.MaxServices}, {"max_new_services_per_minute", c.MaxNewServicesPerMinute},
		{"max_operations_per_service", c.MaxOperationsPerService}, {"max_operations", c.MaxOperations},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("cardinality.%s must not be negative, got %d", f.name, f.v))
		}
	}
	if c.ForgetAfter < 0 {
		errs = append(errs, fmt.Errorf("cardinality.forget_after must not be negative, got %v", c.ForgetAfter))
	}
	return errors.Join(errs...)
}

// cardinality tracks the services and operations seen recently and files
// the spans past its caps under the overflow names. Operations are kept as
// hashes of their names: a collision only lets two names share a count.
type cardinality struct {
	cfg      CardinalityConfig
	now      func() time.Time
	logger   *slog.Logger
	overflow *prometheus.CounterVec
	seed     maphash.Seed
	// overflowOp is OverflowOperation's hash: at most one per service, it
	// does not count against MaxOperations.
	overflowOp uint64

	mu          sync.Mutex
	services    map[string]*knownService
	operations  int       // over all services
	minute      time.Time // start of the current new-services window
	newServices int       // first seen in that window
	lastSweep   time.Time
	lastWarn    time.Time
	overflowed  [2]int64 // spans filed under the overflow service, operation since lastWarn
}

type knownService struct {
	lastSeen   int64
	operations map[uint64]int64 // name hash → last seen (Unix ns)
}

func newCardinality(cfg CardinalityConfig, now func() time.Time, logger *slog.Logger, overflow *prometheus.CounterVec) *cardinality {
	t := now()
	c := &cardinality{cfg: cfg.withDefaults(), now: now, logger: logger, overflow: overflow, seed: maphash.MakeSeed(),
		services: map[string]*knownService{}, minute: t, lastSweep: t}
	c.overflowOp = maphash.String(c.seed, OverflowOperation)
	return c
}

// seedServices makes services already stored known, without counting them as
// new: a restarted server must not file its existing services as overflow.
func (c *cardinality) seedServices(names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now().UnixNano()
	for _, name := range names {
		if len(c.services) >= c.cfg.MaxServices {
			return
		}
		if c.services[name] == nil {
			c.services[name] = &knownService{lastSeen: now, operations: map[uint64]int64{}}
		}
	}
}

// apply files each span past a cap under the overflow service or operation.
func (c *cardinality) apply(spans []*model.Span) {
	if len(spans) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now()
	now := t.UnixNano()
	if t.Sub(c.minute) >= time.Minute {
		c.minute, c.newServices = t, 0
	}
	if t.Sub(c.lastSweep) >= cardinalitySweepPeriod {
		c.sweep(now)
		c.lastSweep = t
	}
	var overService, overOperation int64
	for _, s := range spans {
		svc := c.services[s.Service]
		if svc == nil {
			if len(c.services) >= c.cfg.MaxServices || c.newServices >= c.cfg.MaxNewServicesPerMinute {
				s.SetAttr(model.String(AttrOverflowService, s.Service))
				s.Service = OverflowService
				overService++
				svc = c.services[OverflowService]
			}
			if svc == nil {
				svc = &knownService{operations: map[uint64]int64{}}
				c.services[s.Service] = svc
				if s.Service != OverflowService {
					c.newServices++
				}
			}
		}
		svc.lastSeen = now
		h := maphash.String(c.seed, s.Name)
		if _, ok := svc.operations[h]; !ok {
			if len(svc.operations) >= c.cfg.MaxOperationsPerService || c.operations >= c.cfg.MaxOperations {
				s.SetAttr(model.String(AttrOverflowOperation, s.Name))
				s.Name = OverflowOperation
				overOperation++
				h = c.overflowOp
			}
			if _, ok := svc.operations[h]; !ok && h != c.overflowOp {
				c.operations++
			}
		}
		svc.operations[h] = now
	}
	if overService+overOperation == 0 {
		return
	}
	c.overflow.WithLabelValues("service").Add(float64(overService))
	c.overflow.WithLabelValues("operation").Add(float64(overOperation))
	c.overflowed[0] += overService
	c.overflowed[1] += overOperation
	if t.Sub(c.lastWarn) >= time.Minute {
		c.logger.Warn("cardinality cap reached: spans filed under the overflow service or operation, their names kept in "+
			AttrOverflowService+" and "+AttrOverflowOperation,
			"overflow_service_spans", c.overflowed[0], "overflow_operation_spans", c.overflowed[1],
			"services", len(c.services), "operations", c.operations,
			"max_services", c.cfg.MaxServices, "max_new_services_per_minute", c.cfg.MaxNewServicesPerMinute,
			"max_operations_per_service", c.cfg.MaxOperationsPerService, "max_operations", c.cfg.MaxOperations)
		c.lastWarn, c.overflowed = t, [2]int64{}
	}
}

// sweep forgets the services and operations not seen for ForgetAfter.
func (c *cardinality) sweep(now int64) {
	cutoff := now - int64(c.cfg.ForgetAfter)
	for name, svc := range c.services {
		for h, seen := range svc.operations {
			if seen < cutoff {
				delete(svc.operations, h)
				if h != c.overflowOp {
					c.operations--
				}
			}
		}
		if svc.lastSeen < cutoff && len(svc.operations) == 0 {
			delete(c.services, name)
		}
	}
}

// SetKnownServices makes services already stored known to the cardinality
// caps without counting them as new (call it before Start, with the store's
// services): after a restart they are not filed under the overflow name.
func (r *Receivers) SetKnownServices(names []string) { r.card.seedServices(names) }
