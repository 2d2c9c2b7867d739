// Package kshape clusters time series by shape: k-Shape (Paparrizos and
// Gravano, "k-Shape: Efficient and Accurate Clustering of Time Series",
// SIGMOD 2015), as tslearn's KShape computes it.
//
// The distance is SBD, 1 − the maximum over all 2m−1 lags of the normalised
// cross-correlation, computed with zero-padded FFTs of length
// 2^⌈log2(2m−1)⌉ in O(m log m); a centroid is the leading eigenvector of
// QᵀSQ over its members aligned to the previous centroid (shape
// extraction). One run alternates refinement and assignment until the
// inertia stops falling, from k distinct input series as the first
// centroids; Cluster keeps the best of several such starts, because a single
// start often ends in a poor local optimum. Inputs are expected
// z-normalised (ZNormalize): like tslearn's fit, nothing here normalises them.
//
// Cost per iteration: O(n·k·m·log m) for the distances, O(n·m²) to build the
// matrices and O(k·m³) for their eigendecompositions, so series of a few
// hundred points cluster in milliseconds; the analysis above resamples
// longer ones.
package kshape

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// Errors of Fit and Cluster.
var (
	// ErrEmptyCluster: an assignment left a cluster without members (tslearn
	// raises EmptyClusterError and tries another start).
	ErrEmptyCluster = errors.New("kshape: empty cluster")
	// ErrInput: the series or parameters are unusable.
	ErrInput = errors.New("kshape: bad input")
)

// Options of a k-Shape run. Zero values take tslearn's defaults.
type Options struct {
	// MaxIter bounds the refinement iterations of one start (default 100).
	MaxIter int
	// Tol stops a start when the inertia falls by less (default 1e-6).
	Tol float64
}

func (o Options) withDefaults() Options {
	if o.MaxIter <= 0 {
		o.MaxIter = 100
	}
	if o.Tol <= 0 {
		o.Tol = 1e-6
	}
	return o
}

// Result is one clustering.
type Result struct {
	// Labels[i] is the cluster of series i, in 0…k−1.
	Labels []int
	// Centroids are the clusters' shapes, z-normalised, of the series' length.
	Centroids [][]float64
	// Dist[i][j] is SBD(series i, centroid j) for the final centroids.
	Dist [][]float64
	// Inertia is the mean over series of the squared SBD to its centroid
	// (tslearn's inertia_).
	Inertia float64
	// Iterations is the number of refinement iterations run (tslearn's n_iter_).
	Iterations int
}

// model is the state of one run.
type model struct {
	x         [][]float64
	norms     []float64
	spectra   [][]complex128
	k, m      int
	corr      *Correlator
	centroids [][]float64
	cnorms    []float64
	labels    []int
	dist      [][]float64
	inertia   float64
}

func checkInput(x [][]float64, k int) (int, error) {
	if len(x) == 0 {
		return 0, fmt.Errorf("%w: no series", ErrInput)
	}
	m := len(x[0])
	if m == 0 {
		return 0, fmt.Errorf("%w: empty series", ErrInput)
	}
	for i, s := range x {
		if len(s) != m {
			return 0, fmt.Errorf("%w: series %d has %d points, series 0 has %d", ErrInput, i, len(s), m)
		}
		for _, v := range s {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return 0, fmt.Errorf("%w: series %d has a NaN or infinite value", ErrInput, i)
			}
		}
	}
	if k < 1 || k > len(x) {
		return 0, fmt.Errorf("%w: k = %d with %d series", ErrInput, k, len(x))
	}
	return m, nil
}

func newModel(x [][]float64, k, m int) *model {
	md := &model{x: x, k: k, m: m, corr: NewCorrelator(m), norms: make([]float64, len(x)), spectra: make([][]complex128, len(x))}
	for i, s := range x {
		md.norms[i] = norm(s)
		md.spectra[i] = md.corr.Spectrum(s)
	}
	return md
}

// Fit runs k-Shape once from the given initial centroids (k series of the
// inputs' length), as tslearn's KShape(init=centroids).fit(x) does: assign,
// then refine and reassign until the inertia falls by less than Tol or
// rises (then the previous centroids are kept).
func Fit(x [][]float64, init [][]float64, opts Options) (Result, error) {
	m, err := checkInput(x, len(init))
	if err != nil {
		return Result{}, err
	}
	for i, c := range init {
		if len(c) != m {
			return Result{}, fmt.Errorf("%w: initial centroid %d has %d points, the series %d", ErrInput, i, len(c), m)
		}
	}
	md := newModel(x, len(init), m)
	return md.run(init, opts.withDefaults())
}

