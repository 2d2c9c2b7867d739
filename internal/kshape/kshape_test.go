package kshape

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

type goldenCase struct {
	Name       string      `json:"name"`
	Series     [][]float64 `json:"series"`
	K          int         `json:"k"`
	Init       []int       `json:"init"`
	Labels     []int       `json:"labels"`
	Centroids  [][]float64 `json:"centroids"`
	Inertia    *float64    `json:"inertia"`
	Empty      bool        `json:"emptyCluster"`
	Iterations int         `json:"iterations"`
	Dist       [][]float64 `json:"dist"`
	Pairwise   [][]float64 `json:"pairwise"`
	Silhouette *float64    `json:"silhouette"`
}

type golden struct {
	TSLearn string       `json:"tslearn"`
	KShape  []goldenCase `json:"kshape"`
	SBD     []struct {
		X     []float64 `json:"x"`
		Y     []float64 `json:"y"`
		SBD   float64   `json:"sbd"`
		Shift int       `json:"shift"`
	} `json:"sbd"`
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
	if len(g.KShape) == 0 || len(g.SBD) == 0 {
		t.Fatal("golden file has no cases")
	}
	return g
}

// samePartition reports whether a and b are equal up to a renaming of labels.
func samePartition(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	ab, ba := map[int]int{}, map[int]int{}
	for i := range a {
		if x, ok := ab[a[i]]; ok && x != b[i] {
			return false
		}
		if y, ok := ba[b[i]]; ok && y != a[i] {
			return false
		}
		ab[a[i]], ba[b[i]] = b[i], a[i]
	}
	return true
}

