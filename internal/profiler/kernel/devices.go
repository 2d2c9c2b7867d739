package kernel

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"sync"
)

// devNames names block devices from their kernel dev_t (major << 20 |
// minor): the kernel's name for it ("vda1", "nvme0n1p2") from
// /sys/dev/block/<major>:<minor>/uevent, else "major:minor" (a device
// without a block device behind it, e.g. the anonymous device of tmpfs,
// overlayfs or a btrfs subvolume, or one removed since). Safe for
// concurrent use; names are cached for the recorder's lifetime.
type devNames struct {
	mu    sync.Mutex
	names map[uint32]string
	root  string // /sys/dev/block (tests point it elsewhere)
}

func newDevNames() *devNames {
	return &devNames{names: map[uint32]string{}, root: "/sys/dev/block"}
}

func (d *devNames) name(dev uint32) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n, ok := d.names[dev]; ok {
		return n
	}
	num := devNumber(dev)
	n := num
	if data, err := os.ReadFile(d.root + "/" + num + "/uevent"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "DEVNAME="); ok && v != "" {
				n = v
				break
			}
		}
	}
	d.names[dev] = n
	return n
}
