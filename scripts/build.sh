#!/usr/bin/env bash
# Builds dist/ and stamps it with the time the build STARTED: bin/vigil.js runs dist/ only while no
# source is newer than the stamp, so a source edited during the build makes it run from source.
# tsc type-checks src/ (no output); scripts/bundle.ts writes dist/ with esbuild (why: its header).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s.%N)
npx tsc -p tsconfig.build.json
npx tsx scripts/bundle.ts
date -u -d "@$start" +%FT%T.%3NZ > dist/.build-stamp
touch -d "@$start" dist/.build-stamp
