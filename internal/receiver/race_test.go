//go:build race

package receiver

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = true
