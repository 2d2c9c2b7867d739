#!/usr/bin/env bash
# Installs the ingest-benchmark tools into ${ROOTLINE_TOOLS:-$HOME/.cache/rootline/tools}/bin:
#   telemetrygen  - OpenTelemetry load generator (go install, pinned)
#   jaeger        - Jaeger v2 all-in-one, built from a scratch module (Jaeger's go.mod has
#                   replace directives, so `go install ...@version` does not work)
#   config-badger.yaml - Jaeger's stock Badger config, copied from the module cache
# Idempotent: a tool whose binary exists and whose stamp file (.NAME.version) matches the
# pinned version is skipped. Builds run under `nice -n 10` (shared machine).
set -euo pipefail

TELEMETRYGEN_VERSION="${TELEMETRYGEN_VERSION:-v0.161.0}"
JAEGER_VERSION="${JAEGER_VERSION:-v1.76.0}" # module version; the binary is Jaeger v2
TOOLS="${ROOTLINE_TOOLS:-$HOME/.cache/rootline/tools}"
BIN="$TOOLS/bin"
mkdir -p "$BIN"

log() { printf '[tools] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go not found in PATH"; exit 1; }

stamp_ok() { # name version
	[[ -x "$BIN/$1" && -f "$BIN/.$1.version" && "$(cat "$BIN/.$1.version")" == "$2" ]]
}

install_telemetrygen() {
	local v="$TELEMETRYGEN_VERSION"
	if stamp_ok telemetrygen "$v"; then
		log "telemetrygen $v already installed: $BIN/telemetrygen"
		return
	fi
	log "installing telemetrygen $v (go install)..."
	local t0=$SECONDS
	# GOSUMDB=off only as a fallback: the checksum database may be unreachable for some versions.
	if ! GOBIN="$BIN" GOFLAGS='' nice -n 10 go install \
		"github.com/open-telemetry/opentelemetry-collector-contrib/cmd/telemetrygen@$v"; then
		log "go install failed; retrying with GOSUMDB=off"
		GOBIN="$BIN" GOFLAGS='' GOSUMDB=off nice -n 10 go install \
			"github.com/open-telemetry/opentelemetry-collector-contrib/cmd/telemetrygen@$v"
	fi
	echo "$v" >"$BIN/.telemetrygen.version"
	log "telemetrygen $v installed in $((SECONDS - t0))s"
}

install_jaeger() {
	local v="$JAEGER_VERSION"
	if stamp_ok jaeger "$v" && [[ -f "$BIN/config-badger.yaml" ]]; then
		log "jaeger $v already installed: $BIN/jaeger"
		return
	fi
	local work
	work="$(mktemp -d "${TMPDIR:-/tmp}/jaeger-build.XXXXXX")"
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	log "downloading github.com/jaegertracing/jaeger@$v into the module cache..."
	# GOSUMDB=off: the checksum database does not answer for everything Jaeger pins (see
	# shared/MACHINE-NOTES.md); Jaeger's own go.sum, copied below, still checks its dependencies.
	local dir
	dir="$(cd "$work" && GOFLAGS='' GOSUMDB=off go mod download -json "github.com/jaegertracing/jaeger@$v" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
	[[ -n "$dir" && -f "$dir/go.mod" ]] || { log "could not locate jaeger module dir"; exit 1; }
	log "module dir: $dir"

	# Scratch module: Jaeger's go.mod (with its replace directives and pins), renamed, plus a
	# requirement on Jaeger itself; go.sum copied so most hashes are already known.
	sed 's#^module github.com/jaegertracing/jaeger$#module rootline.local/jaegerbuild#' \
		"$dir/go.mod" >"$work/go.mod"
	printf '\nrequire github.com/jaegertracing/jaeger %s\n' "$v" >>"$work/go.mod"
	cp "$dir/go.sum" "$work/go.sum"
	chmod u+w "$work/go.mod" "$work/go.sum"

	log "building jaeger $v (takes a few minutes)..."
	local t0=$SECONDS
	(cd "$work" && GOFLAGS=-mod=mod GOSUMDB=off GOTOOLCHAIN=local nice -n 10 \
		go build -trimpath -ldflags "-s -w" -o "$BIN/jaeger.new" github.com/jaegertracing/jaeger/cmd/jaeger)
	mv -f "$BIN/jaeger.new" "$BIN/jaeger"
	install -m 0644 "$dir/cmd/jaeger/config-badger.yaml" "$BIN/config-badger.yaml"
	echo "$v" >"$BIN/.jaeger.version"
	log "jaeger $v built in $((SECONDS - t0))s: $BIN/jaeger"
}

install_telemetrygen
install_jaeger

log "checking binaries..."
"$BIN/telemetrygen" --help >/dev/null 2>&1 || { log "telemetrygen does not run"; exit 1; }
"$BIN/jaeger" --help >/dev/null 2>&1 || { log "jaeger does not run"; exit 1; }
log "done: $BIN"
ls -l "$BIN" >&2
