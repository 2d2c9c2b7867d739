package mesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// run runs a command and returns its combined output in the error.
func run(ctx context.Context, stdin string, argv ...string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// parseSubnet accepts a.b.c.0/24 and returns the gateway a.b.c.1 and a.b.c.
func parseSubnet(s string) (gw, prefix string, err error) {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		return "", "", fmt.Errorf("mesh: subnet: %w", err)
	}
	if ones, _ := n.Mask.Size(); ones != 24 || ip.To4() == nil {
		return "", "", fmt.Errorf("mesh: subnet %s: want an IPv4 /24", s)
	}
	v := n.IP.To4()
	prefix = fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
	return prefix + ".1", prefix, nil
}

// setupNetwork makes the bridge and, per replica, a namespace joined to it
// by a veth pair, its /etc/netns hosts file, and (with sidecars) the
// interception rules.
func (m *Mesh) setupNetwork(ctx context.Context) error {
	br := m.bridge
	for _, argv := range [][]string{
		{"ip", "link", "add", br, "type", "bridge"},
		{"ip", "addr", "add", m.gw + "/24", "dev", br},
		{"ip", "link", "set", br, "up"},
	} {
		if err := run(ctx, "", argv...); err != nil {
			return fmt.Errorf("mesh: bridge: %w", err)
		}
	}
	hosts := m.hostsFile()
	for _, s := range m.services {
		for _, r := range s.Replicas {
			if err := m.setupPod(ctx, r, hosts); err != nil {
				return fmt.Errorf("mesh: pod %s: %w", r.Netns, err)
			}
		}
	}
	return nil
}

func (m *Mesh) setupPod(ctx context.Context, r Replica, hosts string) error {
	ns := r.Netns
	// ip netns exec bind-mounts /etc/netns/<ns>/hosts over /etc/hosts, so
	// services resolve each other by name.
	dir := filepath.Join("/etc/netns", ns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(hosts), 0o644); err != nil {
		return err
	}
	for _, argv := range [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", r.Veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "link", "set", r.Veth, "master", m.bridge, "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "addr", "add", r.IP + "/24", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "route", "add", "default", "via", m.gw},
	} {
		if err := run(ctx, "", argv...); err != nil {
			return err
		}
	}
	if m.opts.EnvoyBin == "" {
		return nil
	}
	return run(ctx, m.interceptRules(), "ip", "netns", "exec", ns, "iptables-restore")
}

// hostsFile maps each service name to its first replica (sidecars balance
// over all replicas by Host header; the address only has to be in the mesh)
// and <service>-<i> to each replica.
func (m *Mesh) hostsFile() string {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost\n")
	fmt.Fprintf(&b, "%s\trootline-gateway\n", m.gw)
	for _, s := range m.services {
		for _, r := range s.Replicas {
			if r.Index == 0 {
				fmt.Fprintf(&b, "%s\t%s %s-0\n", r.IP, s.Name, s.Name)
			} else {
				fmt.Fprintf(&b, "%s\t%s-%d\n", r.IP, s.Name, r.Index)
			}
		}
	}
	return b.String()
}

// interceptRules are the nat rules of Istio's init container, for
// iptables-restore inside a pod: inbound TCP (except the admin ports) goes
// to Envoy's inbound listener; outbound TCP into the mesh subnet goes to its
// outbound listener, except Envoy's own (group EnvoyGID), loopback and the
// gateway (forwarded host services such as the OTLP receiver).
func (m *Mesh) interceptRules() string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	w("*nat")
	w(":RL_INBOUND - [0:0]")
	w(":RL_OUTBOUND - [0:0]")
	w("-A PREROUTING -p tcp -j RL_INBOUND")
	for _, p := range []int{EnvoyAdminPort, EnvoyOutboundPort, EnvoyInboundPort, AppAdminPort} {
		w("-A RL_INBOUND -p tcp --dport %d -j RETURN", p)
	}
	w("-A RL_INBOUND -p tcp -j REDIRECT --to-ports %d", EnvoyInboundPort)
	w("-A OUTPUT -p tcp -j RL_OUTBOUND")
	w("-A RL_OUTBOUND -m owner --gid-owner %d -j RETURN", EnvoyGID)
	w("-A RL_OUTBOUND -o lo -j RETURN")
	w("-A RL_OUTBOUND -d %s/32 -j RETURN", m.gw)
	w("-A RL_OUTBOUND -p tcp --dport %d -j RETURN", AppAdminPort)
	w("-A RL_OUTBOUND -p tcp --dport %d -j RETURN", EnvoyAdminPort)
	w("-A RL_OUTBOUND -d %s.0/24 -p tcp -j REDIRECT --to-ports %d", m.subnet, EnvoyOutboundPort)
	w("COMMIT")
	return b.String()
}

// gatewayChain names the host chains (nat and filter tables) through which
// pods reach loopback services at the bridge gateway.
func gatewayChain(prefix string) string { return prefix + "-gw" }

