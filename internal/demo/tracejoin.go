package demo

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rootline/rootline/internal/mesh"
	"github.com/rootline/rootline/internal/model"
)

// TraceJoin is how well the traces of the entry's requests joined across
// the mesh's hops, read back from the server: a trace joined when it has
// one root span, a span of every service the request visits, and the
// number of spans the topology makes per request.
type TraceJoin struct {
	// Sampled traces (the entry's most recent in the window).
	Sampled int `json:"sampled"`
	// Joined counts the sampled traces that joined.
	Joined int `json:"joined"`
	// WantSpans is the number of spans per request: a SERVER span per
	// service visited and a CLIENT span per call, from rootline run and
	// the same again from the sidecars when they trace.
	WantSpans int `json:"wantSpans"`
	// WantServices is the number of services a request visits.
	WantServices int `json:"wantServices"`
	// Spans, Services and Roots are per sampled trace, in the order sampled.
	Spans    []int `json:"spans"`
	Services []int `json:"services"`
	Roots    []int `json:"roots"`
	// GRPCSpans counts the sampled spans with rpc.system=grpc.
	GRPCSpans int `json:"grpcSpans"`
	// Example is a joined trace's id.
	Example string `json:"example,omitempty"`
}

// wantShape is the spans and services per request of topo's entry.
func wantShape(topo *mesh.Topology, runSpans, sidecarSpans bool) (spans, services int) {
	visits := 0
	v := topo.Visits()
	for _, n := range v {
		visits += n
	}
	per := 2*visits - 1 // a SERVER span per visit, a CLIENT span per call (every visit but the entry's)
	if runSpans {
		spans += per
	}
	if sidecarSpans {
		spans += per // the callee's inbound and the caller's outbound sidecar
	}
	return spans, len(v)
}

// measureTraceJoin samples up to n of the entry's traces between from and
// to from the server's API and counts how many joined.
func measureTraceJoin(ctx context.Context, api, token string, topo *mesh.Topology, runSpans, sidecarSpans bool,
	from, to time.Time, n int) (TraceJoin, error) {
	var tj TraceJoin
	tj.WantSpans, tj.WantServices = wantShape(topo, runSpans, sidecarSpans)
	// The last second's requests may still be on their way to the server.
	traces, err := NewAPISource(api, token).SearchTraces(ctx, topo.Entry, from, to.Add(-time.Second), n)
	if err != nil {
		return tj, fmt.Errorf("sample traces: %w", err)
	}
	for _, spans := range traces {
		ids := map[model.SpanID]bool{}
		services := map[string]bool{}
		for _, s := range spans {
			ids[s.SpanID] = true
			services[s.Service] = true
			if v, ok := s.Attr("rpc.system"); ok && v.String() == "grpc" {
				tj.GRPCSpans++
			}
		}
		roots := 0
		for _, s := range spans {
			if s.ParentSpanID.IsZero() || !ids[s.ParentSpanID] {
				roots++
			}
		}
		tj.Sampled++
		tj.Spans = append(tj.Spans, len(spans))
		tj.Services = append(tj.Services, len(services))
		tj.Roots = append(tj.Roots, roots)
		if roots == 1 && len(services) == tj.WantServices && len(spans) == tj.WantSpans {
			tj.Joined++
			if tj.Example == "" {
				tj.Example = spans[0].TraceID.String()
			}
		}
	}
	return tj, nil
}

// String is a line for the demo's output.
func (tj TraceJoin) String() string {
	med := func(xs []int) int {
		if len(xs) == 0 {
			return 0
		}
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	return fmt.Sprintf("%d of %d sampled traces joined (one root, %d services, %d spans); median %d spans, %d services; %d gRPC spans",
		tj.Joined, tj.Sampled, tj.WantServices, tj.WantSpans, med(tj.Spans), med(tj.Services), tj.GRPCSpans)
}
