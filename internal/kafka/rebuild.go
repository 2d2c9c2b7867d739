package kafka

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/pipeline"
)

const (
	// rebuildChunk is how many records a rebuild reads at a time, walking
	// back from the committed offset.
	rebuildChunk = 2000
	// rebuildTime bounds one partition's rebuild, which runs while the
	// group waits (inside the rebalance).
	rebuildTime = 30 * time.Second
)

// obs is one observation of a key: a span's duration and end.
type obs struct{ d, at int64 }

// rebuild fills det with the windows the previous owner of partition p had
// when it committed offset end: for each key, its last Window durations
// before end, in order. A window holds only the last W durations of its key,
// so reading back from end until every key seen has W of them gives the
// same windows as having consumed the partition from its start. It reads
// back at most RebuildRecords records, RebuildAge of record time and
// rebuildTime of wall time; keys last seen further back start empty.
func (d *Detector) rebuild(ctx context.Context, p int32, low, end int64, det *anomaly.Median) (int64, int, error) {
	if end <= low {
		return 0, 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, rebuildTime)
	defer cancel()
	w := d.detCfg.Window
	oldest := time.Now().Add(-d.cfg.RebuildAge)
	// chunks[key] are that key's observations per chunk, newest chunk first.
	chunks := map[string][][]obs{}
	counts := map[string]int{}
	var read int64
	hi := end
	for hi > low && read < d.cfg.RebuildRecords {
		lo := max(low, hi-rebuildChunk, end-d.cfg.RebuildRecords)
		recs, err := d.readRange(ctx, p, lo, hi)
		if err != nil {
			return read, fill(det, chunks, w), err
		}
		read += hi - lo
		hi = lo
		tooOld := false
		per := map[string][]obs{}
		for _, r := range recs {
			if r.Timestamp.Before(oldest) {
				tooOld = true
				continue
			}
			spans, err := model.DecodeSpans(r.Value)
			if err != nil {
				continue // counted when it was consumed
			}
			for _, s := range spans {
				k := pipeline.KeyOf(d.keyBy, s)
				per[k] = append(per[k], obs{s.Duration, s.End()})
			}
		}
		for k, o := range per {
			chunks[k] = append(chunks[k], o)
			counts[k] += len(o)
		}
		if tooOld {
			break
		}
		full := true
		for _, n := range counts {
			full = full && n >= w
		}
		if full && len(counts) > 0 {
			break
		}
	}
	return read, fill(det, chunks, w), nil
}

// fill observes each key's last w observations, oldest first.
func fill(det *anomaly.Median, chunks map[string][][]obs, w int) int {
	for k, cs := range chunks {
		var all []obs
		for _, c := range slices.Backward(cs) {
			all = append(all, c...)
		}
		if len(all) > w {
			all = all[len(all)-w:]
		}
		for _, o := range all {
			det.ObserveAt(k, o.d, o.at)
		}
	}
	return len(chunks)
}

// readRange returns the records of partition p with offsets in [lo, hi).
func (d *Detector) readRange(ctx context.Context, p int32, lo, hi int64) ([]*kgo.Record, error) {
	opts, err := d.optsFn()
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{d.cfg.Topic: {p: kgo.NewOffset().At(lo)}}),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	for {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("read partition %d [%d, %d): %w", p, lo, hi, err)
		}
		done := false
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Offset >= hi {
				done = true
				return
			}
			out = append(out, r)
			done = done || r.Offset >= hi-1
		})
		if done {
			return out, nil
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return out, fmt.Errorf("read partition %d: %w", p, ferr)
		}
	}
}
