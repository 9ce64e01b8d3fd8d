#!/usr/bin/env bash
# Builds (once) what the Karpenter repair tests run beside the test control plane, all from the Go module proxy:
#   - karpenter-vigil: Karpenter's kwok cloud provider with the AWS provider's repair policies for Vigil's
#     condition types (the wrapper module in test/cluster/karpenter/, sigs.k8s.io/karpenter pinned in its go.mod);
#   - the KWOK controller (sigs.k8s.io/kwok/cmd/kwok), which keeps the fake Nodes Ready as a kubelet would;
# and copies from those modules what the tests apply:
#   .cache/karpenter/crds/         Karpenter's CRDs (kwok chart variant) + the KWOKNodeClass CRD
#   .cache/karpenter/kwok-stages/  KWOK's node-initialize and node-heartbeat Stages
#
#   .cache/k8s-bin/karpenter-<version>-<wrapper hash>/karpenter-vigil
#   .cache/k8s-bin/kwok-<KWOK_VERSION>/kwok
#
# Karpenter v1.15 needs Go >= 1.26.9, newer than this machine's Go, so this script sets GOTOOLCHAIN=go1.27.3
# (the go command takes that toolchain from the module proxy, cached in .cache/go/mod). Otherwise the env is
# build.sh's (GOMODCACHE/GOCACHE under .cache/go, -trimpath, GOWORK=off, a flock). Idempotent: cached outputs
# are reused. Env: VIGIL_KWOK_VERSION (default v0.8.0), VIGIL_CACHE_DIR, VIGIL_FORCE_BUILD=1.
# Prints the karpenter-vigil and kwok paths on stdout (one per line); progress goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"

