package mesh

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// procAttr puts each process in its own group (Close signals the group) and
// has the kernel kill it if the mesh process dies. asEnvoy runs it with
// group EnvoyGID so the pod's OUTPUT rules let its traffic through.
func procAttr(asEnvoy bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if asEnvoy {
		a.Credential = &syscall.Credential{Uid: 0, Gid: EnvoyGID, NoSetGroups: true}
	}
	return a
}

// pinPID confines a process (its main thread; a shell loop has no other)
// to one CPU.
func pinPID(pid, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(pid, &set); err != nil {
		return fmt.Errorf("pin process %d to CPU %d: %w", pid, cpu, err)
	}
	return nil
}