// TestGoldenTSLearn runs Fit from tslearn's initial centroids on the golden
// datasets and compares labels, inertia, iterations, centroids and
// distances with what tslearn's KShape computed (scripts/critmetrics-golden.sh).
func TestGoldenTSLearn(t *testing.T) {
	g := loadGolden(t)
	const tol = 1e-6
	for _, tc := range g.KShape {
		t.Run(tc.Name, func(t *testing.T) {
			init := make([][]float64, len(tc.Init))
			for j, i := range tc.Init {
				init[j] = tc.Series[i]
			}
			r, err := Fit(tc.Series, init, Options{})
			if tc.Empty {
				// tslearn raised EmptyClusterError and gave up this init.
				if !errors.Is(err, ErrEmptyCluster) {
					t.Fatalf("err = %v, want ErrEmptyCluster as tslearn", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Fit keeps the labels of tslearn's order (centroid j started
			// from init[j]), so labels must match exactly, not only up to
			// permutation.
			if !samePartition(r.Labels, tc.Labels) {
				t.Fatalf("labels %v, tslearn %v", r.Labels, tc.Labels)
			}
			if math.Abs(r.Inertia-*tc.Inertia) > tol {
				t.Errorf("inertia %.12g, tslearn %.12g", r.Inertia, *tc.Inertia)
			}
			if r.Iterations != tc.Iterations {
				t.Errorf("iterations %d, tslearn %d", r.Iterations, tc.Iterations)
			}
			for i := range tc.Dist {
				for j := range tc.Dist[i] {
					if math.Abs(r.Dist[i][j]-tc.Dist[i][j]) > tol {
						t.Fatalf("dist[%d][%d] = %.12g, tslearn %.12g", i, j, r.Dist[i][j], tc.Dist[i][j])
					}
				}
			}
			for j := range tc.Centroids {
				for s := range tc.Centroids[j] {
					if math.Abs(r.Centroids[j][s]-tc.Centroids[j][s]) > tol {
						t.Fatalf("centroid %d[%d] = %.12g, tslearn %.12g", j, s, r.Centroids[j][s], tc.Centroids[j][s])
					}
				}
			}
			d := DistanceMatrix(tc.Series)
			for i := range d {
				for j := range d[i] {
					if math.Abs(d[i][j]-tc.Pairwise[i][j]) > tol {
						t.Fatalf("pairwise[%d][%d] = %.12g, tslearn %.12g", i, j, d[i][j], tc.Pairwise[i][j])
					}
				}
			}
			if tc.Silhouette != nil {
				// First the golden file against itself: scikit-learn's score
				// of its own pairwise distances and labels. A file written
				// by another version of the script fails here, not below as
				// if the Go code were wrong.
				self, err := Silhouette(tc.Pairwise, tc.Labels)
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(self-*tc.Silhouette) > tol {
					t.Fatalf("golden file inconsistent: silhouette %.12g of its own pairwise distances and labels, %.12g recorded; regenerate it with scripts/critmetrics-golden.sh",
						self, *tc.Silhouette)
				}
				s, err := Silhouette(d, r.Labels)
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(s-*tc.Silhouette) > tol {
					t.Errorf("silhouette %.12g, scikit-learn %.12g", s, *tc.Silhouette)
				}
			}
		})
	}
}

func TestGoldenSBD(t *testing.T) {
	g := loadGolden(t)
	for i, tc := range g.SBD {
		d, s := SBD(tc.X, tc.Y)
		if math.Abs(d-tc.SBD) > 1e-9 || s != tc.Shift {
			t.Errorf("case %d (m=%d): SBD %.12g shift %d, numpy %.12g shift %d", i, len(tc.X), d, s, tc.SBD, tc.Shift)
		}
	}
}

// TestEquivalenceSBD compares the FFT path with the O(m²) reference on
// random series of many lengths (powers of two and not).
func TestEquivalenceSBD(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for m := 1; m <= 130; m++ {
		x, y := make([]float64, m), make([]float64, m)
		for i := range x {
			x[i], y[i] = rng.NormFloat64(), rng.NormFloat64()
		}
		c := NewCorrelator(m)
		got := c.CrossCorrelate(nil, x, y)
		want := crossCorrelateNaive(x, y)
		for w := range want {
			if math.Abs(got[w]-want[w]) > 1e-9 {
				t.Fatalf("m=%d lag %d: fft %g, naive %g", m, w-(m-1), got[w], want[w])
			}
		}
		d1, s1 := c.SBD(x, y)
		d2, s2 := sbdNaive(x, y)
		if math.Abs(d1-d2) > 1e-9 || s1 != s2 {
			t.Fatalf("m=%d: fft (%g, %d), naive (%g, %d)", m, d1, s1, d2, s2)
		}
	}
}

func TestSBDProperties(t *testing.T) {
	x := ZNormalize([]float64{0, 1, 3, 7, 3, 1, 0, 0, 0, 0})
	for _, tc := range []struct {
		name      string
		y         []float64
		wantDist  float64
		wantShift int
	}{
		{"itself", x, 0, 0},
		{"scaled and offset", scaleOffset(x, 5, 100), 0, 0},
		{"constant", make([]float64, len(x)), 1, -(len(x) - 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, s := SBD(x, ZNormalize(tc.y))
			if math.Abs(d-tc.wantDist) > 1e-12 || s != tc.wantShift {
				t.Errorf("SBD %g shift %d, want %g shift %d", d, s, tc.wantDist, tc.wantShift)
			}
		})
	}
	// A delayed copy is found at its delay.
	y := Shift(x, 3)
	// (The z-normalised pulse is not zero at its ends, so the part shifted
	// out costs a little.)
	if d, s := SBD(y, x); s != 3 || d > 0.1 {
		t.Errorf("delayed by 3: SBD %g shift %d", d, s)
	}
}

func scaleOffset(x []float64, a, b float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = a*v + b
	}
	return out
}

// TestEquivalenceShape compares ExtractShape's eigenvector with power
// iteration on the same matrix, the naive reference.
func TestEquivalenceShape(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	m := 24
	base := make([]float64, m)
	for i := range base {
		base[i] = math.Sin(float64(i) / 3)
	}
	var members [][]float64
	for range 7 {
		y := make([]float64, m)
		for i := range y {
			y[i] = base[i] + 0.2*rng.NormFloat64()
		}
		members = append(members, ZNormalize(y))
	}
	ref := ZNormalize(base)
	got := ZNormalize(ExtractShape(members, ref))
	want := ZNormalize(shapePowerIteration(members, ref))
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-6 {
			t.Fatalf("point %d: eigen %g, power iteration %g", i, got[i], want[i])
		}
	}
	if d, _ := SBD(got, ref); d > 0.05 {
		t.Errorf("the centroid of noisy sines is %g from the sine", d)
	}
}

// TestTopEigenvectorGram: the eigenvector from the Gram matrix equals, up to
// sign, the one of the m×m matrix, for fewer and for more members than
// points.
func TestTopEigenvectorGram(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 3, 14, 40} {
		m := 30
		c := make([][]float64, n)
		for i := range c {
			c[i] = make([]float64, m)
			for j := range c[i] {
				c[i][j] = math.Sin(float64(j)/4) + 0.5*rng.NormFloat64()
			}
		}
		got := topEigenvector(c, m)
		sym := mat.NewSymDense(m, nil)
		for _, x := range c {
			sym.SymRankOne(sym, 1, mat.NewVecDense(m, x))
		}
		var eig mat.EigenSym
		eig.Factorize(sym, true)
		var vecs mat.Dense
		eig.VectorsTo(&vecs)
		want := mat.Col(nil, m-1, &vecs) // ascending eigenvalues
		if floats.Dot(got, want) < 0 {
			floats.Scale(-1, want)
		}
		for i := range got {
			if math.Abs(got[i]-want[i]) > 1e-9 {
				t.Fatalf("n=%d point %d: %g, want %g", n, i, got[i], want[i])
			}
		}
	}
}

