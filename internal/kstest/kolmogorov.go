package kstest

import (
	"math"

	"gonum.org/v1/gonum/mat"
)

// The one-sample two-sided Kolmogorov distribution P(D_n ≥ x), by the choice
// of methods of Simard and L'Ecuyer (2011) as scipy.stats.kstwo.sf makes it:
// Ruben–Gambino's closed forms at the ends, the Durbin matrix (Marsaglia,
// Tsang and Wang 2003) or Pomeranz's recursion for small n, twice the
// one-sided Smirnov tail (Birnbaum–Tingey) where the two one-sided events
// cannot both happen or their joint probability is negligible, and the
// Pelz–Good expansion for large n.

const (
	scaleExp = 128
	minLog   = -708.3964185322641 // log of the smallest normal float64
)

var (
	scaleUp   = math.Ldexp(1, scaleExp)
	scaleDown = math.Ldexp(1, -scaleExp)
)

// KolmogorovSF is P(D_n ≥ x) for the two-sided one-sample statistic of a
// sample of size n (scipy.stats.kstwo.sf(x, n)).
func KolmogorovSF(n int, x float64) float64 {
	if n <= 0 || math.IsNaN(x) {
		return math.NaN()
	}
	if x >= 1 {
		return 0
	}
	if x <= 0 {
		return 1
	}
	nf := float64(n)
	t := nf * x
	if t <= 1 {
		if t <= 0.5 {
			return 1
		}
		var cdf float64
		if n <= 140 {
			cdf = 1
			for i := 1; i <= n; i++ {
				cdf *= float64(i) * (1 / nf) * (2*t - 1)
			}
		} else {
			cdf = math.Exp(logFactorialOverPower(n) + nf*math.Log(2*t-1))
		}
		return clip(1 - cdf)
	}
	if t >= nf-1 {
		return clip(2 * math.Pow(1-x, nf))
	}
	if x >= 0.5 {
		return clip(2 * SmirnovSF(n, x))
	}
	nx2 := t * x
	if n <= 140 {
		switch {
		case nx2 <= 0.754693:
			return clip(1 - clip(durbinCDF(n, x)))
		case nx2 <= 4:
			return clip(1 - clip(pomeranzCDF(n, x)))
		}
		return clip(2 * SmirnovSF(n, x))
	}
	if nx2 >= 370 {
		return 0
	}
	if nx2 >= 2.2 {
		return clip(2 * SmirnovSF(n, x))
	}
	var cdf float64
	if n <= 100000 && nf*math.Pow(x, 1.5) <= 1.4 {
		cdf = clip(durbinCDF(n, x))
	} else {
		cdf = pelzGoodCDF(n, x)
	}
	return clip(1 - cdf)
}

// stirling are B_{2j}/(2j)/(2j−1) for j = 8…1 (Bernoulli numbers B).
var stirling = []float64{-2.955065359477124183e-2, 6.4102564102564102564e-3,
	-1.9175269175269175269e-3, 8.4175084175084175084e-4,
	-5.952380952380952381e-4, 7.9365079365079365079e-4,
	-2.7777777777777777778e-3, 8.3333333333333333333e-2}

// logFactorialOverPower is log(n!/nⁿ) by Stirling's series with n·log n
// taken out first (no cancellation).
func logFactorialOverPower(n int) float64 {
	nf := float64(n)
	rn := 1 / nf
	var poly float64
	for _, c := range stirling {
		poly = poly*(rn/nf) + c
	}
	return math.Log(nf)/2 - nf + math.Log(2*math.Pi)/2 + rn*poly
}

// durbinCDF is P(D_n ≤ d) by Durbin's matrix: with d = (k − h)/n, the k-th
// diagonal element of Hⁿ·n!/nⁿ for an m×m matrix H, m = 2k − 1, the power
// taken by squaring with scaling by 2^±128 to stay in range.
func durbinCDF(n int, d float64) float64 {
	if d >= 1 {
		return 1
	}
	nd := float64(n) * d
	if nd <= 0.5 {
		return 0
	}
	k := int(math.Ceil(nd))
	h := float64(k) - nd
	m := 2*k - 1
	v := make([]float64, m)
	w := make([]float64, m)
	fac := 1.0
	for j := 1; j <= m; j++ {
		w[j-1] = fac
		fac /= float64(j)
		v[j-1] = (1 - math.Pow(h, float64(j))) * fac
	}
	tt := math.Pow(max(2*h-1, 0), float64(m)) - 2*math.Pow(h, float64(m))
	v[m-1] = (1 + tt) * fac
	H := mat.NewDense(m, m, nil)
	for i := 1; i < m; i++ {
		for r := i - 1; r < m; r++ {
			H.Set(r, i, w[r-(i-1)])
		}
	}
	for r := range m {
		H.Set(r, 0, v[r])
	}
	for c := range m {
		H.Set(m-1, c, v[m-1-c])
	}
	pow := mat.NewDense(m, m, nil)
	for i := range m {
		pow.Set(i, i, 1)
	}
	expnt, hexp := 0, 0
	var tmp mat.Dense
	for nn := n; nn > 0; nn /= 2 {
		if nn%2 == 1 {
			tmp.Mul(pow, H)
			pow.Copy(&tmp)
			expnt += hexp
		}
		tmp.Mul(H, H)
		H.Copy(&tmp)
		hexp *= 2
		if math.Abs(H.At(k-1, k-1)) > scaleUp {
			H.Scale(scaleDown, H)
			hexp += scaleExp
		}
	}
	p := pow.At(k-1, k-1)
	for i := 1; i <= n; i++ {
		p = float64(i) * p / float64(n)
		if math.Abs(p) < scaleDown {
			p *= scaleUp
			expnt -= scaleExp
		}
	}
	if expnt != 0 {
		p = math.Ldexp(p, expnt)
	}
	return p
}

