//go:build !linux

package agent

import (
	"errors"
	"net"
)

// peerUID: SO_PEERCRED is Linux's; elsewhere a socket caller is
// unidentified and needs the token.
func peerUID(*net.UnixConn) (uint32, error) {
	return 0, errors.New("the caller's uid cannot be read on this OS")
}