// natGateway makes each loopback address in addrs reachable from the pods at
// the gateway with the same port, by DNAT in the host's nat table: the
// kernel carries the connection, with no copy through this process (a
// forwarder here cost the demo's process a read and a write per chunk of
// every span batch). route_localnet on the bridge lets the kernel route the
// rewritten packets to 127/8; a filter rule drops anything else arriving
// from the bridge for 127/8, so pods reach the listed ports and no other
// loopback-only service of the host (kube-proxy guards its localhost node
// ports the same way). It returns the addresses it could not map (not an
// IPv4 loopback literal), which the caller forwards in user space.
func (m *Mesh) natGateway(ctx context.Context, addrs []string) ([]string, error) {
	chain := gatewayChain(m.opts.Prefix)
	nat := []string{"*nat", ":" + chain + " - [0:0]", "-A PREROUTING -i " + m.bridge + " -j " + chain}
	var rest []string
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if ip := net.ParseIP(host); err != nil || ip == nil || ip.To4() == nil || !ip.IsLoopback() {
			rest = append(rest, a)
			continue
		}
		nat = append(nat, fmt.Sprintf("-A %s -d %s/32 -p tcp --dport %s -j DNAT --to-destination %s", chain, m.gw, port, a))
	}
	if len(rest) == len(addrs) {
		return rest, nil
	}
	filter := []string{"*filter", ":" + chain + " - [0:0]", "-A INPUT -i " + m.bridge + " -j " + chain,
		"-A " + chain + " -d 127.0.0.0/8 -m conntrack ! --ctstate DNAT -j DROP"}
	rules := strings.Join(append(append(nat, "COMMIT"), append(filter, "COMMIT")...), "\n") + "\n"
	if err := run(ctx, rules, "iptables-restore", "--noflush"); err != nil {
		removeGateway(ctx, m.opts.Prefix) // whatever part of it went in
		return addrs, err
	}
	if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf", m.bridge, "route_localnet"), []byte("1\n"), 0o644); err != nil {
		removeGateway(ctx, m.opts.Prefix)
		return addrs, err
	}
	return rest, nil
}

// removeGateway removes natGateway's chains and the rules that jump to
// them; absent ones are not an error.
func removeGateway(ctx context.Context, prefix string) error {
	chain := gatewayChain(prefix)
	var errs []error
	for _, t := range []struct{ table, hook string }{{"nat", "PREROUTING"}, {"filter", "INPUT"}} {
		if exec.CommandContext(ctx, "iptables", "-t", t.table, "-n", "-L", chain).Run() != nil {
			continue // no such chain
		}
		// Every rule that jumps to the chain, whatever its interface.
		out, _ := exec.CommandContext(ctx, "iptables", "-t", t.table, "-S", t.hook).Output()
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			if len(f) > 2 && f[0] == "-A" && slices.Contains(f, "-j") && f[len(f)-1] == chain {
				errs = append(errs, run(ctx, "", append([]string{"iptables", "-t", t.table, "-D"}, f[1:]...)...))
			}
		}
		errs = append(errs, run(ctx, "", "iptables", "-t", t.table, "-F", chain),
			run(ctx, "", "iptables", "-t", t.table, "-X", chain))
	}
	return errors.Join(errs...)
}

// teardownNetwork removes what setupNetwork made (namespaces take their
// rules, veth ends and qdiscs with them).
func (m *Mesh) teardownNetwork() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, s := range m.services {
		for _, r := range s.Replicas {
			errs = append(errs, removeNetns(ctx, r.Netns, m.log))
			errs = append(errs, delLink(ctx, r.Veth))
		}
	}
	errs = append(errs, delLink(ctx, m.bridge))
	if m.natted {
		errs = append(errs, removeGateway(ctx, m.opts.Prefix))
	}
	return errors.Join(errs...)
}

// delLink deletes a link; one already gone (a veth goes with its peer's
// namespace, asynchronously) is not an error.
func delLink(ctx context.Context, name string) error {
	if !linkExists(name) {
		return nil
	}
	if err := run(ctx, "", "ip", "link", "del", name); err != nil && linkExists(name) {
		return err
	}
	return nil
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// removeNetns kills what still runs in ns and deletes it and its /etc/netns
// directory; a namespace that does not exist is not an error.
func removeNetns(ctx context.Context, ns string, log *slog.Logger) error {
	defer os.RemoveAll(filepath.Join("/etc/netns", ns))
	if _, err := os.Stat(filepath.Join("/run/netns", ns)); err != nil {
		return nil
	}
	for range 3 {
		out, _ := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			var pid int
			if _, err := fmt.Sscan(p, &pid); err == nil && pid > 1 {
				log.Debug("killing leftover process in netns", "netns", ns, "pid", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return run(ctx, "", "ip", "netns", "del", ns)
}

// Cleanup removes what a killed mesh with this prefix left behind: its
// processes, namespaces <prefix>-*, links <prefix>-*, and cgroups. Start calls
// it after taking the prefix's lock, so it never touches a live mesh; call it
// directly only when no mesh with the prefix runs.
func Cleanup(prefix string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if prefix == "" {
		return errors.New("mesh: cleanup needs a prefix")
	}
	if n := killRecorded(prefix); n > 0 {
		log.Info("killed leftover processes", "n", n)
	}
	clearPIDs(prefix)
	if os.Geteuid() != 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			log.Info("removing leftover netns", "netns", e.Name())
			errs = append(errs, removeNetns(ctx, e.Name(), log))
		}
	}
	etc, _ := filepath.Glob(filepath.Join("/etc/netns", prefix+"-*"))
	for _, d := range etc {
		os.RemoveAll(d)
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		if strings.HasPrefix(l.Name(), prefix+"-") {
			log.Info("removing leftover link", "link", l.Name())
			errs = append(errs, delLink(ctx, l.Name()))
		}
	}
	if _, err := exec.LookPath("iptables"); err == nil {
		errs = append(errs, removeGateway(ctx, prefix))
	}
	errs = append(errs, removeCgroups(cgroupName(prefix), log))
	return errors.Join(errs...)
}
