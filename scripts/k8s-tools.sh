#!/usr/bin/env bash
# Builds the Kubernetes control plane that `make test-k8s` runs against —
# kube-apiserver and etcd — from their Go modules (no container images, no
# prebuilt downloads), and caches the binaries under
# ${ROOTLINE_K8S_CACHE:-~/.cache/rootline/k8s}/<version>/bin. Prints that folder.
#
# kube-apiserver cannot be `go install`ed: Kubernetes' go.mod replaces its
# staging modules (k8s.io/api, ...) with local folders. It builds from a scratch
# module whose go.mod is a copy of Kubernetes' with the module line renamed, the
# replace block dropped, every staging module pinned to the matching v0.x
# release and k8s.io/kubernetes itself required. etcd's server module is built
# the same way. A cold build takes ~3 min and ~2 GB of memory; later runs reuse
# the binaries.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.4}
ETCD_VERSION=${ETCD_VERSION:-v3.6.6}
CACHE=${ROOTLINE_K8S_CACHE:-$HOME/.cache/rootline/k8s}
OUT=$CACHE/$K8S_VERSION-etcd$ETCD_VERSION/bin
GO=${GO:-go}
STAGING=v0.${K8S_VERSION#v1.}

log() { echo "k8s-tools: $*" >&2; }

if [[ -x $OUT/kube-apiserver && -x $OUT/etcd ]]; then
  echo "$OUT"
  exit 0
fi
mkdir -p "$OUT"
work=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# scratch_module DIR MODULE VERSION NEWNAME: DIR/go.mod becomes MODULE@VERSION's
# go.mod renamed to NEWNAME, without its replace directives, requiring MODULE.
scratch_module() {
  local dir=$1 mod=$2 ver=$3 name=$4 gomod
  mkdir -p "$dir"
  gomod=$(cd "$dir" && GOFLAGS=-mod=mod $GO mod download -json "$mod@$ver" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [[ -f $gomod ]] || { log "cannot download $mod@$ver"; exit 1; }
  # Drop single-line replaces and replace blocks; pin staging modules.
  awk -v staging="$STAGING" '
    /^replace[[:space:]]*\(/ { skip = 1; next }
    skip && /^\)/ { skip = 0; next }
    skip { next }
    /^replace[[:space:]]/ { next }
    { gsub(/ v0\.0\.0$/, " " staging); print }
  ' "$gomod" | sed "1,/^module /s|^module .*|module $name|" >"$dir/go.mod"
  printf 'require %s %s\n' "$mod" "$ver" >>"$dir/go.mod"
  printf 'package main\n' >"$dir/main.go"
}

if [[ ! -x $OUT/etcd ]]; then
  log "building etcd $ETCD_VERSION (~15 s)"
  scratch_module "$work/etcd" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" rootline.local/etcdbuild
  (cd "$work/etcd" &&
   GOFLAGS=-mod=mod GOSUMDB=off CGO_ENABLED=0 $GO build -trimpath -ldflags "-s -w" -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$OUT/etcd.tmp" "$OUT/etcd"
fi

if [[ ! -x $OUT/kube-apiserver ]]; then
  log "building kube-apiserver $K8S_VERSION (~3 min cold, ~2 GB memory)"
  scratch_module "$work/k8s" k8s.io/kubernetes "$K8S_VERSION" rootline.local/k8sbuild
  (cd "$work/k8s" && GOFLAGS=-mod=mod GOSUMDB=off CGO_ENABLED=0 $GO build -trimpath \
     -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION")" \
     -o "$OUT/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
  mv "$OUT/kube-apiserver.tmp" "$OUT/kube-apiserver"
fi
log "built into $OUT"
echo "$OUT"
