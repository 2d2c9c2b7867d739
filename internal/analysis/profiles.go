package analysis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/rootline/rootline/internal/flame"
)

// Artifact kinds and sample types Profiles reads: the agent's eBPF CPU
// profiles, and the pprof conversions of its JFR recordings (beside each raw
// recording), whose "cpu" samples are Java's execution samples and whose
// "monitor_enter" samples are the time threads blocked entering a monitor.
const (
	kindCPU           = "cpu"
	kindJFR           = KindJFR
	sampleCPU         = "cpu"
	sampleMonitorWait = "monitor_enter"
	unitNanoseconds   = "nanoseconds"
)

// KindJFR is the artifact kind of the agent's JFR recordings (the raw
// recording and its pprof conversion).
const KindJFR = "jfr"

// maxProfiledSpans bounds the slow spans whose profiles are read.
const maxProfiledSpans = 20

// maxProfileBytes bounds one profile read (as the query API's flame graphs
// do): a larger artifact is an error, not a reason to exhaust memory.
const maxProfileBytes = 256 << 20

// Profiles explains slow spans from the profiles captured for them: for up
// to maxProfiledSpans of them (spread over the list), the samples their own
// threads took within each span, from an eBPF CPU profile or else a JFR
// recording's execution samples (which see Java code only), and the time
// they blocked entering a Java monitor (a JFR recording's monitor-enter
// events). Spans with no threads or no such profile are left out.
type Profiles struct {
	Reader ArtifactReader
}

// Explain implements Explainer.
func (p *Profiles) Explain(ctx context.Context, spans []SlowSpan) (Breakdown, error) {
	b := Breakdown{OnCPUSources: map[string]int{}}
	type profiled struct {
		s              *SlowSpan
		cpuArt, jfrArt string
	}
	var cands []profiled
	for i := range spans {
		s := &spans[i]
		if len(s.Threads) == 0 {
			continue
		}
		c := profiled{s: s}
		for _, art := range s.Artifacts {
			switch {
			case art.Kind == kindCPU && c.cpuArt == "":
				c.cpuArt = art.ID
			case art.Kind == kindJFR && isPprofMedia(art.MediaType) && c.jfrArt == "":
				c.jfrArt = art.ID
			}
		}
		if c.cpuArt != "" || c.jfrArt != "" {
			cands = append(cands, c)
		}
	}
	pr := profileReader{r: p.Reader, parsed: map[string]parsedProfile{}}
	var errs []error
	// Spans spread over the slowdown, not only its newest: a moment of it
	// (a capture, a pause) would otherwise stand for all of it.
	n := min(len(cands), maxProfiledSpans)
	for i := range n {
		c := cands[i*len(cands)/n]
		s, cpuArt, source := c.s, c.cpuArt, "eBPF CPU profiles"
		if cpuArt == "" {
			cpuArt, source = c.jfrArt, "JFR execution samples"
		}
		if root, ok, err := pr.spanSamples(ctx, cpuArt, sampleCPU, s); err != nil {
			errs = append(errs, err)
		} else if ok {
			b.OnCPUNs += root.Value
			b.OnCPUOfNs += s.Exclusive
			b.OnCPUSpans++
			b.OnCPUSources[source]++
			if c.cpuArt != "" {
				b.KernelOnCPUNs += root.Value
				k := kernelPartsOf(root, false, false)
				b.FileIONs += k.fileIO
				b.ReclaimNs += k.reclaim
				b.AnonFaultNs += k.anonFault
				if p, err := pr.profile(ctx, c.cpuArt); err == nil && jvmMapped(p) {
					b.JVMNs += root.Value
					b.JVMAnonFaultNs += k.anonFault
				}
			}
		}
		if c.jfrArt != "" {
			// Monitor enters only: JFR's park events also hold the thread
			// pool's idle waits, which may begin inside the span's window.
			if root, ok, err := pr.spanSamples(ctx, c.jfrArt, sampleMonitorWait, s); err != nil {
				errs = append(errs, err)
			} else if ok {
				b.LockNs += min(root.Value, s.Exclusive)
				b.LockOfNs += s.Exclusive
				b.LockSpans++
			}
		}
	}
	return b, errors.Join(errs...)
}

// parsedProfile is one artifact's profile, or why it could not be read.
type parsedProfile struct {
	p   *profile.Profile
	err error
}

// profileReader reads and parses each artifact once per Explain.
type profileReader struct {
	r      ArtifactReader
	parsed map[string]parsedProfile
}

func (pr *profileReader) profile(ctx context.Context, id string) (*profile.Profile, error) {
	if pp, ok := pr.parsed[id]; ok {
		return pp.p, pp.err
	}
	p, err := pr.read(ctx, id)
	pr.parsed[id] = parsedProfile{p, err}
	return p, err
}

func (pr *profileReader) read(ctx context.Context, id string) (*profile.Profile, error) {
	if pr.r == nil {
		return nil, fmt.Errorf("artifact %s: no artifact reader", id)
	}
	rc, err := pr.r.ArtifactContent(ctx, id)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxProfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", id, err)
	}
	if len(data) > maxProfileBytes {
		return nil, fmt.Errorf("artifact %s: larger than %d MiB, not read", id, maxProfileBytes>>20)
	}
	p, err := flame.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", id, err)
	}
	return p, nil
}

// spanSamples is the flame graph of the samples of type typ in artifact id
// that s's threads took during s, in nanoseconds (its root's value is their
// sum). ok is false when the profile does not measure typ in nanoseconds; a
// profile without typ at all (a JFR recording in which no thread waited
// long enough for a lock event) gives an empty graph.
func (pr *profileReader) spanSamples(ctx context.Context, id, typ string, s *SlowSpan) (root *flame.Node, ok bool, err error) {
	p, err := pr.profile(ctx, id)
	if err != nil {
		return nil, false, err
	}
	root, st, err := flame.FromProfile(p, flame.Filter{TIDs: s.Threads, Start: s.Start, End: s.End, Type: typ})
	if errors.Is(err, flame.ErrUnknownSampleType) {
		return &flame.Node{Name: "root"}, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("artifact %s: %w", id, err)
	}
	if st.Unit != unitNanoseconds {
		return nil, false, nil
	}
	return root, true, nil
}

// isPprofMedia recognises a pprof artifact by its media type.
func isPprofMedia(mediaType string) bool {
	return strings.Contains(mediaType, "protobuf")
}
