#!/usr/bin/env bash
# Checks Vigil's NVML path against nvidia-smi on a GPU node, field by field, and runs the NVML
# event loop for a short window. One line per check (PASS/FAIL/SKIP), then a summary.
#
#   bench/gpu/gpu-check.sh [--fake] [--window SECONDS] [--library PATH] [--sys-root DIR] [--keep]
#
# On a GPU node: run it without arguments (needs Node, this repository with `npm ci` done, and the
# driver's nvidia-smi). Read-only: it queries NVML and nvidia-smi and changes nothing.
# --fake: STAND-IN run for machines without a GPU: the fake NVML library (native/fake-nvml) and a
# fake nvidia-smi (bench/gpu/fake-nvidia-smi.js) driven by one scenario (bench/gpu/fake-scenario.ts),
# plus two injected events. Exit: 0 every check passes, 1 a check fails, 2 the check could not run.
# Finishes in well under 5 minutes (each step is time-boxed; the event window defaults to 20 s).
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 2
LIBRARY=""
SYSROOT=""
KEEP=0
FAKE=0
WINDOW=20
while [ $# -gt 0 ]; do
  case "$1" in
    --fake) FAKE=1; shift ;;
    --window) WINDOW="${2:-20}"; shift 2 ;;
    --library) LIBRARY="${2:-}"; shift 2 ;;
    --sys-root) SYSROOT="${2:-}"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

if ! command -v node >/dev/null 2>&1; then echo "node not found" >&2; exit 2; fi
if [ ! -d node_modules/tsx ] || [ ! -d node_modules/koffi ]; then echo "run npm ci first (node_modules/tsx or koffi missing)" >&2; exit 2; fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/vigil-gpu-check.XXXXXX")"
if [ "$KEEP" = 0 ]; then trap 'rm -rf "$WORK"' EXIT; fi
echo "work dir: $WORK"
TO=""
command -v timeout >/dev/null 2>&1 && TO="timeout -k 5"

if [ "$FAKE" = 1 ]; then
  echo "STAND-IN RUN: fake NVML library and fake nvidia-smi (no GPU on this machine)"
  SCEN="$($TO 120 node --import tsx bench/gpu/fake-scenario.ts "$WORK")" || { echo "cannot set up the fake scenario" >&2; exit 2; }
  eval "$SCEN"
  export FAKE_NVML_CONFIG
  mkdir -p "$WORK/bin"
  ln -s "$PWD/bench/gpu/fake-nvidia-smi.js" "$WORK/bin/nvidia-smi"
  export PATH="$WORK/bin:$PATH"
fi
ARGS=()
[ -n "$LIBRARY" ] && ARGS+=(--library "$LIBRARY")
[ -n "$SYSROOT" ] && ARGS+=(--sys-root "$SYSROOT")

# 1. Vigil's one-shot view (the agent's monitor, events off).
$TO 120 node bin/vigil.js gpu --json "${ARGS[@]}" >"$WORK/vigil.json" 2>"$WORK/vigil.err"
echo "vigil gpu --json: exit $? (0 ok, 1 a check fails, 2 NVML unusable, 3 no NVIDIA GPU)"

# 2. nvidia-smi's view: everything in one XML query, NVLink state from `nvlink -s`.
if command -v nvidia-smi >/dev/null 2>&1; then
  $TO 120 nvidia-smi -q -x >"$WORK/smi.xml" 2>"$WORK/smi.err" || echo "nvidia-smi -q -x failed: $(head -c 300 "$WORK/smi.err")"
  $TO 60 nvidia-smi nvlink -s >"$WORK/smi-nvlink.txt" 2>/dev/null || true
else
  echo "nvidia-smi not found: comparing nothing, checking Vigil alone"
fi

# 3. The event loop for a short window (with --fake, two events are injected into the stand-in).
INJECT=()
[ "$FAKE" = 1 ] && INJECT+=(--inject)
$TO $((WINDOW + 60)) node --import tsx bench/gpu/event-window.ts --seconds "$WINDOW" "${ARGS[@]}" "${INJECT[@]}" >"$WORK/events.json" 2>"$WORK/events.err"

# 4. One line per check.
echo
node bench/gpu/compare.js "$WORK"
