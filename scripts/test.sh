#!/usr/bin/env bash
# The test command: regenerate-check the catalog, type-check, then run every test file with
# Node's built-in runner (Node 20 does not expand globs itself, so the shell does).
set -euo pipefail
cd "$(dirname "$0")/.."
npx tsx scripts/gen-catalog.ts --check
npx tsc -p tsconfig.json
shopt -s globstar nullglob
files=(test/**/*.test.ts src/**/*.test.ts)
exec node --import tsx --test --test-concurrency=2 "${files[@]}" "$@"
