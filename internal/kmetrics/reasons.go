package kmetrics

import (
	"strings"

	"github.com/cilium/ebpf/btf"
)

// dropReasons names enum skb_drop_reason values from the kernel's BTF
// ("SKB_DROP_REASON_NO_SOCKET" → "no_socket"); empty when BTF is missing.
func dropReasons() map[uint32]string {
	out := map[uint32]string{}
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return out
	}
	var e *btf.Enum
	if err := spec.TypeByName("skb_drop_reason", &e); err != nil {
		return out
	}
	for _, v := range e.Values {
		out[uint32(v.Value)] = strings.ToLower(strings.TrimPrefix(v.Name, "SKB_DROP_REASON_"))
	}
	return out
}
