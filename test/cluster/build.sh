#!/usr/bin/env bash
# Builds (once) a real kube-apiserver and the kine storage backend (etcd API over SQLite)
# from the Go module proxy, and caches the binaries under .cache/k8s-bin/; also kubectl (same
# k8s.io/kubernetes version) and helm v4, which the deploy tests (test/deploy) drive.
#
#   .cache/k8s-bin/<K8S_VERSION>/kube-apiserver
#   .cache/k8s-bin/<K8S_VERSION>/kubectl
#   .cache/k8s-bin/kine-<KINE_VERSION>/kine
#   .cache/k8s-bin/helm-<HELM_VERSION>/helm
#
# Reuses cached binaries when present. Go module/build caches live in .cache/go so CI can
# cache that folder. Env overrides:
#   VIGIL_K8S_VERSION   (default v1.34.4)   k8s.io/kubernetes version; staging modules use v0.<minor>.<patch>
#   VIGIL_KINE_VERSION  (default v0.17.5)   github.com/k3s-io/kine version
#   VIGIL_HELM_VERSION  (default v4.3.2)    helm.sh/helm/v4 version
#   VIGIL_CACHE_DIR     (default <repo>/.cache)
#   VIGIL_FORCE_BUILD=1 rebuild even if cached
# Prints the two binary paths on stdout (one per line, apiserver first); progress goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"

log() { printf '[build.sh] %s\n' "$*" >&2; }
die() { printf '[build.sh] ERROR: %s\n' "$*" >&2; exit 1; }

# shellcheck source=build-lib.sh
source "$HERE/build-lib.sh"

if [[ -x "$KUBE_APISERVER_BIN" && -x "$KINE_BIN" && -x "$KUBECTL_BIN" && -x "$HELM_BIN" && "${VIGIL_FORCE_BUILD:-0}" != 1 ]]; then
  for b in "$KUBE_APISERVER_BIN" "$KINE_BIN" "$KUBECTL_BIN" "$HELM_BIN"; do log "cached: $b"; done
  printf '%s\n%s\n' "$KUBE_APISERVER_BIN" "$KINE_BIN"
  exit 0
fi

build_lock

START=$(date +%s)

build_kine() {
  if [[ -x "$KINE_BIN" && "${VIGIL_FORCE_BUILD:-0}" != 1 ]]; then
    log "cached: $KINE_BIN"; return 0
  fi
  command -v gcc >/dev/null 2>&1 || die "gcc not found: kine's SQLite driver (mattn/go-sqlite3) needs cgo"
  local t0; t0=$(date +%s)
  local out; out="$(dirname "$KINE_BIN")"
  mkdir -p "$out"
  local tmpbin; tmpbin="$(mktemp -d "$VIGIL_CACHE_DIR/k8s-build/kine-bin.XXXXXX")"
  log "building kine ${KINE_VERSION} (cgo sqlite) ..."
  # kine has no replace directives in its go.mod at this version, so `go install mod@version` works.
  CGO_ENABLED=1 GOBIN="$tmpbin" go install \
    -tags "sqlite_unlock_notify,sqlite_stat4,sqlite_math_functions" \
    -ldflags "-s -w -X github.com/k3s-io/kine/pkg/version.Version=${KINE_VERSION}" \
    "github.com/k3s-io/kine@${KINE_VERSION}" \
    || { rm -rf "$tmpbin"; die "kine build failed"; }
  mv -f "$tmpbin/kine" "$KINE_BIN"
  rm -rf "$tmpbin"
  log "kine built in $(( $(date +%s) - t0 ))s -> $KINE_BIN"
}

# build_k8s_command (build-lib.sh): k8s.io/kubernetes commands through the generated wrapper module.

# helm v4 is its own module without replace directives, so `go install mod@version` works.
build_helm() {
  if [[ -x "$HELM_BIN" && "${VIGIL_FORCE_BUILD:-0}" != 1 ]]; then
    log "cached: $HELM_BIN"; return 0
  fi
  local t0; t0=$(date +%s)
  local tmpbin; tmpbin="$(mktemp -d "$VIGIL_CACHE_DIR/k8s-build/helm-bin.XXXXXX")"
  mkdir -p "$(dirname "$HELM_BIN")"
  log "building helm ${HELM_VERSION} ..."
  CGO_ENABLED=0 GOBIN="$tmpbin" go install \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
    "helm.sh/helm/v4/cmd/helm@${HELM_VERSION}" \
    || { rm -rf "$tmpbin"; die "helm build failed"; }
  mv -f "$tmpbin/helm" "$HELM_BIN"
  rm -rf "$tmpbin"
  log "helm built in $(( $(date +%s) - t0 ))s -> $HELM_BIN"
}

build_kine
build_k8s_command kube-apiserver "$KUBE_APISERVER_BIN"
"$KUBE_APISERVER_BIN" --version >&2 || die "built kube-apiserver does not run"
# Operator tools for test/deploy (helm lint/template, `kubectl vigil status`).
build_k8s_command kubectl "$KUBECTL_BIN"
build_helm
"$KUBECTL_BIN" version --client >&2 || die "built kubectl does not run"
"$HELM_BIN" version >&2 || die "built helm does not run"
log "done in $(( $(date +%s) - START ))s"
printf '%s\n%s\n' "$KUBE_APISERVER_BIN" "$KINE_BIN"
