package run

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/rootline/rootline/internal/kclock"
	"github.com/rootline/rootline/internal/run/httpstream"
)

// KernelEvent is one record of the in-kernel datapath (package datapath),
// as much of it as spans need. It is its own type so that span building is
// tested without BPF.
type KernelEvent struct {
	Type      uint32
	Flags     uint32
	Tgid, Tid int
	Mono      int64 // CLOCK_MONOTONIC ns
	Conn      uint64
	TraceID   [16]byte
	SpanID    uint64
	ParentID  uint64
	StartMono int64
	Local     time.Duration // the request's local wait, its socket wait included
	Sock      time.Duration // its first byte's wait in the socket before the service read it (CallEnd: the response's)
	Net       time.Duration
	Remote    time.Duration
	Server    time.Duration
	Status    int
	Tids      []int
	Peer      netip.AddrPort
	Head      []byte
}

// Kernel event types and flags (datapath.Ev*, datapath.Flag*).
const (
	KevRequest    = 1
	KevRequestEnd = 2
	KevCall       = 3
	KevCallEnd    = 4
	KevOpaque     = 5
	KevSkip       = 7

	KflagSampled = 1
	KflagClosed  = 16
	KflagTimed   = 32
	KflagUnbound = 64
	KflagH2      = 512 // KevOpaque: the connection began as HTTP/2
)

// H2Warning is logged once per run when the in-kernel datapath passes an
// HTTP/2 connection through: the service's gRPC or h2c traffic is not
// traced, and the operator should know it and how to trace it.
const H2Warning = "HTTP/2 connections seen; the eBPF datapath does not trace HTTP/2 on this kernel; run with -mode ptrace (or declare -protocol grpc, which picks it)"

// KernelSpans builds SERVER and CLIENT spans from the events of the
// in-kernel datapath: a span starts at its head's event and is emitted at
// its end event. Its methods are for one goroutine.
type KernelSpans struct {
	res        resource
	sink       Sink
	log        *slog.Logger
	monoOffset int64
	reqs       map[uint64]*request // by SERVER span id
	calls      map[uint64]*call    // by CLIENT span id
	inflight   *InFlight

	goMu  sync.Mutex
	goPID map[int]bool // processes that are Go programs (MarkGo)

	// Stats are the counters: the config's, or its own.
	Stats *Stats
}

// KernelSpansConfig configures NewKernelSpans.
type KernelSpansConfig struct {
	Service, Instance, Host string
	Sink                    Sink
	Logger                  *slog.Logger
	// MonoOffset, when not 0, is a fixed wall − CLOCK_MONOTONIC in ns (for
	// tests); 0 converts with kclock.MonotonicUnix, which follows steps of
	// the wall clock.
	MonoOffset int64
	// Stats receives the counters (nil: the builder's own), so that a
	// metrics listener started before the builder can read them.
	Stats *Stats
	// InFlight, when set, is told of each request and call as it starts
	// (see Config.InFlight of the tracer).
	InFlight *InFlight
}

// NewKernelSpans returns a span builder.
func NewKernelSpans(cfg KernelSpansConfig) *KernelSpans {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	if cfg.Stats == nil {
		cfg.Stats = new(Stats)
	}
	return &KernelSpans{Stats: cfg.Stats,
		res:  resource{service: cfg.Service, instance: cfg.Instance, host: cfg.Host},
		sink: cfg.Sink, log: cfg.Logger.With("component", "tracer"), monoOffset: cfg.MonoOffset,
		reqs: map[uint64]*request{}, calls: map[uint64]*call{}, inflight: cfg.InFlight,
	}
}

// MarkGo says that process pid is a Go program: its SERVER spans say so
// (process.runtime.name "go"), so that the kernel analysis knows its threads
// carry goroutines, not requests (a thread parked in the runtime's poller
// is no request's network wait). Safe to call from any goroutine.
func (k *KernelSpans) MarkGo(pid int) {
	k.goMu.Lock()
	defer k.goMu.Unlock()
	if k.goPID == nil {
		k.goPID = map[int]bool{}
	}
	k.goPID[pid] = true
}

func (k *KernelSpans) isGo(pid int) bool {
	k.goMu.Lock()
	defer k.goMu.Unlock()
	return k.goPID[pid]
}

func (k *KernelSpans) wall(mono int64) time.Time {
	if k.monoOffset != 0 {
		return time.Unix(0, mono+k.monoOffset)
	}
	return time.Unix(0, kclock.MonotonicUnix(mono))
}

func spanID(v uint64) httpstream.SpanID {
	var s httpstream.SpanID
	binary.BigEndian.PutUint64(s[:], v)
	return s
}

// headInfo is what spans take from a request head the datapath copied.
type headInfo struct {
	method, target, host, requestID []byte
}

