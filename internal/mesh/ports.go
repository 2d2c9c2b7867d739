package mesh

// FreePorts returns n free loopback ports below the kernel's ephemeral
// range, where no other process's outgoing connection can take one between
// the check and the moment a service binds it (see freePorts). For other
// programs that start services on ports they pick, as the autoscaling
// experiment does.
func FreePorts(n int) ([]int, error) { return freePorts(n) }
