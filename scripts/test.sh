#!/usr/bin/env bash
# The test command: check the generated catalog files, build dist/ (what bin/vigil.js runs, so the
# end-to-end tests exercise the shipped build), type-check everything, then run every test file
# with Node's built-in runner (Node 20 does not expand globs itself, so the shell does).
set -euo pipefail
cd "$(dirname "$0")/.."
npx tsx scripts/gen-catalog.ts --check
npm run -s build
npx tsc -p tsconfig.json
shopt -s globstar nullglob
files=(test/**/*.test.ts src/**/*.test.ts)
exec node --import tsx --test --test-concurrency=2 "${files[@]}" "$@"
