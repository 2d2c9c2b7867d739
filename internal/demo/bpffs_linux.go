package demo

import (
	"errors"

	"github.com/rootline/rootline/internal/run/datapath"
)

// ShareDatapath mounts the BPF file system where the `rootline run`s of the
// pods find the datapath they share (datapath.BPFFSDir), before the pods
// start: `ip netns exec` gives each pod a mount namespace of its own, which
// sees the host's mounts made before it. Without it each pod would load its
// own copy of the programs that run on every socket read of the node.
func ShareDatapath() error { return datapath.MountBPFFS() }

// SweepDatapaths removes the shared datapaths the pods' runs left behind if
// the last of them was killed rather than leaving (datapath.Sweep); what it
// removed, by pin directory. Where it may not sweep (not root) it does
// nothing.
func SweepDatapaths() ([]string, error) {
	removed, err := datapath.Sweep()
	if errors.Is(err, datapath.ErrCannotSweep) {
		err = nil
	}
	return removed, err
}
