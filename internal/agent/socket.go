package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// errSocketInUse: another process listens on the agent's socket path.
var errSocketInUse = errors.New("another process listens on the socket (another agent?)")

// socketListener is the agent's unix socket. Close removes the socket
// file, when it is still the one this listener bound.
type socketListener struct {
	*net.UnixListener
	path string
	ino  uint64
}

// listenSocket binds the agent's unix socket at path with the given mode and
// group. The directory is created (0755) when missing; the socket is bound
// under a temporary name and renamed into place once its mode is set, so
// that it is never reachable with the umask's permissions. A stale socket
// (nobody listening) is replaced; a live one is an error.
func listenSocket(path string, mode os.FileMode, group string) (*socketListener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("agent socket: %w (choose another path with --socket, or none with --socket= and a token)", err)
	}
	if err := checkSocketDir(dir); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("agent socket %s: the path exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("agent socket %s: %w", path, errSocketInUse)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("agent socket %s: remove the stale socket: %w", path, err)
		}
	}
	gid := -1
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			return nil, fmt.Errorf("agent socket group: %w", err)
		}
		if gid, err = strconv.Atoi(g.Gid); err != nil {
			return nil, fmt.Errorf("agent socket group %s: gid %q", group, g.Gid)
		}
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d.tmp", filepath.Base(path), os.Getpid()))
	_ = os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	ln.SetUnlinkOnClose(false) // the file is renamed: Close removes it by its final name
	fail := func(err error) (*socketListener, error) {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("agent socket %s: %w", path, err)
	}
	if err := os.Chown(tmp, -1, gid); gid >= 0 && err != nil {
		return fail(err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	return &socketListener{UnixListener: ln, path: path, ino: fi.Sys().(*syscall.Stat_t).Ino}, nil
}

// checkSocketDir refuses a directory that another user could change: there
// they could replace the socket, and `rootline run` would register with
// them.
func checkSocketDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("agent socket: %s is not a directory", dir)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if uid := st.Uid; uid != 0 && int(uid) != os.Geteuid() {
		return fmt.Errorf("agent socket: %s belongs to uid %d, neither root nor this agent's user", dir, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("agent socket: %s is writable by other users (mode %#o): choose a directory only its owner can change", dir, fi.Mode().Perm())
	}
	return nil
}

// Close stops listening and removes the socket file if it is still ours.
func (l *socketListener) Close() error {
	err := l.UnixListener.Close()
	if fi, serr := os.Lstat(l.path); serr == nil && fi.Sys().(*syscall.Stat_t).Ino == l.ino {
		_ = os.Remove(l.path)
	}
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
