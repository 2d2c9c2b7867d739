package mesh

import (
	"errors"
	"fmt"
	"math"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// attachDropper drops a share p of the packets crossing the network
// interface ifname in both directions, with a tc (TCX) BPF program that
// draws a random number per packet. This kernel has no netem qdisc and no
// gact action module, the usual ways to lose packets; TCX programs load on
// any kernel since 6.6 and go away with the returned function (or with this
// process), so a crashed demo leaves no loss behind. TCP sees the losses as
// any lossy link: retransmissions after a timeout.
func attachDropper(ifname string, p float64) (func() error, error) {
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	threshold := int32(min(p, 1) * math.MaxUint32 / 2) // compared as a signed 32-bit immediate below
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "rl_drop", Type: ebpf.SchedCLS, License: "GPL", Instructions: asm.Instructions{
		// r0 = prandom() >> 1, a number in [0, 2^31): below threshold, drop.
		asm.FnGetPrandomU32.Call(),
		asm.RSh.Imm32(asm.R0, 1),
		asm.JLT.Imm32(asm.R0, threshold, "drop"),
		asm.Mov.Imm(asm.R0, -1), // TC_ACT_UNSPEC: the next program or the stack decides
		asm.Return(),
		asm.Mov.Imm(asm.R0, 2).WithSymbol("drop"), // TC_ACT_SHOT
		asm.Return(),
	}})
	if err != nil {
		return nil, fmt.Errorf("packet dropper: load: %w", err)
	}
	var links []link.Link
	stop := func() error {
		var errs []error
		for _, l := range links {
			errs = append(errs, l.Close())
		}
		return errors.Join(append(errs, prog.Close())...)
	}
	for _, at := range []ebpf.AttachType{ebpf.AttachTCXEgress, ebpf.AttachTCXIngress} {
		l, err := link.AttachTCX(link.TCXOptions{Interface: ifc.Index, Program: prog, Attach: at})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("packet dropper: attach to %s: %w", ifname, err), stop())
		}
		links = append(links, l)
	}
	return stop, nil
}
