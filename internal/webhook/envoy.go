package webhook

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// addEnvoy adds the Envoy sidecar and its iptables init container to pod:
// inbound TCP connections to the wrapped containers' declared ports are
// redirected (nat PREROUTING, REDIRECT) to Envoy, which traces them (Zipkin,
// to the Rootline server) and forwards them to their original destination.
//
// Only inbound traffic is redirected, and only to declared ports: the
// outbound side is what `rootline run` traces inside the process, and a
// port the Pod does not declare (a debug or metrics port) is left alone.
// Envoy's own connections to the application leave through OUTPUT, which
// has no rule, so they are not redirected back to it.
//
// A non-empty warning means the sidecar was not added (and why); an error
// means the Pod cannot be wrapped as asked.
func (m *Mutator) addEnvoy(pod *corev1.Pod, wrapped []string, service string) (warning string, err error) {
	e := m.cfg.Envoy
	if e.Image == "" {
		return "rootline: " + AnnotationEnvoy + " is set but the webhook has no Envoy image (--envoy.image): no sidecar added", nil
	}
	var ports []int
	for _, name := range wrapped {
		for _, p := range container(pod, name).Ports {
			if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
				ports = append(ports, int(p.ContainerPort))
			}
		}
	}
	if len(ports) == 0 {
		return "rootline: " + AnnotationEnvoy + " is set but the traced containers declare no TCP port: no sidecar added", nil
	}
	sort.Ints(ports)
	for _, p := range ports {
		if p == e.InboundPort || p == e.AdminPort {
			return "", fmt.Errorf("container port %d is the Envoy sidecar's own port", p)
		}
	}

	f := false
	root := int64(0)
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{
		Name:    EnvoyInitName,
		Image:   e.InitImage,
		Command: []string{"sh", "-c", IptablesScript(ports, e.InboundPort)},
		// The nat table of the Pod's network namespace needs NET_ADMIN and
		// NET_RAW, as root; nothing else.
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                &root,
			RunAsNonRoot:             &f,
			AllowPrivilegeEscalation: &f,
			Capabilities: &corev1.Capabilities{
				Add:  []corev1.Capability{"NET_ADMIN", "NET_RAW"},
				Drop: []corev1.Capability{"ALL"},
			},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	})
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
		Name:    EnvoyContainerName,
		Image:   e.Image,
		Command: []string{"envoy"},
		Args: []string{
			"--config-yaml", EnvoyBootstrap(service, e),
			"--log-level", "warn",
			// One worker: the sidecar serves one Pod.
			"--concurrency", "1",
		},
		SecurityContext:          restricted(e.UID),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	})
	return "", nil
}

// IptablesScript is the sh script of the redirect init container: inbound
// TCP to each of ports goes to Envoy's inboundPort. It fails (and so the Pod
// does not start unobserved) if a rule cannot be added.
func IptablesScript(ports []int, inboundPort int) string {
	var b strings.Builder
	b.WriteString("set -eu\n")
	b.WriteString("iptables -t nat -N ROOTLINE_INBOUND\n")
	b.WriteString("iptables -t nat -A PREROUTING -p tcp -j ROOTLINE_INBOUND\n")
	for _, p := range ports {
		fmt.Fprintf(&b, "iptables -t nat -A ROOTLINE_INBOUND -p tcp --dport %d -j REDIRECT --to-ports %d\n", p, inboundPort)
	}
	b.WriteString("iptables -t nat -S\n")
	return b.String()
}

// EnvoyBootstrap is the sidecar's static configuration: one inbound
// listener that restores each connection's original destination, an HTTP
// connection manager that traces every request (Zipkin, to the Rootline
// server, as service), and the original-destination cluster.
func EnvoyBootstrap(service string, e EnvoyConfig) string {
	host, port, err := net.SplitHostPort(e.ZipkinAddr)
	if _, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil {
		host, port = e.ZipkinAddr, "9411"
	}
	return fmt.Sprintf(`node:
  id: %[6]s
  cluster: %[1]s
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: %[2]d}}
static_resources:
  listeners:
  - name: rootline_inbound
    address: {socket_address: {address: 0.0.0.0, port_value: %[3]d}}
    listener_filters:
    - name: envoy.filters.listener.original_dst
      typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: rootline_inbound
          generate_request_id: true
          tracing:
            provider:
              name: envoy.tracers.zipkin
              typed_config:
                "@type": type.googleapis.com/envoy.config.trace.v3.ZipkinConfig
                collector_cluster: rootline_zipkin
                collector_endpoint: /api/v2/spans
                collector_endpoint_version: HTTP_JSON
                shared_span_context: false
          route_config:
            virtual_hosts:
            - name: app
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: rootline_original_dst, timeout: 0s}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: rootline_original_dst
    type: ORIGINAL_DST
    lb_policy: CLUSTER_PROVIDED
    connect_timeout: 5s
  - name: rootline_zipkin
    type: STRICT_DNS
    connect_timeout: 5s
    load_assignment:
      cluster_name: rootline_zipkin
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: %[4]s, port_value: %[5]s}}}
`, strconv.Quote(service), e.AdminPort, e.InboundPort, strconv.Quote(host), port, strconv.Quote(service+"-sidecar"))
}
