#!/usr/bin/env bash
# Builds (once) node-problem-detector (NPD), the peer agent of `npm run bench:compare`, from its Go
# module through the Go module proxy, and caches the binary:
#
#   .cache/npd-bin/<NPD_VERSION>/node-problem-detector
#
# Builds through a small wrapper module (see below). Build tags leave out what the benchmark does not use (the journald
# watcher is opt-in via the `journald` tag and needs cgo + systemd headers, so it is simply not
# enabled); the kmsg and filelog watchers of the system-log monitor stay in.
# Env overrides:
#   VIGIL_NPD_VERSION  (default v1.34.0)  k8s.io/node-problem-detector version
#   VIGIL_CACHE_DIR    (default <repo>/.cache)
#   VIGIL_FORCE_BUILD=1 rebuild even if cached
# Prints the binary path on stdout; progress goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
NPD_VERSION="${VIGIL_NPD_VERSION:-v1.34.0}"
VIGIL_CACHE_DIR="${VIGIL_CACHE_DIR:-$REPO/.cache}"
NPD_BIN="$VIGIL_CACHE_DIR/npd-bin/${NPD_VERSION}/node-problem-detector"

log() { printf '[build-npd.sh] %s\n' "$*" >&2; }
die() { printf '[build-npd.sh] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ -x "$NPD_BIN" && "${VIGIL_FORCE_BUILD:-0}" != 1 ]]; then
  log "cached: $NPD_BIN"
  printf '%s\n' "$NPD_BIN"
  exit 0
fi
command -v go >/dev/null 2>&1 || die "go not found in PATH"

mkdir -p "$VIGIL_CACHE_DIR/go/mod" "$VIGIL_CACHE_DIR/go/build" "$VIGIL_CACHE_DIR/npd-build"
export GOMODCACHE="$VIGIL_CACHE_DIR/go/mod"
export GOCACHE="$VIGIL_CACHE_DIR/go/build"
export GOFLAGS="-trimpath -buildvcs=false -mod=mod"
export GOTOOLCHAIN=local
export GOWORK=off
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"

# Serialise concurrent builds.
exec 9>"$VIGIL_CACHE_DIR/npd-build/.lock"
if ! flock -n 9; then
  log "another build is running; waiting for the lock"
  flock 9
fi
if [[ -x "$NPD_BIN" && "${VIGIL_FORCE_BUILD:-0}" != 1 ]]; then
  log "cached (built while waiting): $NPD_BIN"
  printf '%s\n' "$NPD_BIN"
  exit 0
fi

t0=$(date +%s)
# `go install mod/cmd@version` asks the proxy for the module's version list (deprecation check),
# which the proxy refuses for this module; a wrapper module that requires the exact version only
# fetches served versions. NPD's own go.mod has no replace directives, so none are needed here.
wrap="$VIGIL_CACHE_DIR/npd-build/npd-${NPD_VERSION}"
rm -rf "$wrap"; mkdir -p "$wrap"
gomod="$(cd "$wrap" && go mod download -json "k8s.io/node-problem-detector@${NPD_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
[[ -n "$gomod" && -f "$gomod" ]] || die "could not download k8s.io/node-problem-detector@${NPD_VERSION} from the module proxy"
grep -q '^replace' "$gomod" && die "NPD ${NPD_VERSION} go.mod has replace directives; the wrapper must copy them"
{
  echo "module vigil.local/npd-wrapper"
  echo
  grep -m1 '^go ' "$gomod"
  echo
  echo "require k8s.io/node-problem-detector ${NPD_VERSION}"
} > "$wrap/go.mod"
tmpbin="$(mktemp -d "$VIGIL_CACHE_DIR/npd-build/bin.XXXXXX")"
trap 'rm -rf "$tmpbin"' EXIT
log "building k8s.io/node-problem-detector ${NPD_VERSION} (slow on a cold cache) ..."
(cd "$wrap" && CGO_ENABLED=0 go build \
  -tags "disable_custom_plugin_monitor disable_system_stats_monitor disable_stackdriver_exporter" \
  -ldflags "-s -w -X k8s.io/node-problem-detector/pkg/version.version=${NPD_VERSION}" \
  -o "$tmpbin/nodeproblemdetector" k8s.io/node-problem-detector/cmd/nodeproblemdetector) \
  || die "node-problem-detector build failed"
mkdir -p "$(dirname "$NPD_BIN")"
mv -f "$tmpbin/nodeproblemdetector" "$NPD_BIN"
"$NPD_BIN" --version >&2 || die "built node-problem-detector does not run"
log "built in $(( $(date +%s) - t0 ))s -> $NPD_BIN"
printf '%s\n' "$NPD_BIN"