// pomeranzBounds are the first and last column of row i in Pomeranz's
// recursion.
func pomeranzBounds(i, n, ll, ceilf, roundf int) (int, int) {
	var j1, j2 int
	if i == 0 {
		j1, j2 = -ll-ceilf-1, ll+ceilf-1
	} else {
		half, odd := (i+1)/2, (i+1)%2
		if odd == 0 {
			if half == n+1 {
				j1, j2 = n-ll-ceilf-1, n+ll+ceilf-1
			} else {
				j1, j2 = half-1-ll-roundf-1, half+ll-1+ceilf-1
			}
		} else {
			j1, j2 = half-1-ll-1, half+ll+roundf-1
		}
	}
	return max(j1+2, 0), min(j2, n)
}

// pomeranzCDF is P(D_n ≤ x) by Pomeranz's recursion: 2n+1 rows, each the
// convolution of the previous one with (almost) Poisson probabilities, n!
// times the last entry.
func pomeranzCDF(n int, x float64) float64 {
	t := float64(n) * x
	ll := int(math.Floor(t))
	f := t - float64(ll)
	g := min(f, 1-f)
	ceilf, roundf := 0, 0
	if f > 0 {
		ceilf = 1
	}
	if f > 0.5 {
		roundf = 1
	}
	np := 2 * (ll + 1)
	gp, g2p, g12p := make([]float64, np), make([]float64, np), make([]float64, np)
	gp[0], g2p[0], g12p[0] = 1, 1, 1
	nf := float64(n)
	for m := 1; m < np; m++ {
		gp[m] = gp[m-1] * (g / nf) / float64(m)
		g2p[m] = g2p[m-1] * (2 * g / nf) / float64(m)
		g12p[m] = g12p[m-1] * ((1 - 2*g) / nf) / float64(m)
	}
	v0, v1 := make([]float64, np), make([]float64, np)
	v1[0] = 1
	v0s, v1s := 0, 0
	expnt := 0
	j1, _ := pomeranzBounds(0, n, ll, ceilf, roundf)
	for i := 1; i < 2*n+2; i++ {
		k1 := j1
		v0, v1 = v1, v0
		v0s, v1s = v1s, v0s
		clear(v1)
		var j2 int
		j1, j2 = pomeranzBounds(i, n, ll, ceilf, roundf)
		pw := g12p
		switch {
		case i == 1 || i == 2*n+1:
			pw = gp
		case i%2 == 1:
			pw = g2p
		}
		ln2 := j2 - k1 + 1
		if ln2 <= 0 {
			continue
		}
		a := v0[k1-v0s : k1-v0s+ln2]
		start, cnt := j1-k1, j2-j1+1
		mx := 0.0
		for c := range cnt {
			// Entry start+c of the full convolution of a and pw[:ln2].
			idx := start + c
			var s float64
			for q := max(0, idx-ln2+1); q <= min(idx, ln2-1); q++ {
				s += a[q] * pw[idx-q]
			}
			v1[c] = s
			mx = max(mx, s)
		}
		if mx > 0 && mx < scaleDown {
			for c := range v1 {
				v1[c] *= scaleUp
			}
			expnt -= scaleExp
		}
		v1s = v0s + j1 - k1
	}
	ans := v1[n-v1s]
	for m := 1; m <= n; m++ {
		if math.Abs(ans) > scaleUp {
			ans *= scaleDown
			expnt += scaleExp
		}
		ans *= float64(m)
	}
	if expnt != 0 {
		ans = math.Ldexp(ans, expnt)
	}
	return ans
}