log() { printf '[build-karpenter.sh] %s\n' "$*" >&2; }
die() { printf '[build-karpenter.sh] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go not found in PATH"

WRAP="$HERE/karpenter"
KARPENTER_VERSION="$(sed -n 's/^[[:space:]]*sigs\.k8s\.io\/karpenter \(v[^ ]*\)$/\1/p' "$WRAP/go.mod" | head -1)"
[[ -n "$KARPENTER_VERSION" ]] || die "no sigs.k8s.io/karpenter requirement in $WRAP/go.mod"
KWOK_VERSION="${VIGIL_KWOK_VERSION:-v0.8.0}"
# The binary depends on the wrapper's sources too, so they are part of its cache key.
WRAP_HASH="$(cd "$WRAP" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-12)"
KARPENTER_BIN="$VIGIL_CACHE_DIR/k8s-bin/karpenter-${KARPENTER_VERSION}-${WRAP_HASH}/karpenter-vigil"
KWOK_BIN="$VIGIL_CACHE_DIR/k8s-bin/kwok-${KWOK_VERSION}/kwok"
OUT="$VIGIL_CACHE_DIR/karpenter"
CRDS="$OUT/crds"
STAGES="$OUT/kwok-stages"
STAMP="$OUT/.source"
WANT_STAMP="karpenter ${KARPENTER_VERSION} kwok ${KWOK_VERSION}"

done_already() {
  [[ "${VIGIL_FORCE_BUILD:-0}" != 1 && -x "$KARPENTER_BIN" && -x "$KWOK_BIN" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT_STAMP" ]]
}
finish() { printf '%s\n%s\n' "$KARPENTER_BIN" "$KWOK_BIN"; }

if done_already; then
  log "cached: $KARPENTER_BIN"; log "cached: $KWOK_BIN"; log "cached: $CRDS"
  finish; exit 0
fi

mkdir -p "$VIGIL_CACHE_DIR/go/mod" "$VIGIL_CACHE_DIR/go/build" "$VIGIL_CACHE_DIR/k8s-build"
export GOMODCACHE="$VIGIL_CACHE_DIR/go/mod"
export GOCACHE="$VIGIL_CACHE_DIR/go/build"
export GOFLAGS="-trimpath -buildvcs=false -mod=mod"
export GOTOOLCHAIN=go1.27.3
export GOWORK=off
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"

LOCK="$VIGIL_CACHE_DIR/k8s-build/.karpenter.lock"
exec 9>"$LOCK"
if ! flock -n 9; then
  log "another build is running; waiting for lock $LOCK"
  flock 9
fi
# Whoever held the lock may have built everything meanwhile.
if done_already; then finish; exit 0; fi

START=$(date +%s)

if [[ -x "$KARPENTER_BIN" && "${VIGIL_FORCE_BUILD:-0}" != 1 ]]; then
  log "cached: $KARPENTER_BIN"
else
  t0=$(date +%s)
  mkdir -p "$(dirname "$KARPENTER_BIN")"
  log "compiling karpenter-vigil (sigs.k8s.io/karpenter ${KARPENTER_VERSION}; minutes on a cold cache) ..."
  (cd "$WRAP" && CGO_ENABLED=0 go build -ldflags "-s -w" -o "$KARPENTER_BIN.tmp" .) \
    || { rm -f "$KARPENTER_BIN.tmp"; die "karpenter-vigil build failed"; }
  mv -f "$KARPENTER_BIN.tmp" "$KARPENTER_BIN"
  # Builds of earlier wrapper sources are dead weight now.
  find "$VIGIL_CACHE_DIR/k8s-bin" -maxdepth 1 -name 'karpenter-*' ! -path "$(dirname "$KARPENTER_BIN")" -exec rm -rf {} +
  log "karpenter-vigil built in $(( $(date +%s) - t0 ))s -> $KARPENTER_BIN"
fi

if [[ -x "$KWOK_BIN" && "${VIGIL_FORCE_BUILD:-0}" != 1 ]]; then
  log "cached: $KWOK_BIN"
else
  t0=$(date +%s)
  tmpbin="$(mktemp -d "$VIGIL_CACHE_DIR/k8s-build/kwok-bin.XXXXXX")"
  mkdir -p "$(dirname "$KWOK_BIN")"
  log "building the KWOK controller ${KWOK_VERSION} ..."
  # sigs.k8s.io/kwok has no replace directives, so `go install mod@version` works.
  CGO_ENABLED=0 GOBIN="$tmpbin" go install -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" \
    || { rm -rf "$tmpbin"; die "kwok build failed"; }
  mv -f "$tmpbin/kwok" "$KWOK_BIN"
  rm -rf "$tmpbin"
  log "kwok built in $(( $(date +%s) - t0 ))s -> $KWOK_BIN"
fi

# Manifests from the module zips (already downloaded by the builds above).
KDIR="$(cd "$WRAP" && go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
WDIR="$(go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$KDIR/kwok/charts/crds" && -d "$KDIR/kwok/apis/crds" ]] || die "Karpenter CRDs not found under $KDIR"
[[ -d "$WDIR/kustomize/stage/node" ]] || die "KWOK stages not found under $WDIR"
rm -rf "$CRDS.tmp" "$STAGES.tmp"
mkdir -p "$CRDS.tmp" "$STAGES.tmp"
# The kwok chart's CRDs are pkg/apis/crds plus the karpenter.kwok.sh label rules the kwok provider needs.
cp "$KDIR"/kwok/charts/crds/*.yaml "$KDIR"/kwok/apis/crds/*.yaml "$CRDS.tmp/"
cp "$WDIR/kustomize/stage/node/fast/node-initialize.yaml" "$WDIR/kustomize/stage/node/heartbeat/node-heartbeat.yaml" "$STAGES.tmp/"
chmod -R u+w "$CRDS.tmp" "$STAGES.tmp"
rm -rf "$CRDS" "$STAGES"
mv "$CRDS.tmp" "$CRDS"
mv "$STAGES.tmp" "$STAGES"
printf '%s' "$WANT_STAMP" > "$STAMP"
log "CRDs: $(cd "$CRDS" && ls | tr '\n' ' ')"

"$KARPENTER_BIN" --help >/dev/null 2>&1 || die "built karpenter-vigil does not run ($KARPENTER_BIN --help)"
"$KWOK_BIN" --help >/dev/null 2>&1 || die "built kwok does not run"
log "done in $(( $(date +%s) - START ))s"
finish
