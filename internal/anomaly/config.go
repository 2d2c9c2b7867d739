package anomaly

import (
	"errors"
	"fmt"
	"math"
)

// Config sets a detector's window and sensitivity. The same Config gives the
// same verdicts from Median and Naive.
type Config struct {
	// Window is W, the number of most recent durations kept per key. A larger
	// window remembers older behaviour; each key costs about 20 bytes × W
	// once its window is full.
	Window int `yaml:"window"`
	// Threshold is the factor over the window's median above which a span is
	// anomalous. Raising it makes the detector less sensitive.
	Threshold float64 `yaml:"threshold"`
	// MinFill is how many durations a key's window must hold before the
	// detector gives verdicts, so that the first few spans of a new key are
	// not judged against a median of almost nothing.
	MinFill int `yaml:"min_fill"`
	// MaxKeys bounds the keys tracked at once, so that a high-cardinality key
	// (for example a span name holding an ID) cannot exhaust memory; beyond it
	// the least recently observed key is forgotten.
	MaxKeys int `yaml:"max_keys"`
}

// maxWindow bounds Window: the window stores slot indices as int32 (see
// window), and a window of millions of durations per key would be a
// configuration mistake rather than a wish.
const maxWindow = 1 << 24

// DefaultConfig returns the defaults. Window 500 and Threshold 3 are the values
// Protractor found to work well (the Protractor thesis, §5.2.3).
func DefaultConfig() Config {
	return Config{Window: 500, Threshold: 3, MinFill: 20, MaxKeys: 100_000}
}

// Validate reports every invalid field at once, joined, so that a bad config
// file is fixed in one round.
func (c Config) Validate() error {
	var errs []error
	if c.Window < 1 || c.Window > maxWindow {
		errs = append(errs, fmt.Errorf("anomaly window must be between 1 and %d, got %d", maxWindow, c.Window))
	}
	// Written as !(t > 0) so that NaN is rejected too; an infinite threshold
	// would silently disable detection, so it is rejected as well.
	if !(c.Threshold > 0) || math.IsInf(c.Threshold, 1) {
		errs = append(errs, fmt.Errorf("anomaly threshold must be a finite number > 0, got %v", c.Threshold))
	}
	if c.MinFill < 1 || c.MinFill > c.Window {
		errs = append(errs, fmt.Errorf("anomaly min_fill must be between 1 and window (%d), got %d", c.Window, c.MinFill))
	}
	if c.MaxKeys < 1 {
		errs = append(errs, fmt.Errorf("anomaly max_keys must be ≥ 1, got %d", c.MaxKeys))
	}
	return errors.Join(errs...)
}
