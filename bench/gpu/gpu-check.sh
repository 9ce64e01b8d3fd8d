#!/usr/bin/env bash
# Runs Vigil's NVML path on a real NVIDIA GPU node and compares it with nvidia-smi.
#
#   bench/gpu/gpu-check.sh [--library /path/to/libnvidia-ml.so.1] [--sys-root DIR] [--keep]
#
# (--library and --sys-root exist to exercise the script against the fake NVML library; on a GPU
# node run it without arguments. --keep leaves the raw outputs in the work dir.)
# Needs only Node and this repository (npm ci done); nvidia-smi is used for the comparison when
# present. Prints Vigil's inventory next to nvidia-smi's, a line per compared value, and every
# check's result. Exit: 0 all compared values agree, 1 a mismatch, 2 Vigil could not run.
# Read-only: it queries NVML and nvidia-smi, it changes nothing on the GPUs.
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 2
LIBRARY=""
SYSROOT=""
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --library) LIBRARY="${2:-}"; shift 2 ;;
    --sys-root) SYSROOT="${2:-}"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

if ! command -v node >/dev/null 2>&1; then echo "node not found" >&2; exit 2; fi
if [ ! -d node_modules/tsx ] || [ ! -d node_modules/koffi ]; then echo "run npm ci first (node_modules/tsx or koffi missing)" >&2; exit 2; fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/vigil-gpu-check.XXXXXX")"
if [ "$KEEP" = 0 ]; then trap 'rm -rf "$WORK"' EXIT; fi
echo "work dir: $WORK"

# ---------------------------------------------------------------- 1. Vigil
LIBARGS=()
[ -n "$LIBRARY" ] && LIBARGS+=(--library "$LIBRARY")
[ -n "$SYSROOT" ] && LIBARGS+=(--sys-root "$SYSROOT")
# Time-boxed: a hung NVML call is reported by Vigil's watchdog, but never let the check hang.
TO=""
command -v timeout >/dev/null 2>&1 && TO="timeout 120"
$TO node bin/vigil.js gpu --json "${LIBARGS[@]}" >"$WORK/vigil.json" 2>"$WORK/vigil.err"
VRC=$?
if ! node -e 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))' "$WORK/vigil.json" 2>/dev/null; then
  # `vigil gpu` not wired into the CLI (yet): call the command module directly.
  echo "note: 'vigil gpu --json' gave no JSON (rc $VRC: $(head -c 300 "$WORK/vigil.err")); calling runGpuCommand directly"
  VIGIL_LIBRARY="$LIBRARY" VIGIL_SYSROOT="$SYSROOT" $TO node --import tsx --input-type=module -e '
    import { runGpuCommand } from "./src/cli/gpu-command.ts";
    const library = process.env.VIGIL_LIBRARY || undefined;
    const sysRoot = process.env.VIGIL_SYSROOT || undefined;
    process.exitCode = await runGpuCommand({ json: true, ...(library ? { library } : {}), ...(sysRoot ? { sysRoot } : {}) });
  ' >"$WORK/vigil.json" 2>"$WORK/vigil.err"
  VRC=$?
fi
if ! node -e 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))' "$WORK/vigil.json" 2>/dev/null; then
  echo "Vigil did not produce a JSON report (rc $VRC):" >&2
  cat "$WORK/vigil.err" >&2
  exit 2
fi
echo "vigil gpu --json exit code: $VRC (0 ok, 1 a check fails, 2 NVML unusable, 3 no NVIDIA GPU)"

# ---------------------------------------------------------------- 2. nvidia-smi
HAVE_SMI=0
if command -v nvidia-smi >/dev/null 2>&1; then
  HAVE_SMI=1
  nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,serial,driver_version --format=csv,noheader >"$WORK/smi-id.csv" 2>"$WORK/smi.err" || HAVE_SMI=0
  # One query per field: older nvidia-smi rejects names it does not know (e.g. clocks_event_reasons).
  for f in temperature.gpu pcie.link.width.current pcie.link.width.max pcie.link.gen.max \
           clocks_event_reasons.active clocks_throttle_reasons.active ecc.errors.uncorrected.volatile.total \
           retired_pages.pending; do
    nvidia-smi --query-gpu=index,"$f" --format=csv,noheader,nounits >"$WORK/smi-field-$f.csv" 2>/dev/null || rm -f "$WORK/smi-field-$f.csv"
  done
  nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure --format=csv,noheader >"$WORK/smi-remap.csv" 2>/dev/null || rm -f "$WORK/smi-remap.csv"
  nvidia-smi -q -d TEMPERATURE >"$WORK/smi-temp.txt" 2>/dev/null || rm -f "$WORK/smi-temp.txt"
  nvidia-smi nvlink -s >"$WORK/smi-nvlink.txt" 2>/dev/null || rm -f "$WORK/smi-nvlink.txt"
  nvidia-smi -q >"$WORK/smi-q.txt" 2>/dev/null || true
