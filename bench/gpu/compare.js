/**
 * Compares `vigil gpu --json` with `nvidia-smi -q -x` and `nvidia-smi nvlink -s`, field by field,
 * and judges the event-loop window. Prints one line per check, `PASS|FAIL|SKIP  <check>  <detail>`,
 * then a summary; exit 1 when any check fails. Used by gpu-check.sh (same on a real node and
 * against the fake library and fake nvidia-smi stand-ins).
 *
 *   node bench/gpu/compare.js <work dir>   (reads vigil.json, smi.xml, smi-nvlink.txt, events.json)
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
const read = (f) => (existsSync(join(dir, f)) ? readFileSync(join(dir, f), 'utf8') : null);
const results = [];
const line = (status, check, detail) => {
  results.push(status);
  console.log(`${status}  ${check.padEnd(34)} ${detail}`);
};
/** PASS when equal, FAIL when not; SKIP when either side has no value (not supported here). */
const cmp = (check, ours, theirs, eq = (a, b) => String(a) === String(b)) => {
  if (ours === null || ours === undefined || theirs === null || theirs === undefined)
    return line('SKIP', check, `vigil=${ours ?? 'n/a'} nvidia-smi=${theirs ?? 'n/a'} (not reported by both)`);
  line(eq(ours, theirs) ? 'PASS' : 'FAIL', check, `vigil=${ours} nvidia-smi=${theirs}`);
};
const norm = (pci) => {
  const m = /^(?:pci:)?([0-9a-f]{1,8}):([0-9a-f]{1,2}):([0-9a-f]{1,2})(?:\.[0-7])?$/i.exec(String(pci).trim());
  return m ? `${m[1].slice(-4).padStart(4, '0')}:${m[2].padStart(2, '0')}:${m[3].padStart(2, '0')}`.toLowerCase() : String(pci);
};

// ------------------------------------------------------------------ nvidia-smi -q -x
/** Text of the first <tag> inside xml (no attributes on inner tags in nvidia-smi's output). */
const tag = (xml, name) => {
  const m = new RegExp(`<${name}>([\\s\\S]*?)</${name}>`).exec(xml ?? '');
  return m ? m[1].trim() : null;
};
const value = (s) => (s === null || /^(N\/A|\[N\/A\]|Not Supported|\[Not Supported\]|Unknown Error)$/i.test(s) ? null : s);
const num = (s) => (value(s) === null ? null : Number(String(s).replace(/[^\d.]/g, '')));
const smiXml = read('smi.xml');
const smiGpus = [...(smiXml ?? '').matchAll(/<gpu id="([^"]+)">([\s\S]*?)<\/gpu>/g)].map(([, id, body]) => ({ id, body }));

// nvidia-smi nvlink -s: "GPU 0: <name> (UUID: GPU-...)" then "Link N: <speed>" or "Link N: <inactive>".
const nvlink = new Map();
for (const block of (read('smi-nvlink.txt') ?? '').split(/^GPU (?=\d+:)/m).slice(1)) {
  const uuid = /\(UUID: ([^)]+)\)/.exec(block)?.[1];
  const links = block.match(/Link \d+:.*$/gm) ?? [];
  if (uuid) nvlink.set(uuid, { links: links.length, active: links.filter((l) => !/inactive|disabled/i.test(l)).length });
}

// ------------------------------------------------------------------ vigil gpu --json
const vigilText = read('vigil.json');
let v = null;
try {
  v = JSON.parse(vigilText ?? '');
} catch {
  /* reported below */
}
if (!v) {
  line('FAIL', 'vigil.gpu.json', `vigil gpu --json gave no JSON: ${read('vigil.err')?.slice(0, 300) ?? ''}`);
  process.exit(1);
}
line(
  v.state === 'running' && v.nvmlUsable !== false ? 'PASS' : 'FAIL',
  'vigil.nvml',
  `state ${v.state}, NVML ${v.nvmlUsable === false ? `unusable: ${v.nvmlUnusableReason ?? ''}` : 'usable'}, library ${v.library}, driver ${v.driverVersion ?? '?'}`,
);