// pelzGoodCDF is the Pelz–Good approximation of P(D_n ≤ x): the
// Li-Chien/Korolyuk expansion K0 + K1/√n + K2/n + K3/n^1.5 in z = x√n, each
// term rewritten with Jacobi theta identities for small z.
func pelzGoodCDF(n int, x float64) float64 {
	if x <= 0 {
		return 0
	}
	if x >= 1 {
		return 1
	}
	z := math.Sqrt(float64(n)) * x
	z2, z3, z4, z6 := z*z, z*z*z, z*z*z*z, math.Pow(z, 6)
	pi2, pi4, pi6 := math.Pi*math.Pi, math.Pow(math.Pi, 4), math.Pow(math.Pi, 6)
	qlog := -pi2 / 8 / z2
	if qlog < -708 {
		return 0
	}
	q := math.Exp(qlog)
	k1a, k1b := -z2, pi2/4
	k2a := 6*z6 + 2*z4
	k2b := (2*z4 - 5*z2) * pi2 / 4
	k2c := pi4 * (1 - 2*z2) / 16
	k3d := pi6 * (5 - 30*z2) / 64
	k3c := pi4 * (-60*z2 + 212*z4) / 16
	k3b := pi2 * (135*z4 - 96*z6) / 4
	k3a := -30*z6 - 90*math.Pow(z, 8)
	var K [4]float64
	maxk := int(math.Ceil(16 * z / math.Pi))
	for k := maxk; k > 0; k-- {
		m := float64(2*k - 1)
		m2, m4, m6 := m*m, m*m*m*m, math.Pow(m, 6)
		qp := math.Pow(q, float64(8*k))
		c := [4]float64{1, k1a + k1b*m2, k2a + k2b*m2 + k2c*m4, k3a + k3b*m2 + k3c*m4 + k3d*m6}
		for i := range K {
			K[i] = K[i]*qp + c[i]
		}
	}
	sqrt2pi := math.Sqrt(2 * math.Pi)
	div := [4]float64{z, 6 * z4, 72 * math.Pow(z, 7), 6480 * math.Pow(z, 10)}
	for i := range K {
		K[i] = K[i] * q * sqrt2pi / div[i]
	}
	q = math.Exp(-pi2 / 2 / z2)
	sqrt3z := math.Sqrt(3) * z
	var k2extra, k3extra float64
	for k := maxk; k > 0; k-- {
		kf := float64(k)
		qk := math.Pow(q, kf*kf)
		k2extra += kf * kf * qk
		kpi := math.Pi * kf
		k3extra += (sqrt3z + kpi) * (sqrt3z - kpi) * kf * kf * qk
	}
	K[2] += k2extra * pi2 * sqrt2pi / (-36 * z3)
	K[3] += k3extra * pi2 * sqrt2pi / (216 * z6)
	var sum float64
	for i := range K {
		sum += K[i] / math.Pow(float64(n), float64(i)/2)
	}
	return sum
}

// smirnovMaxN is the size above which SmirnovSF uses its asymptotic form.
const smirnovMaxN = 1000000

// SmirnovSF is P(D⁺_n ≥ x), the one-sided one-sample Kolmogorov–Smirnov
// tail (scipy.special.smirnov): the Birnbaum–Tingey sum
// x·Σ_{j=0}^{⌊n(1−x)⌋} C(n, j)(1 − x − j/n)^{n−j}(x + j/n)^{j−1}, whose terms
// are all positive, summed in log space from the largest contributions
// until the rest cannot matter.
func SmirnovSF(n int, x float64) float64 {
	if n <= 0 || !(x >= 0 && x <= 1) {
		return math.NaN()
	}
	nf := float64(n)
	switch {
	case n == 1:
		return 1 - x
	case x == 0:
		return 1
	case x == 1:
		return 0
	}
	// ⌊n·x⌋ and its remainder from the exact product (n·x rounded plus the
	// rounding error, by a fused multiply-add): a product that rounds up to
	// an integer must not count as reaching it.
	nx := nf * x
	nxErr := math.FMA(nf, x, -nx)
	fl := math.Floor(nx)
	if fl == nx && nxErr < 0 {
		fl--
	}
	nxfl := int(fl)
	alpha := (nx - fl) + nxErr
	if alpha >= 1 {
		nxfl++
		alpha = 0
	}
	if nxfl == 0 || (nxfl == 1 && alpha == 0) {
		cdf := x * math.Pow(1+x, nf-1)
		return 1 - cdf
	}
	if -2*nf*x*x < minLog {
		return 0
	}
	if nxfl >= n-1 {
		return math.Pow(1-x, nf)
	}
	if n > smirnovMaxN {
		return math.Exp(-math.Pow(6*nx+1, 2) / 18 / nf)
	}
	last := n - nxfl - 1 // the last j with 1 − x − j/n > 0
	// Both the sum and log C(n, j), built by a million increments for large
	// n, are Kahan-compensated: uncompensated, log C drifts by ~1e-7.
	var sum, comp float64
	var logC, logCComp float64
	for j := 0; j <= last; j++ {
		a := float64(n-j)/nf - x
		b := x + float64(j)/nf
		var term float64
		if a > 0 {
			term = math.Exp(logC + float64(n-j)*math.Log(a) + float64(j-1)*math.Log(b))
		}
		y := term - comp
		s := sum + y
		comp = (s - sum) - y
		sum = s
		if term != 0 && 4*float64(last+1-j)*term < 2.220446049250313e-16*sum && j != last {
			break
		}
		if term == 0 && j > n/2 {
			break
		}
		inc := math.Log(float64(n-j)/float64(j+1)) - logCComp
		next := logC + inc
		logCComp = (next - logC) - inc
		logC = next
	}
	return clip(x * sum)
}
