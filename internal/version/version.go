// Package version carries the build's version, set with -ldflags -X.
package version

// Version is the release version, or "dev".
var Version = "dev"
