//go:build !linux

package demo

// ShareDatapath does nothing off Linux (rootline run is Linux-only).
func ShareDatapath() error { return nil }
