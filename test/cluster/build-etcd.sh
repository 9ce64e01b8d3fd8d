#!/usr/bin/env bash
# Builds (once) a real etcd server from the Go module proxy and caches it:
#
#   .cache/k8s-bin/etcd-<ETCD_VERSION>/etcd
#
# etcd's server module (go.etcd.io/etcd/server/v3) has its main package at its root since 3.5, but
# its go.mod replaces its sibling modules with ../api, ../pkg, ... (etcd's monorepo layout), so
# `go install go.etcd.io/etcd/server/v3@v3.7.3` is refused. As for kube-apiserver (build-lib.sh), a
# generated wrapper module requires it; replace directives of a dependency do not apply there, and
# the siblings resolve to their published v3.7.x versions.
# Same Go caches and flags as build.sh (.cache/go); reuses the cached binary when present. Env:
#   VIGIL_ETCD_VERSION (default v3.7.3)   go.etcd.io/etcd/server/v3 version
#   VIGIL_CACHE_DIR, VIGIL_FORCE_BUILD=1 as for build.sh
# Prints the binary path on stdout; progress goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"

log() { printf '[build-etcd.sh] %s\n' "$*" >&2; }
die() { printf '[build-etcd.sh] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ -x "$ETCD_BIN" && "${VIGIL_FORCE_BUILD:-0}" != 1 ]]; then
  log "cached: $ETCD_BIN"
  echo "$ETCD_BIN"
  exit 0
fi

# shellcheck source=build-lib.sh
source "$HERE/build-lib.sh"
build_lock etcd
# Another run may have built it while this one waited for the lock.
if [[ -x "$ETCD_BIN" && "${VIGIL_FORCE_BUILD:-0}" != 1 ]]; then
  log "cached: $ETCD_BIN"; echo "$ETCD_BIN"; exit 0
fi

t0=$(date +%s)
wrap="$VIGIL_CACHE_DIR/k8s-build/etcd-${ETCD_VERSION}"
rm -rf "$wrap"; mkdir -p "$wrap"
# The server module's own go line (go 1.26.0 at v3.7.3: this machine's Go 1.26.8 builds it with
# GOTOOLCHAIN=local; its `toolchain` line applies only to etcd's own main module).
cat > "$wrap/go.mod" <<MOD
module vigil.local/etcd-wrapper

go 1.26.0

require go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
MOD
log "resolving go.etcd.io/etcd/server/v3@${ETCD_VERSION} (go get) ..."
(cd "$wrap" && go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}") || die "go get failed (see above)"
mkdir -p "$(dirname "$ETCD_BIN")"
log "compiling etcd ${ETCD_VERSION} ..."
(cd "$wrap" && CGO_ENABLED=0 go build -ldflags "-s -w" -o "$ETCD_BIN.tmp" go.etcd.io/etcd/server/v3) \
  || { rm -f "$ETCD_BIN.tmp"; die "etcd build failed"; }
mv -f "$ETCD_BIN.tmp" "$ETCD_BIN"
"$ETCD_BIN" --version >&2 || die "built etcd does not run"
log "etcd built in $(( $(date +%s) - t0 ))s -> $ETCD_BIN"
echo "$ETCD_BIN"