// shapePowerIteration is the O(iterations·m²) reference of ExtractShape: the
// top eigenvector of QᵀSQ by power iteration (the matrix is positive
// semi-definite, so the dominant eigenvalue is the largest).
func shapePowerIteration(members [][]float64, ref []float64) []float64 {
	m := len(ref)
	M := mat.NewDense(m, m, nil)
	for _, x := range members {
		_, s := sbdNaive(ref, x)
		a := Shift(x, s)
		var mean float64
		for _, v := range a {
			mean += v
		}
		mean /= float64(m)
		for i := range m {
			for j := range m {
				M.Set(i, j, M.At(i, j)+(a[i]-mean)*(a[j]-mean))
			}
		}
	}
	v := mat.NewVecDense(m, nil)
	for i := range m {
		v.SetVec(i, 1+float64(i)/float64(m))
	}
	for range 5000 {
		v.MulVec(M, v)
		v.ScaleVec(1/mat.Norm(v, 2), v)
	}
	mu := v.RawVector().Data
	var plus, minus float64
	for _, x := range members {
		_, s := sbdNaive(ref, x)
		a := Shift(x, s)
		var dp, dm float64
		for i := range a {
			dp += (a[i] - mu[i]) * (a[i] - mu[i])
			dm += (a[i] + mu[i]) * (a[i] + mu[i])
		}
		plus += math.Sqrt(dp)
		minus += math.Sqrt(dm)
	}
	if minus < plus {
		for i := range mu {
			mu[i] = -mu[i]
		}
	}
	return mu
}

// TestClusterThreeShapes: ten starts recover three shifted, scaled, noisy
// shape families exactly, where single starts sometimes do not.
func TestClusterThreeShapes(t *testing.T) {
	g := loadGolden(t)
	tc := g.KShape[0] // three-shapes: 6 sines, 6 spikes, 6 ramps
	truth := []int{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}
	for seed := range uint64(5) {
		r, err := Cluster(tc.Series, 3, ClusterOptions{Starts: 10, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if !samePartition(r.Labels, truth) {
			t.Errorf("seed %d: labels %v", seed, r.Labels)
		}
	}
	best, choices, err := ChooseK(tc.Series, 6, ClusterOptions{Starts: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !samePartition(best.Labels, truth) {
		t.Errorf("ChooseK picked %d clusters %v (choices %+v)", len(best.Centroids), best.Labels, choices)
	}
}

// TestChooseKOneShape: series of one shape (copies of a spike,
// as metrics that all count one burst of a short window) leave every k ≥ 2
// with an empty cluster; the choice is then one cluster of all of them.
func TestChooseKOneShape(t *testing.T) {
	spike := func(at int) []float64 {
		s := make([]float64, 9)
		s[at] = 1
		return ZNormalize(s)
	}
	x := [][]float64{spike(7), spike(7), spike(7), spike(7)}
	r, choices, err := ChooseK(x, 10, ClusterOptions{Starts: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Centroids) != 1 || len(choices) != 0 || !slices.Equal(r.Labels, []int{0, 0, 0, 0}) {
		t.Errorf("got %d clusters %v, choices %+v; want one cluster of all four", len(r.Centroids), r.Labels, choices)
	}
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    [][]float64
		k    int
	}{
		{"no series", nil, 1},
		{"ragged", [][]float64{{1, 2}, {1}}, 1},
		{"nan", [][]float64{{1, math.NaN()}, {1, 2}}, 1},
		{"k too big", [][]float64{{1, 2}}, 2},
		{"k zero", [][]float64{{1, 2}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Cluster(tc.x, tc.k, ClusterOptions{}); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

func BenchmarkCluster(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([][]float64, 14)
	for i := range x {
		x[i] = make([]float64, 240)
		for j := range x[i] {
			x[i][j] = math.Sin(float64(j)/float64(5+i%3)) + 0.3*rng.NormFloat64()
		}
		x[i] = ZNormalize(x[i])
	}
	for b.Loop() {
		if _, err := Cluster(x, 3, ClusterOptions{Starts: 10}); err != nil {
			b.Fatal(err)
		}
	}
}