// readHead reads a request head the datapath copied (it followed the head
// in the kernel, so the bytes are a request line and field lines, perhaps
// cut at RD_HEAD): the method, target, Host and X-Request-ID. ok is false
// when the first line is not a request line.
func readHead(b []byte) (h headInfo, ok bool) {
	line, rest, _ := bytes.Cut(b, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	method, line, ok1 := bytes.Cut(line, []byte(" "))
	target, _, ok2 := bytes.Cut(line, []byte(" "))
	if !ok1 || !ok2 || len(method) == 0 {
		return h, false
	}
	h.method, h.target = method, target
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case h.host == nil && len(name) == 4 && bytes.EqualFold(name, []byte("host")):
			h.host = bytes.Trim(value, " \t")
		case h.requestID == nil && bytes.EqualFold(name, []byte(httpstream.HeaderRequestID)):
			h.requestID = bytes.Trim(value, " \t")
		}
	}
	return h, true
}

// Event takes one event of the datapath.
func (k *KernelSpans) Event(ev *KernelEvent) {
	switch ev.Type {
	case KevRequest:
		r := &request{
			span: spanID(ev.SpanID), start: k.wall(ev.StartMono), pid: ev.Tgid,
			threads: []threadDelay{{tid: ev.Tid}}, sock: ev.Sock, goProc: k.isGo(ev.Tgid),
		}
		r.ctx.TraceID = ev.TraceID
		r.ctx.SpanID = spanID(ev.ParentID)
		r.ctx.Sampled = ev.Flags&KflagSampled != 0
		if ev.Peer.IsValid() {
			r.peer = ev.Peer.String()
		}
		if h, ok := readHead(ev.Head); ok {
			r.method, r.target, r.host = string(h.method), string(h.target), string(h.host)
			if id := h.requestID; len(id) > 0 && len(id) <= 256 {
				r.ctx.RequestID = string(id)
			}
		}
		k.reqs[ev.SpanID] = r
		if k.inflight != nil {
			k.inflight.StartServer(r)
		}
	case KevRequestEnd:
		r := k.reqs[ev.SpanID]
		delete(k.reqs, ev.SpanID)
		if r == nil {
			// Its start was lost (a full ring buffer): what the end knows.
			r = &request{span: spanID(ev.SpanID), start: k.wall(ev.StartMono), pid: ev.Tgid, method: "HTTP", goProc: k.isGo(ev.Tgid)}
			r.ctx.TraceID = ev.TraceID
			r.ctx.SpanID = spanID(ev.ParentID)
		}
		r.end = k.wall(ev.Mono)
		r.status = ev.Status
		r.local, r.maxNet, r.maxRemote, r.sock = ev.Local, ev.Net, ev.Remote, ev.Sock
		if len(ev.Tids) > 0 {
			r.threads = r.threads[:0]
			for _, t := range ev.Tids {
				r.threads = append(r.threads, threadDelay{tid: t})
			}
		}
		k.Stats.Requests.Add(1)
		if k.sink != nil {
			k.sink.Emit(k.res.serverSpan(r))
		}
	case KevCall:
		c := &call{
			traceID: ev.TraceID, span: spanID(ev.SpanID), start: k.wall(ev.StartMono), tid: ev.Tid,
			host: "", method: "HTTP",
		}
		if ev.ParentID != 0 {
			c.parentS = spanID(ev.ParentID)
		}
		if ev.Flags&KflagUnbound != 0 {
			k.Stats.Unbound.Add(1)
		}
		if h, ok := readHead(ev.Head); ok {
			c.method, c.target, c.host = string(h.method), string(h.target), string(h.host)
		}
		if c.host == "" && ev.Peer.IsValid() {
			c.host = ev.Peer.String()
		}
		k.calls[ev.SpanID] = c
		if k.inflight != nil && ev.ParentID != 0 {
			k.inflight.StartCall(c, ev.Tgid)
		}
	case KevCallEnd:
		c := k.calls[ev.SpanID]
		delete(k.calls, ev.SpanID)
		if c == nil {
			c = &call{traceID: ev.TraceID, span: spanID(ev.SpanID), start: k.wall(ev.StartMono), method: "HTTP"}
			if ev.ParentID != 0 {
				c.parentS = spanID(ev.ParentID)
			}
			if ev.Peer.IsValid() {
				c.host = ev.Peer.String()
			}
		}
		c.status, c.respSock = ev.Status, ev.Sock
		if ev.Flags&KflagTimed != 0 {
			c.timed = true
			c.timing.HasServerTime = true
			c.timing.ServerTime = ev.Server
			c.timing.Waits = []httpstream.Wait{{Kind: httpstream.WaitRemote, Duration: ev.Remote}}
		}
		k.Stats.Calls.Add(1)
		if k.sink != nil {
			k.sink.Emit(k.res.clientSpan(c, ev.Tgid, k.wall(ev.Mono)))
		}
	case KevOpaque:
		k.Stats.Opaque.Add(1)
		if ev.Flags&KflagH2 != 0 && k.Stats.H2Untraced.Add(1) == 1 {
			k.log.Warn(H2Warning, "peer", ev.Peer.String(), "pid", ev.Tgid)
		}
	case KevSkip:
		k.Stats.Skipped.Add(1)
	}
}

// Pending is the number of spans started and not ended.
func (k *KernelSpans) Pending() int { return len(k.reqs) + len(k.calls) }
