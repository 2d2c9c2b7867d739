//go:build !linux

package demo

// ShareDatapath does nothing off Linux (rootline run is Linux-only).
func ShareDatapath() error { return nil }

// SweepDatapaths does nothing off Linux.
func SweepDatapaths() ([]string, error) { return nil, nil }
