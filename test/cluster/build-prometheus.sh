#!/usr/bin/env bash
# Builds (once) Prometheus and promtool from the Go module proxy and caches them:
#
#   .cache/prom-bin/<PROM_MODULE_VERSION>/prometheus
#   .cache/prom-bin/<PROM_MODULE_VERSION>/promtool
#
# github.com/prometheus/prometheus publishes Prometheus 3.x as module versions v0.3xx.y (v0.316.0 is
# Prometheus 3.16.0). Its go.mod has no replace or exclude directives, so `go install mod@version`
# works without a wrapper module. Kept small: `remove_all_sd,enable_kubernetes_sd` drops every
# service-discovery plugin but kubernetes (file and http stay: plugins/minimum.go), and without
# `builtinassets` the web UI is not embedded (the tests use the HTTP API only).
#
# Usage: build-prometheus.sh [promtool]   (`promtool` builds only promtool, all the rule tests need)
# Env: VIGIL_PROM_VERSION (module version, default v0.316.0), VIGIL_CACHE_DIR, VIGIL_FORCE_BUILD=1.
# Prints the binary paths on stdout (prometheus first, when built); progress goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"

log() { printf '[build-prometheus.sh] %s\n' "$*" >&2; }
die() { printf '[build-prometheus.sh] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go not found in PATH (Prometheus ${PROM_VERSION} needs Go >= 1.26.7)"

want=(promtool)
[[ "${1:-}" == promtool ]] || want=(prometheus promtool)
bin_of() { [[ "$1" == prometheus ]] && echo "$PROMETHEUS_BIN" || echo "$PROMTOOL_BIN"; }
all_cached() {
  [[ "${VIGIL_FORCE_BUILD:-0}" == 1 ]] && return 1
  local b; for b in "${want[@]}"; do [[ -x "$(bin_of "$b")" ]] || return 1; done
}
finish() { local b; for b in "${want[@]}"; do bin_of "$b"; done; }

if all_cached; then
  for b in "${want[@]}"; do log "cached: $(bin_of "$b")"; done
  finish; exit 0
fi

mkdir -p "$VIGIL_CACHE_DIR/go/mod" "$VIGIL_CACHE_DIR/go/build" "$VIGIL_CACHE_DIR/prom-build" "$(dirname "$PROMETHEUS_BIN")"
export GOMODCACHE="$VIGIL_CACHE_DIR/go/mod"
export GOCACHE="$VIGIL_CACHE_DIR/go/build"
export GOFLAGS="-trimpath -buildvcs=false -mod=mod"
export GOTOOLCHAIN=local
export GOWORK=off
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"

# Serialise concurrent builds (test files build on first use, possibly at once).
exec 9>"$VIGIL_CACHE_DIR/prom-build/.lock"
if ! flock -n 9; then
  log "another build is running; waiting for its lock"
  flock 9
fi

START=$(date +%s)
# Prometheus's release version (v0.316.0 -> 3.16.0), as its own builds stamp it.
minor="${PROM_VERSION#v0.}"; minor="${minor%%.*}"; patch="${PROM_VERSION##*.}"
release="$((minor / 100)).$((minor % 100)).${patch}"
ld="-s -w -X github.com/prometheus/common/version.Version=${release}"
ld+=" -X github.com/prometheus/common/version.Revision=${PROM_VERSION} -X github.com/prometheus/common/version.Branch=module"

for b in "${want[@]}"; do
  bin="$(bin_of "$b")"
  if [[ -x "$bin" && "${VIGIL_FORCE_BUILD:-0}" != 1 ]]; then log "cached: $bin"; continue; fi
  t0=$(date +%s)
  tmpbin="$(mktemp -d "$VIGIL_CACHE_DIR/prom-build/bin.XXXXXX")"
  log "building ${b} ${release} (module ${PROM_VERSION}) ..."
  CGO_ENABLED=0 GOBIN="$tmpbin" go install -tags "netgo,remove_all_sd,enable_kubernetes_sd" -ldflags "$ld" \
    "github.com/prometheus/prometheus/cmd/${b}@${PROM_VERSION}" \
    || { rm -rf "$tmpbin"; die "${b} build failed"; }
  mv -f "$tmpbin/$b" "$bin"
  rm -rf "$tmpbin"
  "$bin" --version >&2 || die "built ${b} does not run"
  log "${b} built in $(($(date +%s) - t0))s -> $bin"
done
log "done in $(($(date +%s) - START))s"
finish
