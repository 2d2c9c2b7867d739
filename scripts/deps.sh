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

# Go modules: downloaded once into the module cache (the proxy is reachable).
if ! go list -m all >/dev/null 2>&1; then
  say "downloading Go modules"
  go mod download
fi
