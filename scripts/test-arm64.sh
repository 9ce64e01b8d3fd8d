#!/usr/bin/env bash
# The arm64 native-code check (npm run test:arm64): the NVML and DCGM paths, through the arm64 build
# of koffi into the fake NVML / DCGM libraries compiled for aarch64 (native/compiler.ts), run by
# the arm64 Node under qemu's user mode on this amd64 machine. It proves the same findings come out
# on arm64 (NVIDIA Grace) as on amd64 — struct layouts, callbacks, worker threads — under emulation;
# its times are not performance figures.
#
# - the arm64 Node: scripts/fetch-node.sh arm64 (integrity-checked, cached under .cache/);
# - koffi's and esbuild's arm64 packages beside the x64 ones: scripts/arm64-modules.sh;
# - qemu-aarch64 registered in binfmt_misc by test/deploy/binfmt.sh and put back on exit, so the
#   test runner's per-file child processes (process.execPath, the arm64 Node) run under qemu too;
# - the same runner flags as scripts/test.sh, one file at a time (emulation is slow enough);
#   VIGIL_TEST_SLOWDOWN (default 8 here) stretches the waits in test/integration/nvml-helpers.ts
#   and the files' own `until` loops, and nvml-events' 100 ms Xid latency bound; never which findings
#   they expect.
#
# Needs root (binfmt_misc), qemu-user-static, gcc-aarch64-linux-gnu, libc6-arm64-cross (the arm64
# loader and libc under QEMU_LD_PREFIX). Arguments naming test files replace the list below; the
# others go to the runner (e.g. --test-name-pattern=REGEX).
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=(
  test/integration/nvml-events.test.ts      # the NVML event path (Xid, GPU lost, recovery action)
  test/integration/nvml-signals.test.ts     # the NVML poll path (remapped rows, ECC, PCIe, NVLink, clocks)
  test/integration/dcgm-channel.test.ts     # the DCGM policy channel (callbacks from DCGM's thread)
  test/integration/nvml-xid-policy.test.ts  # the Xid policy fed by NVML events
)
args=() picked=()
for a in "$@"; do if [[ "$a" == *.test.ts ]]; then picked+=("$a"); else args+=("$a"); fi; done
((${#picked[@]})) && FILES=("${picked[@]}")
for bin in qemu-aarch64-static aarch64-linux-gnu-gcc; do
  command -v "$bin" >/dev/null || { echo "[test-arm64] $bin not installed (qemu-user-static, gcc-aarch64-linux-gnu)" >&2; exit 1; }
done
export QEMU_LD_PREFIX="${QEMU_LD_PREFIX:-/usr/aarch64-linux-gnu}"
[[ -e "$QEMU_LD_PREFIX/lib/ld-linux-aarch64.so.1" ]] || { echo "[test-arm64] no arm64 loader under $QEMU_LD_PREFIX (libc6-arm64-cross)" >&2; exit 1; }
node_arm64="$(bash scripts/fetch-node.sh arm64)/bin/node"
bash scripts/arm64-modules.sh

state="$(mktemp)"
trap 'bash test/deploy/binfmt.sh restore "$state"; rm -f "$state"' EXIT
bash test/deploy/binfmt.sh enable "$state"

export VIGIL_TEST_SLOWDOWN="${VIGIL_TEST_SLOWDOWN:-8}"
echo "[test-arm64] $("$node_arm64" -p 'process.version + " " + process.arch') under qemu-aarch64 (VIGIL_TEST_SLOWDOWN=$VIGIL_TEST_SLOWDOWN)" >&2
"$node_arm64" --import tsx --import ./test/helpers/leak-check.ts --test --test-concurrency=1 --test-timeout=600000 "${FILES[@]}" ${args[@]+"${args[@]}"}