func (md *model) run(init [][]float64, opts Options) (Result, error) {
	md.setCentroids(clone2(init))
	if err := md.assign(); err != nil {
		return Result{}, err
	}
	oldInertia := math.Inf(1)
	it := 0
	for it = range opts.MaxIter {
		old := clone2(md.centroids)
		md.setCentroids(md.refine())
		if err := md.assign(); err != nil {
			return Result{}, err
		}
		if math.Abs(oldInertia-md.inertia) < opts.Tol || oldInertia-md.inertia < 0 {
			md.setCentroids(old)
			if err := md.assign(); err != nil {
				return Result{}, err
			}
			break
		}
		oldInertia = md.inertia
	}
	return Result{Labels: md.labels, Centroids: md.centroids, Dist: md.dist, Inertia: md.inertia, Iterations: it + 1}, nil
}

func clone2(a [][]float64) [][]float64 {
	out := make([][]float64, len(a))
	for i, r := range a {
		out[i] = append([]float64(nil), r...)
	}
	return out
}

func (md *model) setCentroids(c [][]float64) {
	md.centroids = c
	md.cnorms = make([]float64, len(c))
	for j, s := range c {
		md.cnorms[j] = norm(s)
	}
}

// assign labels each series with its nearest centroid by SBD (the first on
// ties, as numpy's argmin) and computes the inertia.
func (md *model) assign() error {
	n := len(md.x)
	md.dist = make([][]float64, n)
	md.labels = make([]int, n)
	cc := make([]float64, 2*md.m-1)
	cspec := make([][]complex128, md.k)
	for j, c := range md.centroids {
		cspec[j] = md.corr.Spectrum(c)
	}
	counts := make([]int, md.k)
	var inertia float64
	for i := range md.x {
		md.dist[i] = make([]float64, md.k)
		for j := range md.centroids {
			md.corr.CrossCorrelateSpectra(cc, md.spectra[i], cspec[j])
			scaleNCC(cc, md.norms[i]*md.cnorms[j])
			md.dist[i][j] = 1 - cc[argmax(cc)]
		}
		best := 0
		for j, d := range md.dist[i] {
			if d < md.dist[i][best] {
				best = j
			}
		}
		md.labels[i] = best
		counts[best]++
		inertia += md.dist[i][best] * md.dist[i][best]
	}
	for j, c := range counts {
		if c == 0 {
			return fmt.Errorf("%w: cluster %d", ErrEmptyCluster, j)
		}
	}
	md.inertia = inertia / float64(n)
	return nil
}

// refine extracts each cluster's new shape and z-normalises it.
func (md *model) refine() [][]float64 {
	out := make([][]float64, md.k)
	for j := range md.k {
		var members [][]float64
		for i, l := range md.labels {
			if l == j {
				members = append(members, md.x[i])
			}
		}
		out[j] = ZNormalize(ExtractShape(members, md.centroids[j]))
	}
	return out
}

// ExtractShape is k-Shape's centroid of members given the previous centroid
// ref: each member aligned to ref by its SBD shift, S = Σ x′x′ᵀ,
// Q = I − 11ᵀ/m, M = QᵀSQ; the result is M's eigenvector of the largest
// eigenvalue, of the sign that is closer (summed Euclidean distance) to the
// aligned members. It is not normalised (callers z-normalise it). Against a
// zero ref every correlation is 0 and, as in tslearn, the first lag wins.
func ExtractShape(members [][]float64, ref []float64) []float64 {
	m := len(ref)
	corr := NewCorrelator(m)
	aligned := make([][]float64, len(members))
	cc := make([]float64, 2*m-1)
	for i, x := range members {
		corr.CrossCorrelate(cc, ref, x)
		aligned[i] = Shift(x, argmax(cc)-(m-1))
	}
	// M = QᵀSQ with Q = I − 11ᵀ/m is Σ cᵢcᵢᵀ = CᵀC for the aligned members
	// centred on their means (Q x is x minus its mean), the rows of C.
	cen := make([][]float64, len(aligned))
	for i, x := range aligned {
		var mean float64
		for _, v := range x {
			mean += v
		}
		mean /= float64(m)
		cen[i] = make([]float64, m)
		for t, v := range x {
			cen[i][t] = v - mean
		}
	}
	mu := topEigenvector(cen, m)
	var plus, minus float64
	for _, x := range aligned {
		var dp, dm float64
		for t := range m {
			dp += (x[t] - mu[t]) * (x[t] - mu[t])
			dm += (x[t] + mu[t]) * (x[t] + mu[t])
		}
		plus += math.Sqrt(dp)
		minus += math.Sqrt(dm)
	}
	if minus < plus {
		for t := range mu {
			mu[t] = -mu[t]
		}
	}
	return mu
}

