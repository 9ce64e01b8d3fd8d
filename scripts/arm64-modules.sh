#!/usr/bin/env bash
# Puts the arm64 builds of the native npm packages beside the x64 ones in node_modules/, so the arm64
# Node (scripts/fetch-node.sh arm64, run under qemu by scripts/test-arm64.sh) loads the same koffi and
# tsx's esbuild as the x64 Node: koffi loads node_modules/@koromix/koffi-linux-${process.arch}, esbuild
# node_modules/@esbuild/linux-${arch}. npm ci installs only the host's (their package.json names a cpu).
#
# Each package is fetched with `npm pack` at the exact version package-lock.json pins, checked against
# the lockfile's integrity, and unpacked into node_modules/NAME. Idempotent: a package already there
# at that version is left alone. Harmless on x64 (the x64 Node never loads them). re2.node stays x64:
# on arm64 the agent runs user rules on re2js and says so. Progress goes to stderr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PKGS=(@koromix/koffi-linux-arm64 @esbuild/linux-arm64)

log() { printf '[arm64-modules] %s\n' "$*" >&2; }
die() { printf '[arm64-modules] ERROR: %s\n' "$*" >&2; exit 1; }

# "VERSION INTEGRITY" of node_modules/NAME in package-lock.json.
locked() {
  node -e 'const l = require("./package-lock.json").packages["node_modules/" + process.argv[1]];
    if (!l || !l.version || !l.integrity) process.exit(1); console.log(l.version + " " + l.integrity)' "$1"
}
installed() { node -e 'try { console.log(require(process.argv[1]).version) } catch { }' "$ROOT/node_modules/$1/package.json"; }

work=""
trap '[[ -z "$work" ]] || rm -rf "$work"' EXIT
for name in "${PKGS[@]}"; do
  read -r version integrity < <(locked "$name") || die "$name is not in package-lock.json"
  [[ "$(installed "$name")" == "$version" ]] && continue
  [[ -n "$work" ]] || work="$(mktemp -d "$ROOT/node_modules/.arm64.XXXXXX")"
  log "npm pack $name@$version"
  tgz="$(cd "$work" && npm pack "$name@$version" --silent)"
  algo="${integrity%%-*}"
  got="$algo-$(openssl dgst "-$algo" -binary "$work/$tgz" | base64 -w0)"
  [[ "$got" == "$integrity" ]] || die "$name@$version: integrity $got, expected $integrity (package-lock.json)"
  mkdir -p "$work/$name"
  tar -C "$work/$name" --strip-components=1 -xzf "$work/$tgz"
  rm -rf "node_modules/$name"
  mkdir -p "node_modules/$(dirname "$name")"
  mv "$work/$name" "node_modules/$name"
  log "$name@$version in node_modules/$name"
done
