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

command -v go >/dev/null 2>&1 || die "go not found in PATH (need Go >= 1.26 for kine ${KINE_VERSION})"

if [[ -x "$KUBE_APISERVER_BIN" && -x "$KINE_BIN" && -x "$KUBECTL_BIN" && -x "$HELM_BIN" && "${VIGIL_FORCE_BUILD:-0}" != 1 ]]; then
  for b in "$KUBE_APISERVER_BIN" "$KINE_BIN" "$KUBECTL_BIN" "$HELM_BIN"; do log "cached: $b"; done
  printf '%s\n%s\n' "$KUBE_APISERVER_BIN" "$KINE_BIN"
  exit 0
fi

mkdir -p "$VIGIL_CACHE_DIR/go/mod" "$VIGIL_CACHE_DIR/go/build" "$VIGIL_CACHE_DIR/k8s-build"
export GOMODCACHE="$VIGIL_CACHE_DIR/go/mod"
export GOCACHE="$VIGIL_CACHE_DIR/go/build"
export GOFLAGS="-trimpath -buildvcs=false -mod=mod"
export GOTOOLCHAIN=local
export GOWORK=off
# Only go through the proxy; the checksum database still verifies modules.
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"

# Serialise concurrent builds (several test files may call build.sh at once).
LOCK="$VIGIL_CACHE_DIR/k8s-build/.lock"
exec 9>"$LOCK"
if ! flock -n 9; then
  log "another build is running; waiting for lock $LOCK"
  flock 9
fi

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

# `go install k8s.io/kubernetes/cmd/kube-apiserver@v1.x` cannot work: k8s.io/kubernetes requires
# its staging modules at v0.0.0 and replaces them with ./staging/src/... . So generate a wrapper
# module whose replace block maps every staging module to its published v0.<minor>.<patch>
# (once per run; kube-apiserver and kubectl share it).
K8S_WRAP=""
k8s_wrapper() {
  [[ -n "$K8S_WRAP" ]] && return 0
  local stagingv="v0.${K8S_VERSION#v1.}"
  local wrap="$VIGIL_CACHE_DIR/k8s-build/k8s-${K8S_VERSION}"
  rm -rf "$wrap"; mkdir -p "$wrap"
  log "downloading k8s.io/kubernetes@${K8S_VERSION} go.mod ..."
  local gomod
  gomod="$(cd "$wrap" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [[ -n "$gomod" && -f "$gomod" ]] || die "could not download k8s.io/kubernetes@${K8S_VERSION} (is it on the proxy? try 'go list -m -versions k8s.io/kubernetes')"
  local goline godebug replaces
  goline="$(grep -m1 '^go ' "$gomod")"
  godebug="$(grep '^godebug ' "$gomod" || true)"
  replaces="$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._/-]*\) => \./staging/src/\1$#\t\1 => \1 '"$stagingv"'#p' "$gomod")"
  local n; n="$(printf '%s\n' "$replaces" | grep -c . || true)"
  [[ "$n" -ge 20 ]] || die "expected ~30 staging replace lines in $gomod, found $n"
  log "wrapper module: $n staging modules -> $stagingv"
  {
    echo "module vigil.local/kubernetes-wrapper"
    echo
    echo "$goline"
    [[ -n "$godebug" ]] && { echo; echo "$godebug"; }
    echo
    echo "require k8s.io/kubernetes ${K8S_VERSION}"
    echo
    echo "replace ("
    printf '%s\n' "$replaces"
    echo ")"
  } > "$wrap/go.mod"
  K8S_WRAP="$wrap"
}

# build_k8s_command CMD BIN: compiles k8s.io/kubernetes/cmd/CMD at K8S_VERSION into BIN.
build_k8s_command() {
  local cmd="$1" bin="$2"
  if [[ -x "$bin" && "${VIGIL_FORCE_BUILD:-0}" != 1 ]]; then
    log "cached: $bin"; return 0
  fi
  local t0; t0=$(date +%s)
  k8s_wrapper
  log "resolving module graph for ${cmd} (go get) ..."
  (cd "$K8S_WRAP" && go get "k8s.io/kubernetes/cmd/${cmd}@${K8S_VERSION}") || die "go get failed (see above)"
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local ld="-s -w"
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
    ld+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p "$(dirname "$bin")"
  log "compiling ${cmd} ${K8S_VERSION} (slow on a cold cache: minutes on 2 cores) ..."
  (cd "$K8S_WRAP" && CGO_ENABLED=0 go build -ldflags "$ld" -o "$bin.tmp" "k8s.io/kubernetes/cmd/${cmd}") \
    || { rm -f "$bin.tmp"; die "${cmd} build failed"; }
  mv -f "$bin.tmp" "$bin"
  log "${cmd} built in $(( $(date +%s) - t0 ))s -> $bin"
}

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