// topEigenvector returns the unit eigenvector of CᵀC (C's rows are c, each
// of length m) of the largest eigenvalue. CᵀC is m×m but of rank at most
// n = len(c), and its eigenvectors of non-zero eigenvalues are Cᵀu/√λ for
// the eigenpairs (λ, u) of the n×n Gram matrix CCᵀ: the vector comes from
// an n×n eigendecomposition and one product, O(n²m + n³), rather than from
// the m×m one, O(m³), which took seconds per shape at a few hundred points.
// With as many members as points, or when every eigenvalue is zero (the
// members are flat), it decomposes CᵀC itself, as the reference implementation does, so that the arbitrary
// vector it gets is the same.
func topEigenvector(c [][]float64, m int) []float64 {
	n := len(c)
	var gram *mat.SymDense
	if n > 0 && n < m {
		gram = mat.NewSymDense(n, nil)
		for i := range n {
			for j := i; j < n; j++ {
				gram.SetSym(i, j, floats.Dot(c[i], c[j]))
			}
		}
	}
	var eig mat.EigenSym
	if n > 0 && n < m && eig.Factorize(gram, true) {
		vals := eig.Values(nil)
		top := lastMax(vals)
		if lambda := vals[top]; lambda > 1e-12*max(1, floats.Sum(vals)) {
			var vecs mat.Dense
			eig.VectorsTo(&vecs)
			mu := make([]float64, m)
			for i := range n {
				floats.AddScaled(mu, vecs.At(i, top), c[i])
			}
			floats.Scale(1/floats.Norm(mu, 2), mu)
			return mu
		}
	}
	sym := mat.NewSymDense(m, nil)
	for _, x := range c {
		sym.SymRankOne(sym, 1, mat.NewVecDense(m, x))
	}
	if !eig.Factorize(sym, true) {
		return make([]float64, m)
	}
	vals := eig.Values(nil)
	var vecs mat.Dense
	eig.VectorsTo(&vecs)
	return mat.Col(nil, lastMax(vals), &vecs)
}

// lastMax is the index of the largest value, the last among equals (as the
// reference implementation takes eigh's last column).
func lastMax(vals []float64) int {
	top := 0
	for i, v := range vals {
		if v >= vals[top] {
			top = i
		}
	}
	return top
}

// ClusterOptions configure Cluster.
type ClusterOptions struct {
	Options
	// Starts is the number of random starts (default 10); the one of least
	// inertia wins.
	Starts int
	// Seed makes the starts reproducible.
	Seed uint64
}

// Cluster runs k-Shape from Starts random starts (each from k distinct input
// series, tslearn's init="random") and returns the result of least inertia.
// Starts that end with an empty cluster are retried with new series, up to
// 10·Starts attempts in all.
func Cluster(x [][]float64, k int, opts ClusterOptions) (Result, error) {
	m, err := checkInput(x, k)
	if err != nil {
		return Result{}, err
	}
	if opts.Starts <= 0 {
		opts.Starts = 10
	}
	o := opts.Options.withDefaults()
	rng := rand.New(rand.NewPCG(opts.Seed, 0x6b5368617065))
	md := newModel(x, k, m)
	best := Result{Inertia: math.Inf(1)}
	done, lastErr := 0, error(nil)
	for attempt := 0; done < opts.Starts && attempt < 10*opts.Starts; attempt++ {
		perm := rng.Perm(len(x))[:k]
		init := make([][]float64, k)
		for j, i := range perm {
			init[j] = x[i]
		}
		r, err := md.run(init, o)
		if err != nil {
			lastErr = err
			continue
		}
		done++
		if r.Inertia < best.Inertia {
			best = r
		}
	}
	if done == 0 {
		return Result{}, fmt.Errorf("kshape: no start without an empty cluster in %d attempts: %w", 10*opts.Starts, lastErr)
	}
	return best, nil
}