if (!smiXml) {
  line('SKIP', 'nvidia-smi', 'nvidia-smi -q -x gave nothing: only Vigil was checked');
} else {
  cmp('driver version', v.driverVersion, value(tag(smiXml, 'driver_version')));
  cmp('GPU count', v.nvmlCount, smiGpus.length, (a, b) => Number(a) === Number(b));
  for (const { id, body } of smiGpus) {
    const uuid = tag(body, 'uuid');
    const g = v.gpus.find((x) => x.uuid === uuid);
    const p = `gpu ${norm(id)}`;
    if (!g) {
      line('FAIL', `${p} inventory`, `nvidia-smi lists ${uuid} at ${id}; Vigil does not`);
      continue;
    }
    cmp(`${p} uuid`, g.uuid, uuid);
    cmp(`${p} pci address`, g.pci, norm(value(tag(body, 'pci_bus_id')) ?? id));
    cmp(`${p} name`, g.name, value(tag(body, 'product_name')));
    const s = v.samples?.[g.index];
    if (!s) {
      line('FAIL', `${p} sample`, 'Vigil has no health sample for this GPU (lost, hung or skipped)');
      continue;
    }
    // ECC mode and volatile counts. R535+ XML splits SRAM/DRAM; older XML has single_bit/double_bit totals.
    const mode = value(tag(tag(body, 'ecc_mode'), 'current_ecc'));
    cmp(`${p} ecc mode`, s.eccMode ? (s.eccMode.current ? 'Enabled' : 'Disabled') : null, mode);
    const vol = tag(tag(body, 'ecc_errors'), 'volatile');
    const sum = (...names) => {
      const vals = names.map((n) => num(tag(vol, n)));
      return vals.every((x) => x === null) ? null : vals.reduce((a, b) => a + (b ?? 0), 0);
    };
    const corr = num(tag(tag(vol, 'single_bit'), 'total')) ?? sum('sram_correctable', 'dram_correctable');
    const unc =
      num(tag(tag(vol, 'double_bit'), 'total')) ??
      sum('sram_uncorrectable_parity', 'sram_uncorrectable_secded', 'sram_uncorrectable', 'dram_uncorrectable');
    const ecc = mode === 'Enabled';
    cmp(`${p} ecc uncorrected (volatile)`, s.eccUncorrectedVolatile, ecc ? unc : null, (a, b) => Number(a) === Number(b));
    cmp(`${p} ecc corrected (volatile)`, s.eccCorrectedVolatile, ecc ? corr : null, (a, b) => Number(a) === Number(b));
    // Remapped rows (Ampere+; N/A before).
    const rr = tag(body, 'remapped_rows');
    const yes = (x) => (x === null ? null : /^(yes|1|true)$/i.test(x) ? 'yes' : 'no');
    const ours = s.remappedRows;
    cmp(`${p} remapped rows correctable`, ours?.corr, num(tag(rr, 'remapped_row_corr')), (a, b) => Number(a) === Number(b));
    cmp(`${p} remapped rows uncorrectable`, ours?.unc, num(tag(rr, 'remapped_row_unc')), (a, b) => Number(a) === Number(b));
    cmp(`${p} remapped rows pending`, ours ? (ours.pending ? 'yes' : 'no') : null, yes(value(tag(rr, 'remapped_row_pending'))));
    cmp(`${p} remapped rows failure`, ours ? (ours.failure ? 'yes' : 'no') : null, yes(value(tag(rr, 'remapped_row_failure'))));
    // Clock-event reasons: the HW bits (the health-relevant ones); they can change between reads.
    const reasons = tag(body, 'clocks_event_reasons') ?? tag(body, 'clocks_throttle_reasons');
    const active = (n) => {
      const x = value(tag(reasons, `clocks_event_reason_${n}`) ?? tag(reasons, `clocks_throttle_reason_${n}`));
      return x === null ? null : /^active$/i.test(x);
    };
    const smiBits = [
      [0x8, active('hw_slowdown')],
      [0x40, active('hw_thermal_slowdown')],
      [0x80, active('hw_power_brake_slowdown')],
    ];
    const smiHw = smiBits.some(([, a]) => a === null) ? null : smiBits.reduce((m, [b, a]) => m | (a ? b : 0), 0);
    const ourHw = s.clocksEventReasons === null ? null : Number(BigInt(s.clocksEventReasons) & 0xc8n);
    cmp(
      `${p} clock-event HW reasons`,
      ourHw === null ? null : `0x${ourHw.toString(16)}`,
      smiHw === null ? null : `0x${smiHw.toString(16)}`,
    );
    const idle = active('gpu_idle');
    cmp(`${p} clock-event idle`, s.clocksEventReasons === null ? null : Boolean(Number(s.clocksEventReasons) & 1), idle);
    // NVLink: active links, or "none" on both for a PCIe GPU (NVML NOT_SUPPORTED, nvidia-smi lists none).
    const nl = nvlink.get(uuid);
    const ourLinks = s.nvlink ? `${s.nvlink.active.filter(Boolean).length}/${s.nvlink.active.length} active` : 'none';
    const smiLinks = nl ? (nl.links ? `${nl.active}/${nl.links} active` : 'none') : null;
    cmp(`${p} nvlink state`, ourLinks, smiLinks);
    const fabricState = value(tag(tag(body, 'fabric'), 'state'));
    const FABRIC = ['N/A', 'Not Started', 'In Progress', 'Completed'];
    cmp(`${p} fabric state`, s.fabric && s.fabric.state ? FABRIC[s.fabric.state] : 'N/A', fabricState ?? 'N/A');
  }
}

