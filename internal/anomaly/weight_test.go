package anomaly

import (
	"testing"
)

func TestThreshold(t *testing.T) {
	for _, tc := range []struct {
		p     float64
		th    string
		count int
	}{
		{1, "0", 1},
		{0.5, "8", 2},
		{0.25, "c", 4},
		{0.1, "e6666666666666", 10},
		{0.01, "fd70a3d70a3d71", 100},
	} {
		th := ThresholdFor(tc.p)
		if got := FormatThreshold(th); got != tc.th {
			t.Errorf("FormatThreshold(ThresholdFor(%g)) = %q, want %q", tc.p, got, tc.th)
		}
		back, ok := ParseThreshold(tc.th)
		if !ok || back != th {
			t.Errorf("ParseThreshold(%q) = %x, %v; want %x", tc.th, back, ok, th)
		}
		if c := AdjustedCount(th); c != tc.count {
			t.Errorf("AdjustedCount(%q) = %d, want %d", tc.th, c, tc.count)
		}
	}
	for _, bad := range []string{"", "123456789012345", "x", "-1", "+1"} {
		if _, ok := ParseThreshold(bad); ok {
			t.Errorf("ParseThreshold(%q) accepted", bad)
		}
	}
	th := ThresholdFor(0.5)
	if !KeepTrace([]byte{0x80, 0, 0, 0, 0, 0, 0}, th) || KeepTrace([]byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, th) {
		t.Fatal("KeepTrace at p=0.5 does not split at 0x80…")
	}
}

// A sample that keeps every slow duration and a tenth of the normal ones,
// each normal one weighted 10, gives the median of the whole population;
// unweighted, the slow ones pull it up.
func TestWeightedBaseline(t *testing.T) {
	cfg := Config{Window: 1000, Threshold: 3, MinFill: 10, MaxKeys: 10}
	for _, mk := range []func() Detector{
		func() Detector { d, _ := NewMedian(cfg, nil); return d },
		func() Detector { d, _ := NewNaive(cfg, nil); return d },
	} {
		weighted, plain := mk(), mk()
		// 900 normal durations 100..999 (one in ten kept), 100 slow ones
		// of 5000 (all kept): the population's median is ~555.
		for i := range 1000 {
			d, w := int64(100+i%900), 10
			if i >= 900 {
				d, w = 5000, 1
			} else if i%10 != 0 {
				continue
			}
			ObserveWeighted(weighted, "k", d, 0, w)
			plain.ObserveAt("k", d, 0)
		}
		ws, _ := weighted.State("k")
		ps, _ := plain.State("k")
		if ws.Baseline < 450 || ws.Baseline > 650 {
			t.Errorf("%T weighted baseline %d, want the population's ~555", weighted, ws.Baseline)
		}
		if ps.Baseline < 5000 {
			t.Errorf("%T unweighted baseline %d: expected the slow ones (the majority of the sample) to dominate", plain, ps.Baseline)
		}
		if ws.Observed != 190 {
			t.Errorf("%T observed %d, want the 190 spans", weighted, ws.Observed)
		}
	}
}
