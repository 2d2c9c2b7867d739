// Command uiload fills a Rootline server for the UI timing check: N spans of
// traces over 20 services through OTLP/gRPC, plus one trace of 5,000 spans,
// whose id it prints last as "big_trace=<id>".
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("otlp", "127.0.0.1:4317", "OTLP/gRPC address of the server")
	spans := flag.Int("spans", 1_000_000, "spans to send besides the big trace")
	big := flag.Int("big", 5000, "spans in the big trace")
	flag.Parse()
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)
	rng := rand.New(rand.NewPCG(7, 9))
	ctx := context.Background()
	now := time.Now()
	send := func(td ptrace.Traces) {
		for {
			_, err := client.Export(ctx, ptraceotlp.NewExportRequestFromTraces(td))
			if err == nil {
				return
			}
			time.Sleep(200 * time.Millisecond) // backpressure: retry
		}
	}
	sent := 0
	for sent < *spans {
		td := ptrace.NewTraces()
		for range 200 { // traces per request
			start := now.Add(-time.Duration(rng.Int64N(int64(time.Hour))))
			addTrace(td, rng, start, 5, 20)
			sent += 5
		}
		send(td)
		if sent%100_000 == 0 {
			log.Printf("sent %d spans", sent)
		}
	}
	td := ptrace.NewTraces()
	id := addTrace(td, rng, now.Add(-time.Minute), *big, 20)
	send(td)
	fmt.Printf("spans=%d big_trace=%s\n", sent, id)
}

// addTrace appends a trace of n spans (each the child of a random earlier
// one) over `services` services and returns its id.
func addTrace(td ptrace.Traces, rng *rand.Rand, start time.Time, n, services int) string {
	var tid pcommon.TraceID
	for i := range tid {
		tid[i] = byte(rng.Uint32())
	}
	rs := td.ResourceSpans().AppendEmpty()
	svc := fmt.Sprintf("svc-%d", rng.IntN(services))
	rs.Resource().Attributes().PutStr("service.name", svc)
	ss := rs.ScopeSpans().AppendEmpty().Spans()
	ids := make([]pcommon.SpanID, n)
	for i := range n {
		for j := range ids[i] {
			ids[i][j] = byte(rng.Uint32())
		}
		s := ss.AppendEmpty()
		s.SetTraceID(tid)
		s.SetSpanID(ids[i])
		if i > 0 {
			s.SetParentSpanID(ids[rng.IntN(i)])
		}
		s.SetName(fmt.Sprintf("op-%d", rng.IntN(10)))
		off := time.Duration(i) * 50 * time.Microsecond
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(start.Add(off)))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(off + time.Duration(1+rng.IntN(20))*time.Millisecond)))
		s.Attributes().PutStr("http.route", "/api/x")
	}
	return tid.String()
}
