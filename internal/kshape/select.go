package kshape

import (
	"fmt"
	"math"
)

// DistanceMatrix returns SBD between every pair of series (symmetric, zero
// diagonal): the input of Silhouette.
func DistanceMatrix(x [][]float64) [][]float64 {
	n := len(x)
	d := make([][]float64, n)
	for i := range d {
		d[i] = make([]float64, n)
	}
	if n == 0 || len(x[0]) == 0 {
		return d
	}
	m := len(x[0])
	corr := NewCorrelator(m)
	spec := make([][]complex128, n)
	norms := make([]float64, n)
	for i, s := range x {
		spec[i] = corr.Spectrum(s)
		norms[i] = norm(s)
	}
	cc := make([]float64, 2*m-1)
	for i := range n {
		for j := i + 1; j < n; j++ {
			corr.CrossCorrelateSpectra(cc, spec[i], spec[j])
			scaleNCC(cc, norms[i]*norms[j])
			d[i][j] = 1 - cc[argmax(cc)]
			d[j][i] = d[i][j]
		}
	}
	return d
}

// Silhouette is the mean silhouette coefficient of labels over the
// precomputed distances d (as scikit-learn's silhouette_score with
// metric="precomputed"): for each series, a = its mean distance to the rest
// of its cluster, b = the least mean distance to another cluster, s = (b − a)
// / max(a, b), and s = 0 for a series alone in its cluster. It needs at
// least two clusters and fewer clusters than series.
func Silhouette(d [][]float64, labels []int) (float64, error) {
	n := len(labels)
	k := 0
	for _, l := range labels {
		k = max(k, l+1)
	}
	if k < 2 || k >= n {
		return 0, fmt.Errorf("%w: silhouette needs 2 ≤ clusters < series, have %d clusters of %d series", ErrInput, k, n)
	}
	size := make([]int, k)
	for _, l := range labels {
		size[l]++
	}
	var total float64
	sums := make([]float64, k)
	for i := range n {
		clear(sums)
		for j := range n {
			if j != i {
				sums[labels[j]] += d[i][j]
			}
		}
		own := labels[i]
		if size[own] == 1 {
			continue
		}
		a := sums[own] / float64(size[own]-1)
		b := math.Inf(1)
		for c := range k {
			if c != own && size[c] > 0 {
				b = min(b, sums[c]/float64(size[c]))
			}
		}
		if s := max(a, b); s > 0 {
			total += (b - a) / s
		}
	}
	return total / float64(n), nil
}

// Choice is one candidate number of clusters and its score.
type Choice struct {
	K          int     `json:"k"`
	Silhouette float64 `json:"silhouette"`
	Inertia    float64 `json:"inertia"`
}

// ChooseK clusters x for every k in 2…min(maxK, n−1) (Cluster with opts) and
// returns the result of the highest mean silhouette on SBD, ties to the
// smaller k, with every candidate's score. Silhouette rather than an elbow on
// inertia: inertia falls with every added cluster, so an elbow needs a
// judgement of where the fall flattens; the silhouette has a maximum, from
// the same distance the clustering minimises. With fewer than three series
// there is nothing to choose: every series is its own cluster. When no k ≥ 2
// keeps its clusters non-empty from any start, the series have one shape (at
// SBD's resolution: copies, or shifts of one spike) and the result is the
// single cluster of k = 1, with no choice scored.
func ChooseK(x [][]float64, maxK int, opts ClusterOptions) (Result, []Choice, error) {
	n := len(x)
	if n < 3 {
		if _, err := checkInput(x, n); err != nil {
			return Result{}, nil, err
		}
		r := Result{Labels: make([]int, n), Centroids: clone2(x), Dist: DistanceMatrix(x)}
		for i := range r.Labels {
			r.Labels[i] = i
		}
		return r, nil, nil
	}
	d := DistanceMatrix(x)
	best := Result{}
	bestScore := math.Inf(-1)
	var choices []Choice
	for k := 2; k <= min(maxK, n-1); k++ {
		r, err := Cluster(x, k, opts)
		if err != nil {
			continue // no start kept k clusters non-empty: k is not supported by the data
		}
		s, err := Silhouette(d, r.Labels)
		if err != nil {
			continue
		}
		choices = append(choices, Choice{K: k, Silhouette: s, Inertia: r.Inertia})
		if s > bestScore+1e-12 {
			best, bestScore = r, s
		}
	}
	if len(choices) == 0 {
		r, err := Cluster(x, 1, opts)
		if err != nil {
			return Result{}, nil, fmt.Errorf("kshape: no k in 1…%d gave non-empty clusters: %w", min(maxK, n-1), err)
		}
		return r, nil, nil
	}
	return best, choices, nil
}