// ------------------------------------------------------------------ checks Vigil ran
const failing = v.checks.filter((c) => c.status === 'fail');
line(
  'PASS',
  'vigil checks ran',
  `${v.summary.ok} ok, ${v.summary.fail} failing, ${v.summary.skip} skipped${failing.length ? `; failing: ${failing.map((c) => `${c.check}@${c.gpu ?? '-'}`).join(', ')}` : ''}`,
);

// ------------------------------------------------------------------ event loop window
const ev = (() => {
  try {
    return JSON.parse(read('events.json') ?? '');
  } catch {
    return null;
  }
})();
if (!ev) line('FAIL', 'events window', `the event loop gave no report: ${read('events.err')?.slice(0, 300) ?? ''}`);
else {
  const regs = ev.events.devices ?? [];
  const registered = regs.filter((d) => d.rc === 0);
  line(
    ev.events.status === 'running' && registered.length > 0 ? 'PASS' : 'FAIL',
    'events registered',
    `${ev.events.status}${ev.events.detail ? ` (${ev.events.detail})` : ''}; ${regs.map((d) => `GPU ${d.index} mask 0x${d.mask.toString(16)} rc ${d.rc}`).join(', ')}`,
  );
  line(
    ev.ranMs >= ev.windowMs && ev.events.status === 'running' ? 'PASS' : 'FAIL',
    'events window',
    `ran ${Math.round(ev.ranMs / 1000)} s; ${ev.findings.length} finding(s) from events${ev.findings.length ? `: ${ev.findings.map((f) => `${f.reason} ${f.entity}`).join(', ')}` : ''}`,
  );
  for (const i of ev.injected ?? [])
    line(
      // Arrival, not latency (bench/gpu.ts measures that): a loaded machine may take a while.
      i.arrivedMs !== null && i.arrivedMs < 5_000 ? 'PASS' : 'FAIL',
      `event ${i.kind} (stand-in)`,
      i.arrivedMs === null ? `${i.reason} never arrived` : `${i.reason} arrived after ${i.arrivedMs} ms`,
    );
}

const fails = results.filter((r) => r === 'FAIL').length;
console.log(
  `\n${results.length} checks: ${results.filter((r) => r === 'PASS').length} pass, ${fails} fail, ${results.filter((r) => r === 'SKIP').length} skip`,
);
process.exit(fails ? 1 : 0);
