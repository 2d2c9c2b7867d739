package demo

import (
	"errors"
	"os"

	"github.com/rootline/rootline/internal/rbinder/datapath"
)

// ShareDatapath mounts the BPF file system where the `rootline run`s of the
// pods find the datapath they share (datapath.BPFFSDir), before the pods
// start: `ip netns exec` gives each pod a mount namespace of its own, which
// sees the host's mounts made before it. Without it each pod would load its
// own copy of the programs that run on every socket read of the node.
func ShareDatapath() error { return datapath.MountBPFFS() }

// SweepDatapaths removes the shared datapaths the pods' runs left behind if
// the last of them was killed rather than leaving (datapath.Sweep); what it
// removed, by pin directory. Without root there is nothing it may remove.
func SweepDatapaths() ([]string, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	removed, err := datapath.Sweep()
	if errors.Is(err, datapath.ErrNotHostPID) {
		err = nil
	}
	return removed, err
}
