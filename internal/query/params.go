package query

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// Query parameters of the Jaeger API (cmd/query/app/query_parser.go in Jaeger).
const (
	paramService     = "service"
	paramOperation   = "operation"
	paramSpanKind    = "spanKind"
	paramTag         = "tag"
	paramTags        = "tags"
	paramStart       = "start"
	paramEnd         = "end"
	paramLookback    = "lookback"
	paramLimit       = "limit"
	paramMinDuration = "minDuration"
	paramMaxDuration = "maxDuration"
	paramTraceID     = "traceID"
	paramEndTs       = "endTs"
	// Rootline's additions to the search.
	paramAnomalous = "anomalous"
	paramErrorOnly = "error"
	// Rootline API.
	paramSince = "since"
	paramKey   = "key"
)

// Defaults Jaeger's query service uses.
const (
	defaultSearchLookback     = 48 * time.Hour
	defaultDependencyLookback = 24 * time.Hour
)

// paramError is a malformed query parameter; it always names the parameter.
type paramError struct {
	param string
	err   error
}

func (e *paramError) Error() string {
	return fmt.Sprintf("unable to parse param '%s': %v", e.param, e.err)
}

func (e *paramError) Unwrap() error { return e.err }

func badParam(param string, err error) error { return &paramError{param: param, err: err} }

var errServiceRequired = fmt.Errorf("parameter '%s' is required", paramService)

// traceSearch is a parsed /api/traces request: either a query or trace ids.
type traceSearch struct {
	query    store.TraceQuery
	traceIDs []model.TraceID
}

// parseTraceSearch parses Jaeger's search parameters plus Rootline's
// anomalous and error flags. Times are Unix µs, durations Go durations.
func (a *API) parseTraceSearch(q url.Values) (traceSearch, error) {
	var ts traceSearch
	for _, s := range q[paramTraceID] {
		id, err := model.ParseTraceID(s)
		if err != nil {
			return ts, badParam(paramTraceID, err)
		}
		ts.traceIDs = append(ts.traceIDs, id)
	}

	tq := store.TraceQuery{
		Service:   q.Get(paramService),
		Operation: q.Get(paramOperation),
	}
	if tq.Service == "" && len(ts.traceIDs) == 0 {
		return ts, errServiceRequired
	}

	var err error
	if s := q.Get(paramEnd); s != "" {
		if tq.StartMax, err = parseMicros(s); err != nil {
			return ts, badParam(paramEnd, err)
		}
	}
	if s := q.Get(paramStart); s != "" {
		if tq.StartMin, err = parseMicros(s); err != nil {
			return ts, badParam(paramStart, err)
		}
	} else {
		// The Jaeger UI sends lookback=custom together with start and end;
		// without start, lookback (or Jaeger's default) says how far back
		// from end, or from now. Without end there is no upper bound.
		lookback := defaultSearchLookback
		if s := q.Get(paramLookback); s != "" && s != "custom" {
			if lookback, err = parseLongDuration(s); err != nil {
				return ts, badParam(paramLookback, err)
			}
		}
		base := a.now().UnixNano()
		if tq.StartMax != 0 {
			base = tq.StartMax
		}
		tq.StartMin = max(0, base-int64(lookback))
	}
	if tq.StartMax != 0 {
		// end is inclusive at Jaeger's µs precision: a span that started
		// 500ns into the end microsecond is still in range.
		tq.StartMax += 999
	}
	if tq.StartMax != 0 && tq.StartMax < tq.StartMin {
		return ts, badParam(paramEnd, errors.New("end is before start"))
	}

	if tq.Tags, err = parseTags(q[paramTag], q[paramTags]); err != nil {
		return ts, err
	}

	if tq.DurationMin, err = parseDurationParam(q, paramMinDuration); err != nil {
		return ts, err
	}
	if tq.DurationMax, err = parseDurationParam(q, paramMaxDuration); err != nil {
		return ts, err
	}
	if tq.DurationMin != 0 && tq.DurationMax != 0 && tq.DurationMax < tq.DurationMin {
		return ts, badParam(paramMaxDuration, errors.New("'maxDuration' should be greater than 'minDuration'"))
	}

	if tq.Limit, err = a.parseLimit(q, a.cfg.DefaultLimit); err != nil {
		return ts, err
	}
	if tq.AnomalousOnly, err = parseBoolParam(q, paramAnomalous); err != nil {
		return ts, err
	}
	if tq.ErrorOnly, err = parseBoolParam(q, paramErrorOnly); err != nil {
		return ts, err
	}
	ts.query = tq
	return ts, nil
}

