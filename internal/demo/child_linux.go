package demo

import "syscall"

// childAttr makes a helper process of the demo (the agent) a group of its
// own, so that Ctrl-C goes to the demo, which stops it, and has it
// terminated when the demo dies without doing so (killed, or a second
// Ctrl-C): the agent would otherwise keep its eBPF programs running on
// every CPU of the node. The parent-death signal follows the thread that
// forked the child, which must therefore stay until the child ends
// (startAgentProc locks it).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