else
  echo "note: nvidia-smi not found; printing Vigil's view only"
fi

# ---------------------------------------------------------------- 3. compare and print
HAVE_SMI=$HAVE_SMI node --input-type=module - "$WORK" <<'EOF'
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
const dir = process.argv[2];
const v = JSON.parse(readFileSync(join(dir, 'vigil.json'), 'utf8'));
const read = (f) => (existsSync(join(dir, f)) ? readFileSync(join(dir, f), 'utf8') : null);
const na = (s) => s === undefined || s === null || /^\[?(N\/A|Not Supported|Unknown Error)\]?$/i.test(String(s).trim());
const norm = (pci) => {
  const m = /^(?:pci:)?([0-9a-f]{1,8}):([0-9a-f]{1,2}):([0-9a-f]{1,2})(?:\.[0-7])?$/i.exec(String(pci).trim());
  return m ? `${m[1].slice(-4).padStart(4, '0')}:${m[2].padStart(2, '0')}:${m[3].padStart(2, '0')}`.toLowerCase() : String(pci);
};
const csv = (text) => (text ?? '').split('\n').filter((l) => l.trim()).map((l) => l.split(',').map((x) => x.trim()));
let mismatches = 0;
let compared = 0;
const cmp = (what, ours, theirs, eq = (a, b) => String(a) === String(b)) => {
  if (na(theirs) || ours === null || ours === undefined) {
    console.log(`  n/a   ${what}: vigil=${ours ?? 'n/a'} nvidia-smi=${theirs ?? 'n/a'}`);
    return;
  }
  compared++;
  const ok = eq(ours, theirs);
  if (!ok) mismatches++;
  console.log(`  ${ok ? 'MATCH' : 'DIFF '} ${what}: vigil=${ours} nvidia-smi=${theirs}`);
};

console.log(`\n== Vigil: state ${v.state}, library ${v.library}, driver ${v.driverVersion ?? 'unknown'}`);
console.log(`   NVIDIA PCI functions ${v.pciFunctions.length}, NVML count ${v.nvmlCount}, expected ${v.expectedCount}`);
if (v.missingSymbols?.length) console.log(`   missing NVML symbols: ${v.missingSymbols.join(', ')}`);
for (const g of v.gpus) console.log(`   GPU ${g.index}: ${g.uuid} ${g.pci} ${g.name} serial ${g.serial ?? 'n/a'}`);