// parseMicros parses Unix microseconds into Unix nanoseconds.
func parseMicros(s string) (int64, error) {
	us, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer of Unix microseconds", s)
	}
	if us < 0 || us > maxUnixMicros {
		return 0, fmt.Errorf("%d is out of range", us)
	}
	return us * 1000, nil
}

// maxUnixMicros keeps µs→ns conversions (plus the 999ns of an inclusive end)
// inside int64 (year 2262).
const maxUnixMicros = (1<<63-1)/1000 - 1

// parseDurationParam parses an optional non-negative Go duration ("1.2s",
// "100ms", "500us") into ns.
func parseDurationParam(q url.Values, param string) (int64, error) {
	s := q.Get(param)
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, badParam(param, err)
	}
	if d < 0 {
		return 0, badParam(param, fmt.Errorf("%q is negative", s))
	}
	return int64(d), nil
}

// parseLongDuration is time.ParseDuration plus whole days ("2d") and weeks
// ("1w"), which lookback choices use. Negative durations are rejected.
func parseLongDuration(s string) (time.Duration, error) {
	for _, u := range []struct {
		suffix string
		unit   time.Duration
	}{{"d", 24 * time.Hour}, {"w", 7 * 24 * time.Hour}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			unit := u.unit
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil || v < 0 || v > int64(1<<63-1)/int64(unit) {
				return 0, fmt.Errorf("invalid duration %q", s)
			}
			return time.Duration(v) * unit, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q is negative", s)
	}
	return d, nil
}

// parseTags merges Jaeger's two tag syntaxes: repeated tag=key:value and a
// JSON object in tags. Values are compared as text by the store.
func parseTags(simple, jsonTags []string) (map[string]string, error) {
	var tags map[string]string
	set := func(k, v string) {
		if tags == nil {
			tags = make(map[string]string)
		}
		tags[k] = v
	}
	for _, t := range simple {
		k, v, ok := strings.Cut(t, ":")
		if !ok || k == "" {
			return nil, badParam(paramTag, fmt.Errorf("expecting key:value, received %q", t))
		}
		set(k, v)
	}
	for _, t := range jsonTags {
		var m map[string]any
		if err := json.Unmarshal([]byte(t), &m); err != nil {
			return nil, badParam(paramTags, fmt.Errorf("cannot unmarshal JSON object: %w", err))
		}
		for k, v := range m {
			// Jaeger requires string values; numbers and booleans are
			// accepted too, since they have one obvious text form.
			switch v := v.(type) {
			case string:
				set(k, v)
			case bool:
				set(k, strconv.FormatBool(v))
			case float64:
				set(k, strconv.FormatFloat(v, 'f', -1, 64))
			default:
				return nil, badParam(paramTags, fmt.Errorf("value of tag %q must be a string", k))
			}
		}
	}
	return tags, nil
}

// parseLimit parses an optional positive limit, capped at cfg.MaxLimit.
func (a *API) parseLimit(q url.Values, def int) (int, error) {
	s := q.Get(paramLimit)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, badParam(paramLimit, fmt.Errorf("%q is not a non-negative integer", s))
	}
	if n == 0 {
		return def, nil
	}
	return min(n, a.cfg.MaxLimit), nil
}

func parseBoolParam(q url.Values, param string) (bool, error) {
	s := q.Get(param)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, badParam(param, fmt.Errorf("%q is not a boolean", s))
	}
	return b, nil
}

// parseMillis parses Jaeger's non-negative integer milliseconds into ns.
func parseMillis(s string) (int64, error) {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer of milliseconds", s)
	}
	if ms < 0 || ms > (1<<63-1)/int64(time.Millisecond) {
		return 0, fmt.Errorf("%d is out of range", ms)
	}
	return ms * int64(time.Millisecond), nil
}

// parseSince parses the Rootline "since" parameter: an RFC 3339 time, Unix
// nanoseconds, or a duration meaning that long before now.
func parseSince(s string, now time.Time) (int64, error) {
	if ns, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ns < 0 {
			return 0, badParam(paramSince, fmt.Errorf("%d is negative", ns))
		}
		return ns, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixNano(), nil
	}
	if d, err := parseLongDuration(s); err == nil {
		return now.Add(-d).UnixNano(), nil
	}
	return 0, badParam(paramSince, fmt.Errorf("%q is neither an RFC 3339 time, Unix nanoseconds nor a duration", s))
}
