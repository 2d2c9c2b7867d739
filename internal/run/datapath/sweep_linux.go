//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
)

// initPIDNamespace is the inode of the host's PID namespace (the kernel's
// PROC_PID_INIT_INO).
const initPIDNamespace = 0xEFFFFFFC

// ErrCannotSweep: this process may not sweep (not root, or not in the host's
// PID namespace, where the runs' pids cannot be checked).
var ErrCannotSweep = errors.New("datapath: cannot sweep shared datapaths from here")

// Sweep removes the shared datapaths that no live run holds: one whose last
// run was killed (its programs stay attached while they are pinned, and
// cost a load on every socket read of the node), or one of another build
// whose runs are all gone. With the pins gone the programs detach and the
// sockets leave the sockhash. It returns the pin directories it removed.
//
// It needs root, and a run's slot names its pid, which means something only
// in the host's PID namespace: otherwise Sweep does nothing and says so
// (ErrCannotSweep).
// It takes each datapath's lock, so a run joining at the same time either
// finds it whole or makes a new one.
func Sweep() (removed []string, err error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: not root", ErrCannotSweep)
	}
	if ns, err := os.Readlink("/proc/self/ns/pid"); err != nil {
		return nil, fmt.Errorf("datapath: sweep: %w", err)
	} else if ns != fmt.Sprintf("pid:[%d]", uint32(initPIDNamespace)) {
		return nil, fmt.Errorf("%w: not in the host's PID namespace", ErrCannotSweep)
	}
	var errs []error
	for _, root := range []string{"/sys/fs/bpf", BPFFSDir} {
		if !isBPFFS(root) {
			continue
		}
		ents, err := os.ReadDir(filepath.Join(root, "rootline"))
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), "dp-") {
				continue
			}
			dir := filepath.Join(root, "rootline", e.Name())
			gone, err := sweepOne(dir)
			if err != nil {
				errs = append(errs, fmt.Errorf("datapath: sweep %s: %w", dir, err))
			}
			if gone {
				removed = append(removed, dir)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// sweepOne unpins the shared datapath at dir if no live run holds a slot in
// it (or it has no slot registry: a run that died while it pinned).
func sweepOne(dir string) (removed bool, err error) {
	unlock, err := lockShared(filepath.Base(dir))
	if err != nil {
		return false, err
	}
	defer unlock()
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return false, nil // its last run left meanwhile
	}
	owners, err := ebpf.LoadPinnedMap(filepath.Join(dir, "rd_owners"), nil)
	if err == nil {
		live := othersAlive(owners, numSlots) // every slot (none is numSlots)
		owners.Close()
		if live {
			return false, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	unpinAll(dir)
	if _, err := os.Stat(dir); err == nil {
		return false, fmt.Errorf("%s is left (not empty)", dir)
	}
	return true, nil
}