if (process.env.HAVE_SMI === '1') {
  const ids = csv(read('smi-id.csv'));
  console.log(`\n== Inventory vs nvidia-smi (${ids.length} GPUs)`);
  cmp('GPU count', v.nvmlCount, ids.length);
  const field = (name) => new Map(csv(read(`smi-field-${name}.csv`)).map(([i, val]) => [Number(i), val]));
  const temp = field('temperature.gpu');
  const width = field('pcie.link.width.current');
  const maxWidth = field('pcie.link.width.max');
  const maxGen = field('pcie.link.gen.max');
  const reasons = existsSync(join(dir, 'smi-field-clocks_event_reasons.active.csv')) ? field('clocks_event_reasons.active') : field('clocks_throttle_reasons.active');
  const ecc = field('ecc.errors.uncorrected.volatile.total');
  const remap = new Map(csv(read('smi-remap.csv')).map(([bus, pending, failure]) => [norm(bus), { pending, failure }]));
  // nvidia-smi -q -d TEMPERATURE: per-GPU blocks headed "GPU 00000000:18:00.0".
  const thresholds = new Map();
  for (const block of (read('smi-temp.txt') ?? '').split(/^GPU /m).slice(1)) {
    const bus = norm(block.split('\n')[0]);
    const num = (re) => (re.exec(block)?.[1] ?? null);
    thresholds.set(bus, { shutdown: num(/GPU Shutdown Temp\s*:\s*(\d+)/), slowdown: num(/GPU Slowdown Temp\s*:\s*(\d+)/) });
  }
  // nvidia-smi nvlink -s: "GPU 0: ... (UUID: GPU-...)" then "Link N: <speed>" or "Link N: <inactive>".
  const nvlink = new Map();
  for (const block of (read('smi-nvlink.txt') ?? '').split(/^GPU (?=\d+:)/m).slice(1)) {
    const idx = Number(block.split(':')[0]);
    const links = block.match(/Link \d+:.*$/gm) ?? [];
    nvlink.set(idx, { links: links.length, active: links.filter((l) => !/inactive/i.test(l)).length });
  }
  for (const [idx, uuid, name, bus, serial, driver] of ids) {
    const i = Number(idx);
    const g = v.gpus.find((x) => x.index === i);
    const s = v.samples?.[i];
    console.log(`\n-- GPU ${i} (${uuid})`);
    if (!g) {
      mismatches++;
      console.log('  DIFF  Vigil has no GPU at this index');
      continue;
    }
    cmp('uuid', g.uuid, uuid);
    cmp('name', g.name, name);
    cmp('pci (normalised)', g.pci, norm(bus));
    cmp('serial', g.serial, serial);
    cmp('driver version', g.driverVersion, driver);
    if (!s) {
      console.log('  n/a   no health sample from Vigil for this GPU (lost, hung or skipped)');
      continue;
    }
    cmp('temperature °C (±3)', s.temperature.current, temp.get(i), (a, b) => Math.abs(Number(a) - Number(b)) <= 3);
    const th = thresholds.get(norm(bus)) ?? {};
    cmp('shutdown temp °C', s.temperature.shutdown, th.shutdown);
    cmp('slowdown temp °C', s.temperature.slowdown, th.slowdown);
    cmp('PCIe width', s.pcie.width, width.get(i));
    cmp('PCIe max width', s.pcie.maxWidth, maxWidth.get(i));
    cmp('PCIe max gen', s.pcie.maxGen, maxGen.get(i));
    // Clock reasons change from moment to moment; compare only the HW bits, and only report.
    const hw = (x) => (Number(BigInt(x)) & (0x8 | 0x40 | 0x80)).toString(16);
    cmp('HW clock-event bits (can change between reads)', s.clocksEventReasons === null ? null : hw(s.clocksEventReasons), na(reasons.get(i)) ? reasons.get(i) : hw(reasons.get(i)));
    cmp('uncorrectable ECC (volatile)', s.eccUncorrectedVolatile, ecc.get(i), (a, b) => Number(a) === Number(b));
    const rr = remap.get(norm(bus));
    if (rr) {
      const yes = (x) => (/^(yes|1|true)$/i.test(String(x).trim()) ? 'yes' : 'no');
      cmp('row remap pending', s.remappedRows ? (s.remappedRows.pending ? 'yes' : 'no') : null, na(rr.pending) ? rr.pending : yes(rr.pending));
      cmp('row remap failure', s.remappedRows ? (s.remappedRows.failure ? 'yes' : 'no') : null, na(rr.failure) ? rr.failure : yes(rr.failure));
    }
    const nl = nvlink.get(i);
    if (nl && nl.links > 0) {
      cmp('NVLink links active', s.nvlink ? s.nvlink.active.filter(Boolean).length : null, nl.active, (a, b) => Number(a) === Number(b));
    }
  }
}

console.log('\n== Vigil checks');
for (const c of v.checks) console.log(`  ${c.status.toUpperCase().padEnd(4)}  ${String(c.gpu ?? '-').padStart(2)}  ${c.check.padEnd(18)} ${c.message}`);
console.log(`  summary: ${v.summary.ok} ok, ${v.summary.fail} failing, ${v.summary.skip} skipped; events: ${v.events.status}`);
if (v.findings?.length) {
  console.log('\n== Findings Vigil would report');
  for (const f of v.findings) console.log(`  ${f.reason} ${f.entity}: ${f.message}`);
}
console.log(`\ncompared ${compared} values, ${mismatches} mismatch(es)`);
process.exitCode = mismatches ? 1 : 0;
EOF
exit $?
