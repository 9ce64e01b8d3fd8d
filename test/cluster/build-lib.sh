# Shared by build.sh and build-node.sh: Go environment, a build lock, and building commands of
# k8s.io/kubernetes through a generated wrapper module. Source it after versions.sh and after
# defining log/die.
# shellcheck shell=bash

command -v go >/dev/null 2>&1 || die "go not found in PATH"

mkdir -p "$VIGIL_CACHE_DIR/go/mod" "$VIGIL_CACHE_DIR/go/build" "$VIGIL_CACHE_DIR/k8s-build"
export GOMODCACHE="$VIGIL_CACHE_DIR/go/mod"
export GOCACHE="$VIGIL_CACHE_DIR/go/build"
export GOFLAGS="-trimpath -buildvcs=false -mod=mod"
export GOTOOLCHAIN=local
export GOWORK=off
# Only go through the proxy; the checksum database still verifies modules.
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"

# build_lock NAME: serialise concurrent runs of one build script (several test files may call it at
# once). Each script has its own lock and its own wrapper module folder, so build.sh and
# build-node.sh may run side by side (Go's own caches are safe for concurrent use).
build_lock() {
  local lock="$VIGIL_CACHE_DIR/k8s-build/.lock${1:+-$1}"
  exec 9>"$lock"
  if ! flock -n 9; then
    log "another build is running; waiting for lock $lock"
    flock 9
  fi
}

# `go install k8s.io/kubernetes/cmd/kube-apiserver@v1.x` cannot work: k8s.io/kubernetes requires
# its staging modules at v0.0.0 and replaces them with ./staging/src/... . So generate a wrapper
# module whose replace block maps every staging module to its published v0.<minor>.<patch>
# (once per run; the commands one script builds share it). K8S_WRAP_NAME picks its folder.
K8S_WRAP=""
k8s_wrapper() {
  [[ -n "$K8S_WRAP" ]] && return 0
  local stagingv="v0.${K8S_VERSION#v1.}"
  local wrap="$VIGIL_CACHE_DIR/k8s-build/k8s-${K8S_VERSION}${K8S_WRAP_NAME:+-$K8S_WRAP_NAME}"
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

# The extracted k8s.io/kubernetes module source (after k8s_wrapper downloaded it).
k8s_module_dir() { echo "$GOMODCACHE/k8s.io/kubernetes@${K8S_VERSION}"; }

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
