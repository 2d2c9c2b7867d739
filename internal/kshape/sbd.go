package kshape

import (
	"math"
	"math/bits"

	"gonum.org/v1/gonum/dsp/fourier"
)

// ZNormalize returns (x − mean) / std with the population standard deviation
// (as tslearn's TimeSeriesScalerMeanVariance and scipy.stats.zscore do). A
// constant series has no shape: it becomes all zeros, and SBD then puts it at
// distance 1 from everything.
func ZNormalize(x []float64) []float64 {
	out := make([]float64, len(x))
	if len(x) == 0 {
		return out
	}
	var mean float64
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	var ss float64
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	std := math.Sqrt(ss / float64(len(x)))
	if std == 0 {
		return out
	}
	for i, v := range x {
		out[i] = (v - mean) / std
	}
	return out
}

// norm is the Euclidean norm.
func norm(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s)
}

// fftLen is 2^⌈log2(2m−1)⌉: long enough that the zero-padded circular
// cross-correlation equals the linear one at every one of the 2m−1 lags.
func fftLen(m int) int {
	if m <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(2*m-2))
}

// Correlator computes the cross-correlation of series of one length m with
// FFTs of length 2^⌈log2(2m−1)⌉, in O(m log m). It keeps work buffers: a
// Correlator MUST NOT be used by several goroutines at once.
type Correlator struct {
	m    int
	fft  *fourier.FFT
	pad  []float64
	fx   []complex128
	fy   []complex128
	prod []complex128
	seq  []float64
}

// NewCorrelator returns a Correlator for series of length m (m ≥ 1).
func NewCorrelator(m int) *Correlator {
	n := fftLen(m)
	return &Correlator{m: m, fft: fourier.NewFFT(n), pad: make([]float64, n),
		fx: make([]complex128, n/2+1), fy: make([]complex128, n/2+1), prod: make([]complex128, n/2+1), seq: make([]float64, n)}
}

// Spectrum returns the transform of x zero-padded to the FFT length, for
// CrossCorrelateSpectra (a series compared with many others is transformed
// once).
func (c *Correlator) Spectrum(x []float64) []complex128 {
	if len(x) != c.m {
		panic("kshape: series length differs from the correlator's")
	}
	copy(c.pad, x)
	clear(c.pad[c.m:])
	return c.fft.Coefficients(nil, c.pad)
}

// CrossCorrelate writes into dst (length 2m−1, allocated when nil) the
// cross-correlation cc[w] = Σ_n x[n+s]·y[n] at lag s = w−(m−1), the layout of
// numpy.correlate(x, y, "full").
func (c *Correlator) CrossCorrelate(dst, x, y []float64) []float64 {
	copy(c.pad, x)
	clear(c.pad[c.m:])
	c.fft.Coefficients(c.fx, c.pad)
	copy(c.pad, y)
	clear(c.pad[c.m:])
	c.fft.Coefficients(c.fy, c.pad)
	return c.CrossCorrelateSpectra(dst, c.fx, c.fy)
}

// CrossCorrelateSpectra is CrossCorrelate on spectra from Spectrum.
func (c *Correlator) CrossCorrelateSpectra(dst []float64, fx, fy []complex128) []float64 {
	m, n := c.m, len(c.pad)
	if dst == nil {
		dst = make([]float64, 2*m-1)
	}
	for i := range fx {
		c.prod[i] = fx[i] * complex(real(fy[i]), -imag(fy[i]))
	}
	c.fft.Sequence(c.seq, c.prod)
	// Sequence is unnormalised: it multiplies by n. Negative lags wrap to
	// the end of the circular result.
	inv := 1 / float64(n)
	for w := range 2*m - 1 {
		s := w - (m - 1)
		if s < 0 {
			s += n
		}
		dst[w] = c.seq[s] * inv
	}
	return dst
}

// NCC is the normalised cross-correlation NCC_c(x, y) = cc / (‖x‖·‖y‖) at
// every lag (CrossCorrelate's layout). When ‖x‖·‖y‖ < 1e-9 (a constant,
// z-normalised series) it is 0 at every lag, as in tslearn.
func (c *Correlator) NCC(dst, x, y []float64) []float64 {
	dst = c.CrossCorrelate(dst, x, y)
	scaleNCC(dst, norm(x)*norm(y))
	return dst
}

func scaleNCC(cc []float64, denom float64) {
	if denom < 1e-9 {
		clear(cc)
		return
	}
	for i := range cc {
		cc[i] /= denom
	}
}

// SBD is the shape-based distance 1 − max_w NCC_c(x, y)_w, in [0, 2], and the
// shift s (in −(m−1)…m−1) of y that attains it: y moved s steps later
// (Shift(y, s)) is best aligned with x. The first maximum wins ties, as
// numpy.argmax does.
func (c *Correlator) SBD(x, y []float64) (dist float64, shift int) {
	cc := c.NCC(nil, x, y)
	w := argmax(cc)
	return 1 - cc[w], w - (c.m - 1)
}

func argmax(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// Shift returns y moved s steps later (s > 0) or earlier (s < 0), zero-padded
// at the end it leaves (not circular).
func Shift(y []float64, s int) []float64 {
	m := len(y)
	out := make([]float64, m)
	switch {
	case s >= m || -s >= m:
	case s > 0:
		copy(out[s:], y[:m-s])
	case s < 0:
		copy(out[:m+s], y[-s:])
	default:
		copy(out, y)
	}
	return out
}

// SBD is the shape-based distance of two series of equal length, and the
// shift of y that aligns it with x (see Correlator.SBD).
func SBD(x, y []float64) (dist float64, shift int) {
	if len(x) != len(y) {
		panic("kshape: series of different lengths")
	}
	if len(x) == 0 {
		return 1, 0
	}
	return NewCorrelator(len(x)).SBD(x, y)
}

// crossCorrelateNaive is the O(m²) reference of CrossCorrelate.
func crossCorrelateNaive(x, y []float64) []float64 {
	m := len(x)
	out := make([]float64, 2*m-1)
	for w := range out {
		s := w - (m - 1)
		var sum float64
		for n := range m {
			if j := n + s; j >= 0 && j < m {
				sum += x[j] * y[n]
			}
		}
		out[w] = sum
	}
	return out
}

// sbdNaive is the O(m²) reference of SBD.
func sbdNaive(x, y []float64) (float64, int) {
	cc := crossCorrelateNaive(x, y)
	scaleNCC(cc, norm(x)*norm(y))
	w := argmax(cc)
	return 1 - cc[w], w - (len(x) - 1)
}
