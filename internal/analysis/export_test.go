package analysis

import "github.com/rootline/rootline/internal/model"

// SpanTimes returns, for span id of a trace, its start and its exclusive
// time as the analysis sees them (after cutting a server span to its
// caller's CLIENT span); ok is false when the trace has no such span.
func SpanTimes(spans []*model.Span, id model.SpanID) (start, exclusive int64, ok bool) {
	for _, s := range newTrace(spans).spans {
		if s.id == id {
			return s.start, s.exclusive(), true
		}
	}
	return 0, 0, false
}
