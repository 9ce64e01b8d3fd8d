#!/usr/bin/env bash
# The test command: check the generated catalog files, build dist/ (what bin/vigil.js runs, so the
# end-to-end tests exercise the shipped build), type-check, lint and format-check everything, then
# run every test file with Node's built-in runner (Node 20 does not expand globs itself, so the shell does).
#
# Nothing may hang the run. Each file runs in its own process, and:
# - Node's --test-timeout bounds each file as a whole (the runner kills its process, even one
#   stuck in a busy loop) as well as each test that sets no timeout of its own: 10 minutes, 40 for
#   test/deploy/ (it builds a container image), which runs after the others for that reason;
# - test/helpers/leak-check.ts fails a file whose process is still held open (a server, socket,
#   child process or timer left behind) a minute after its tests ended, and names what holds it.
# Extra arguments go to both runs (e.g. --test-name-pattern=REGEX).
set -euo pipefail
cd "$(dirname "$0")/.."
npx tsx scripts/gen-catalog.ts --check
npm run -s build
npx tsc -p tsconfig.json
npx eslint . --max-warnings 0
npx prettier --check 'src/**/*.ts' 'test/**/*.ts' 'bench/**/*.ts' 'scripts/**/*.ts'
shopt -s globstar nullglob
files=() slow=() ring=()
for f in test/**/*.test.ts src/**/*.test.ts; do
  if [[ "$f" == test/deploy/* ]]; then slow+=("$f")
  # These overwrite the whole kernel ring on purpose, or (http-connections) hold 20,000 connections
  # and most of the CPU for a minute, or (karpenter-repair) wait on Karpenter and KWOK to bring up a
  # replacement node, which took over 120 s beside other files on a 2-core machine (4/4 alone, in
  # 42-56 s each): run them alone so no other file loses records or time.
  elif [[ "$f" == test/integration/burst.test.ts || "$f" == test/integration/blind-sources.test.ts ||
    "$f" == test/integration/http-connections.test.ts || "$f" == test/integration/karpenter-repair.test.ts ]]; then ring+=("$f")
  else files+=("$f"); fi
done
runner=(node --import tsx --import ./test/helpers/leak-check.ts --test --test-concurrency=2)
rc=0
"${runner[@]}" --test-timeout=600000 "${files[@]}" "$@" || rc=$?
if ((${#ring[@]})); then "${runner[@]/--test-concurrency=2/--test-concurrency=1}" --test-timeout=600000 "${ring[@]}" "$@" || rc=$?; fi
if ((${#slow[@]})); then "${runner[@]}" --test-timeout=2400000 "${slow[@]}" "$@" || rc=$?; fi
exit "$rc"
