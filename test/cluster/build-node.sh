#!/usr/bin/env bash
# Builds (once) what `up.sh --with-node` runs beside the control plane, cached under .cache/k8s-bin/:
#
#   <K8S_VERSION>/kubelet, kube-scheduler, kube-controller-manager   (k8s.io/kubernetes, as build.sh)
#   <K8S_VERSION>/pause-image.tar   the sandbox image (docker-archive, tag vigil.local/pause:<K8S_VERSION>):
#                                   build/pause/linux/pause.c of the same module, static, gcc
#   crane-<CRANE_VERSION>/crane     go-containerregistry's crane: `crane registry serve` is the local
#                                   registry, `crane push` loads image tarballs into it
#
# containerd and runc are not built: Debian's containerd (1.6.20) installs in seconds where a
# containerd v2 build takes minutes, and its CRI v1 works with kubelet 1.34; runc comes with it.
# CNI plugins come from Debian's containernetworking-plugins (/usr/lib/cni).
# Env: VIGIL_FORCE_BUILD=1 rebuilds; VIGIL_CACHE_DIR, VIGIL_K8S_VERSION, VIGIL_CRANE_VERSION.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"

log() { printf '[build-node.sh] %s\n' "$*" >&2; }
die() { printf '[build-node.sh] ERROR: %s\n' "$*" >&2; exit 1; }

K8S_WRAP_NAME=node
# shellcheck source=build-lib.sh
source "$HERE/build-lib.sh"

cached() {
  [[ "${VIGIL_FORCE_BUILD:-0}" != 1 && -x "$KUBELET_BIN" && -x "$KUBE_SCHEDULER_BIN" && -x "$KUBE_CONTROLLER_MANAGER_BIN" \
    && -x "$CRANE_BIN" && -s "$PAUSE_TAR" ]]
}
if cached; then
  for b in "$KUBELET_BIN" "$KUBE_SCHEDULER_BIN" "$KUBE_CONTROLLER_MANAGER_BIN" "$CRANE_BIN" "$PAUSE_TAR"; do log "cached: $b"; done
  exit 0
fi
for tool in gcc podman; do command -v "$tool" >/dev/null 2>&1 || die "$tool is required"; done

build_lock node
START=$(date +%s)

build_crane() {
  if [[ -x "$CRANE_BIN" && "${VIGIL_FORCE_BUILD:-0}" != 1 ]]; then log "cached: $CRANE_BIN"; return 0; fi
  local t0; t0=$(date +%s)
  local tmpbin; tmpbin="$(mktemp -d "$VIGIL_CACHE_DIR/k8s-build/crane-bin.XXXXXX")"
  mkdir -p "$(dirname "$CRANE_BIN")"
  log "building crane ${CRANE_VERSION} ..."
  # The module root has no replace directives, so `go install mod/cmd@version` works.
  CGO_ENABLED=0 GOBIN="$tmpbin" go install \
    -ldflags "-s -w -X github.com/google/go-containerregistry/cmd/crane/cmd.Version=${CRANE_VERSION}" \
    "github.com/google/go-containerregistry/cmd/crane@${CRANE_VERSION}" \
    || { rm -rf "$tmpbin"; die "crane build failed"; }
  mv -f "$tmpbin/crane" "$CRANE_BIN"
  rm -rf "$tmpbin"
  log "crane built in $(( $(date +%s) - t0 ))s -> $CRANE_BIN"
}

# The sandbox image: pause.c from the kubernetes module (downloaded with the wrapper), static, in a
# one-file image with ENTRYPOINT /pause. podman runs on a throwaway storage root so the host's image
# store is untouched.
build_pause() {
  if [[ -s "$PAUSE_TAR" && "${VIGIL_FORCE_BUILD:-0}" != 1 ]]; then log "cached: $PAUSE_TAR"; return 0; fi
  local t0; t0=$(date +%s)
  k8s_wrapper
  local src; src="$(k8s_module_dir)/build/pause/linux/pause.c"
  [[ -f "$src" ]] || (cd "$K8S_WRAP" && go mod download "k8s.io/kubernetes@${K8S_VERSION}")
  [[ -f "$src" ]] || die "pause.c not found at $src"
  local tmp; tmp="$(mktemp -d "$VIGIL_CACHE_DIR/k8s-build/pause.XXXXXX")"
  mkdir -p "$tmp/rootfs"
  gcc -Os -Wall -Werror -static -DVERSION="${K8S_VERSION}-vigil" -o "$tmp/rootfs/pause" "$src" \
    || { rm -rf "$tmp"; die "pause.c did not compile"; }
  strip "$tmp/rootfs/pause"
  tar --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$tmp/rootfs" -cf "$tmp/layer.tar" pause
  # podman refuses a runroot longer than 50 characters, which a checkout deep in the filesystem
  # gives: the runroot goes under /tmp, removed with the rest.
  local run; run="$(mktemp -d /tmp/vigil-pause-run.XXXXXX)"
  local -a pm=(podman --root "$tmp/storage" --runroot "$run" --tmpdir "$tmp/tmp" --storage-driver vfs
    --events-backend none --cgroup-manager cgroupfs)
  "${pm[@]}" import --change 'ENTRYPOINT ["/pause"]' "$tmp/layer.tar" "$PAUSE_IMAGE" >/dev/null \
    && "${pm[@]}" save --format docker-archive -o "$tmp/pause-image.tar" "$PAUSE_IMAGE" \
    || { "${pm[@]}" system reset -f >/dev/null 2>&1 || true; rm -rf "$tmp" "$run"; die "podman import/save of the pause image failed"; }
  mkdir -p "$(dirname "$PAUSE_TAR")"
  mv -f "$tmp/pause-image.tar" "$PAUSE_TAR"
  "${pm[@]}" rmi -a -f >/dev/null 2>&1 || true
  rm -rf "$tmp" "$run"
  log "pause image built in $(( $(date +%s) - t0 ))s -> $PAUSE_TAR ($PAUSE_IMAGE)"
}

build_crane
build_pause
build_k8s_command kube-scheduler "$KUBE_SCHEDULER_BIN"
build_k8s_command kube-controller-manager "$KUBE_CONTROLLER_MANAGER_BIN"
build_k8s_command kubelet "$KUBELET_BIN"
for b in "$KUBELET_BIN" "$KUBE_SCHEDULER_BIN" "$KUBE_CONTROLLER_MANAGER_BIN"; do
  "$b" --version >&2 || die "built $(basename "$b") does not run"
done
"$CRANE_BIN" version >&2 || die "built crane does not run"
log "done in $(( $(date +%s) - START ))s"
