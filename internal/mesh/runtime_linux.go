package mesh

import "syscall"

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
