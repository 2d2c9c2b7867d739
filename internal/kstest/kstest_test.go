package kstest

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

type golden struct {
	Scipy string `json:"scipy"`
	KS    []struct {
		Kind string    `json:"kind"`
		D    float64   `json:"d"`
		P    float64   `json:"p"`
		X    []float64 `json:"x"`
		Y    []float64 `json:"y"`
		C1   []uint64  `json:"c1"`
		C2   []uint64  `json:"c2"`
	} `json:"ks_2samp"`
	SF []struct {
		N  int     `json:"n"`
		X  float64 `json:"x"`
		SF float64 `json:"sf"`
	} `json:"kstwo_sf"`
	Smirnov []struct {
		N  int     `json:"n"`
		X  float64 `json:"x"`
		SF float64 `json:"sf"`
	} `json:"smirnov"`
}

func loadGolden(t *testing.T) golden {
	t.Helper()
	b, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.KS) == 0 || len(g.SF) == 0 || len(g.Smirnov) == 0 {
		t.Fatal("golden file has no cases")
	}
	return g
}

// TestGoldenScipy compares D and the p-value with scipy.stats.ks_2samp
// (method "auto"): within 1e-9 where scipy is exact, 1e-6 where asymptotic.
func TestGoldenScipy(t *testing.T) {
	g := loadGolden(t)
	modes := map[Method]int{}
	for i, tc := range g.KS {
		var r Result
		var err error
		if tc.Kind == "samples" {
			r, err = TwoSample(tc.X, tc.Y)
		} else {
			r, err = Binned(tc.C1, tc.C2)
		}
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		modes[r.Method]++
		tol := 1e-9
		if r.Method == Asymptotic {
			tol = 1e-6
		}
		if math.Abs(r.D-tc.D) > 1e-12 || math.Abs(r.P-tc.P) > tol {
			t.Errorf("case %d (%s, n1=%d n2=%d, %s): D %.15g p %.15g; scipy D %.15g p %.15g (Δp %.3g)",
				i, tc.Kind, r.N1, r.N2, r.Method, r.D, r.P, tc.D, tc.P, r.P-tc.P)
		}
	}
	if modes[Exact] == 0 || modes[Asymptotic] == 0 {
		t.Errorf("golden cases cover modes %v: want both", modes)
	}
}

func TestGoldenKolmogorov(t *testing.T) {
	g := loadGolden(t)
	for _, tc := range g.SF {
		got := KolmogorovSF(tc.N, tc.X)
		if math.Abs(got-tc.SF) > 1e-9 {
			t.Errorf("kstwo.sf(%g, %d) = %.15g, scipy %.15g (Δ %.3g)", tc.X, tc.N, got, tc.SF, got-tc.SF)
		}
	}
	for _, tc := range g.Smirnov {
		got := SmirnovSF(tc.N, tc.X)
		if math.Abs(got-tc.SF) > 1e-9*max(1, tc.SF) {
			t.Errorf("smirnov(%d, %g) = %.15g, scipy %.15g (Δ %.3g)", tc.N, tc.X, got, tc.SF, got-tc.SF)
		}
	}
}

// TestEquivalenceBinned: Binned on counts equals TwoSample on the expanded
// samples (the naive reference).
func TestEquivalenceBinned(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 50 {
		bins := 2 + rng.IntN(20)
		c1, c2 := make([]uint64, bins), make([]uint64, bins)
		var x, y []float64
		for b := range bins {
			c1[b], c2[b] = uint64(rng.IntN(40)), uint64(rng.IntN(40))
			for range c1[b] {
				x = append(x, float64(b))
			}
			for range c2[b] {
				y = append(y, float64(b))
			}
		}
		if len(x) == 0 || len(y) == 0 {
			continue
		}
		a, _ := Binned(c1, c2)
		b, _ := TwoSample(x, y)
		if a != b {
			t.Fatalf("binned %+v, expanded %+v", a, b)
		}
	}
}

// TestExactAgainstEnumeration checks the exact p-value on tiny samples
// against counting every assignment of the pooled ranks.
func TestExactAgainstEnumeration(t *testing.T) {
	for _, tc := range []struct{ n1, n2 int }{{2, 3}, {3, 3}, {4, 6}, {5, 5}, {3, 8}} {
		n := tc.n1 + tc.n2
		var ds []float64
		for mask := 0; mask < 1<<n; mask++ {
			if popcount(mask) != tc.n1 {
				continue
			}
			var x, y []float64
			for i := range n {
				if mask&(1<<i) != 0 {
					x = append(x, float64(i))
				} else {
					y = append(y, float64(i))
				}
			}
			ds = append(ds, statistic(x, y))
		}
		for _, d := range ds {
			var ge int
			for _, e := range ds {
				if e >= d-1e-12 {
					ge++
				}
			}
			want := float64(ge) / float64(len(ds))
			// (ok may be false: a p-value a rounding error above 1 sends
			// scipy, and this package, to the asymptotic mode.)
			_, p, _ := exact(uint64(tc.n1), uint64(tc.n2), d)
			if math.Abs(p-want) > 1e-12 {
				t.Fatalf("n1=%d n2=%d D=%g: p %g, enumeration %g", tc.n1, tc.n2, d, p, want)
			}
		}
	}
}

func popcount(x int) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

func TestBadInput(t *testing.T) {
	if _, err := TwoSample(nil, []float64{1}); err == nil {
		t.Error("empty sample accepted")
	}
	if _, err := TwoSample([]float64{math.NaN()}, []float64{1}); err == nil {
		t.Error("NaN accepted")
	}
	if _, err := Binned([]uint64{1, 2}, []uint64{1}); err == nil {
		t.Error("bins of different lengths accepted")
	}
	if _, err := Binned([]uint64{0, 0}, []uint64{1, 1}); err == nil {
		t.Error("empty histogram accepted")
	}
}
