#!/usr/bin/env bash
# The smoke set (`npm run test:smoke`): the image ships Node 24 and CI runs the whole suite there,
# while the README's two commands run on whatever Node a developer has, 20 on this machine. These
# files cover what that path needs: the CLI, the standalone agent on the real kernel log, scan, one
# Kubernetes test (a real API server), and native RE2 or its re2js fallback (CI runs this set on
# Node 20 with node_modules installed for Node 24, where re2.node cannot load).
# Extra arguments go to the runner (e.g. --test-name-pattern=REGEX).
set -euo pipefail
cd "$(dirname "$0")/.."
files=(
  test/integration/cli.test.ts
  test/e2e/standalone-kmsg.test.ts
  test/integration/scan-cli.test.ts
  test/integration/kubernetes-conditions.test.ts
  test/integration/re2-engine.test.ts
)
echo "smoke set on Node $(node --version): ${files[*]}" >&2
exec node --import tsx --import ./test/helpers/leak-check.ts --test --test-concurrency=2 --test-timeout=600000 "${files[@]}" "$@"
