/**
 * GPU health checks as pure functions: (sample, previous state, config, time) → results. No I/O,
 * no NVML, no clocks; the monitor feeds them and publishes what they decide, and tests call them
 * directly.
 *
 * Every result names the reason it speaks for. `fail` carries the finding; `ok` lets the monitor
 * send a healthy signal (for whenHealthy reasons); `skip` says nothing either way (not supported,
 * no baseline yet, not sustained long enough).
 */
import type { BuiltinFinding, Entity } from '../../api/types.ts';
import type { ReasonName } from '../../catalog/index.ts';
import { nvmlReturnName, NVML_RETURN } from '../../sources/nvml/errors.ts';
import { CLOCK_REASON_BITS, EVENT_BITS, type GpuSample, type NvmlEvent } from '../../sources/nvml/protocol.ts';
import { NVLINK5_XIDS, RECOVERY_ACTION_NAMES, RECOVERY_ACTION_XID, decideXid } from '../xid/policy.ts';
import type { GpuConfig } from './config.ts';
import { entityOf, gpuAttrs, gpuLabel, type GpuInfo } from './inventory.ts';

export type CheckStatus = 'ok' | 'fail' | 'skip';

export interface CheckResult {
  /** Stable check name (CLI output, metrics label). */
  check: string;
  /** NVML index of the GPU, or null for node-level checks. */
  gpu: number | null;
  entity: Entity;
  /** The catalog reason the check speaks for; '' when it speaks for none (a skipped poll). */
  reason: ReasonName | '';
  status: CheckStatus;
  message: string;
  finding?: BuiltinFinding;
}

/**
 * What one GPU's checks remember between polls (keyed by UUID in the monitor). The counter
 * baselines (ecc, eccCorrected, replay, nvlinkCounters) also persist in the state file (see
 * baselines.ts), so a restart judges the increase since the last reading, never a lifetime total.
 */
export interface GpuCheckState {
  ecc: number | null;
  /** When `ecc` was read (null: not known, e.g. state from before this field). */
  eccAt?: number | null;
  eccCorrected?: { value: number; at: number } | null;
  replay: { value: number; at: number } | null;
  /** NVLink links seen active since start: one going inactive is a fault. */
  nvlinkBaseline: number[];
  nvlinkCounters: { at: number; perLink: (number[] | null)[] } | null;
  clockStreak: { slowdown: number; thermal: number; power: number };
}

export function initialCheckState(): GpuCheckState {
  return {
    ecc: null,
    eccAt: null,
    eccCorrected: null,
    replay: null,
    nvlinkBaseline: [],
    nvlinkCounters: null,
    clockStreak: { slowdown: 0, thermal: 0, power: 0 },
  };
}

interface Ctx {
  gpu: GpuInfo;
  now: number;
  cfg: GpuConfig;
}

function gpuResult(
  ctx: { gpu: GpuInfo; now: number },
  check: string,
  reason: ReasonName,
  status: CheckStatus,
  message: string,
  attrs?: Record<string, string | number | boolean>,
): CheckResult {
  const entity = entityOf(ctx.gpu);
  const text = `${gpuLabel(ctx.gpu)}: ${message}`;
  const r: CheckResult = { check, gpu: ctx.gpu.index, entity, reason, status, message: text };
  if (status === 'fail')
    r.finding = { reason, message: text, source: 'nvml', entity, at: ctx.now, attrs: { ...gpuAttrs(ctx.gpu), ...attrs } };
  return r;
}

/** Why a reading is null: a missing symbol, a failed call, or plain "not supported". */
function whyMissing(s: GpuSample, fns: readonly string[], otherwise: string): string {
  const missing = fns.filter((f) => s.missing.includes(f));
  if (missing.length) return `skipped: the NVML library lacks ${missing.join(', ')} (older driver)`;
  const failed = s.errors.filter((e) => fns.includes(e.fn));
  if (failed.length) return `skipped: ${failed.map((e) => `${e.fn} returned ${nvmlReturnName(e.rc)}`).join(', ')}`;
  return otherwise;
}

// ------------------------------------------------------------------ memory

export function checkRowRemap(ctx: Ctx, s: GpuSample): CheckResult[] {
  const r = s.remappedRows;
  if (!r) {
    const why = whyMissing(s, ['nvmlDeviceGetRemappedRows'], 'row remapping not supported (pre-Ampere GPU, or MIG instances active)');
    return [
      gpuResult(ctx, 'rowRemapFailure', 'NvidiaRowRemapFailure', 'skip', why),
      gpuResult(ctx, 'rowRemapPending', 'NvidiaRowRemapPending', 'skip', why),
    ];
  }
  const counts = { remappedCorrectable: r.corr, remappedUncorrectable: r.unc };
  return [
    r.failure
      ? gpuResult(
          ctx,
          'rowRemapFailure',
          'NvidiaRowRemapFailure',
          'fail',
          `row remapping failed (${r.unc} uncorrectable, ${r.corr} correctable rows remapped): a memory bank has no spare rows left; replace the GPU`,
          counts,
        )
      : gpuResult(ctx, 'rowRemapFailure', 'NvidiaRowRemapFailure', 'ok', 'no row remapping failure'),
    r.pending
      ? gpuResult(
          ctx,
          'rowRemapPending',
          'NvidiaRowRemapPending',
          'fail',
          `a memory row remap is pending (${r.unc} uncorrectable, ${r.corr} correctable rows remapped); it takes effect at the next GPU reset`,
          counts,
        )
      : gpuResult(ctx, 'rowRemapPending', 'NvidiaRowRemapPending', 'ok', 'no row remap pending'),
  ];
}

export function checkRetiredPages(ctx: Ctx, s: GpuSample): CheckResult {
  const p = s.retiredPages;
  if (!p) {
    const why = s.remappedRows
      ? 'not applicable: the GPU uses row remapping'
      : whyMissing(s, ['nvmlDeviceGetRetiredPages'], 'page retirement not supported');
    return gpuResult(ctx, 'retiredPages', 'NvidiaPageRetirement', 'skip', why);
  }
  const attrs = { retiredSbe: p.sbe, retiredDbe: p.dbe };
  if (p.pending)
    return gpuResult(
      ctx,
      'retiredPages',
      'NvidiaPageRetirement',
      'fail',
      `retired memory pages are pending (${p.sbe} single-bit, ${p.dbe} double-bit retired); they take effect after a GPU reset or reboot`,
      attrs,
    );
  const limit = ctx.cfg.thresholds.retiredPagesLimit;
  if (p.sbe + p.dbe >= limit)
    return gpuResult(
      ctx,
      'retiredPages',
      'NvidiaPageRetirement',
      'fail',
      `${p.sbe + p.dbe} memory pages retired (${p.sbe} single-bit, ${p.dbe} double-bit), limit ${limit}`,
      attrs,
    );
  return gpuResult(ctx, 'retiredPages', 'NvidiaPageRetirement', 'ok', `${p.sbe + p.dbe} pages retired, none pending`);
}

export function checkEccUncorrected(ctx: Ctx, s: GpuSample, prev: number | null): CheckResult {
  const cur = s.eccUncorrectedVolatile;
  if (cur === null)
    return gpuResult(
      ctx,
      'eccUncorrected',
      'NvidiaDoubleBitError',
      'skip',
      whyMissing(s, ['nvmlDeviceGetTotalEccErrors'], 'ECC disabled or not supported'),
    );
  if (prev === null)
    return gpuResult(
      ctx,
      'eccUncorrected',
      'NvidiaDoubleBitError',
      'skip',
      `baseline: ${cur} uncorrectable ECC errors since the driver loaded`,
    );
  if (cur > prev)
    return gpuResult(
      ctx,
      'eccUncorrected',
      'NvidiaDoubleBitError',
      'fail',
      `uncorrectable (double-bit) ECC errors grew from ${prev} to ${cur} since the last poll`,
      { eccUncorrected: cur },
    );
  return gpuResult(
    ctx,
    'eccUncorrected',
    'NvidiaDoubleBitError',
    'ok',
    `${cur} uncorrectable ECC errors since the driver loaded, no growth`,
  );
}

/**
 * Corrected (single-bit) ECC errors: Info when the volatile count grew since the baseline (the
 * previous poll, or the reading persisted before a restart). The total alone is never reported.
 */
export function checkEccCorrected(
  ctx: Ctx,
  s: GpuSample,
  prev: GpuCheckState['eccCorrected'],
): { result: CheckResult; next: GpuCheckState['eccCorrected'] } {
  const cur = s.eccCorrectedVolatile ?? null;
  const mk = (status: CheckStatus, msg: string, attrs?: Record<string, number>) =>
    gpuResult(ctx, 'eccCorrected', 'NvidiaSingleBitEccError', status, msg, attrs);
  if (cur === null)
    return { result: mk('skip', whyMissing(s, ['nvmlDeviceGetTotalEccErrors'], 'ECC disabled or not supported')), next: prev ?? null };
  const here = { value: cur, at: ctx.now };
  // No baseline, or the count went down (driver reload reset it): this reading is the baseline.
  if (!prev || cur < prev.value) return { result: mk('skip', `baseline: ${cur} corrected ECC errors since the driver loaded`), next: here };
  if (cur > prev.value)
    return {
      result: mk('fail', `corrected (single-bit) ECC errors grew from ${prev.value} to ${cur}`, {
        eccCorrected: cur,
        eccCorrectedIncrease: cur - prev.value,
      }),
      next: here,
    };
  return { result: mk('ok', `${cur} corrected ECC errors since the driver loaded, no growth`), next: here };
}

// ------------------------------------------------------------------ PCIe

const PCIE_FNS = ['nvmlDeviceGetPcieReplayCounter'];

/** Replay limit per minute for a link: ceil(per-lane rate of its generation × width). */
export function pcieReplayLimit(cfg: GpuConfig, gen: number, width: number): number {
  const table = cfg.thresholds.pcieReplayPerLanePerMinute;
  const gens = Object.keys(table)
    .map(Number)
    .sort((a, b) => a - b);
  const use = gens.filter((g) => g <= gen).pop() ?? gens[0];
  return Math.ceil(table[String(use)] * width);
}

export function checkPcieReplay(
  ctx: Ctx,
  s: GpuSample,
  prev: GpuCheckState['replay'],
): { result: CheckResult; next: GpuCheckState['replay'] } {
  const cur = s.pcie.replay;
  const mk = (status: CheckStatus, msg: string, attrs?: Record<string, number>) =>
    gpuResult(ctx, 'pcieReplay', 'NvidiaPCIeError', status, msg, attrs);
  if (cur === null) return { result: mk('skip', whyMissing(s, PCIE_FNS, 'PCIe replay counter not supported')), next: null };
  const here = { value: cur, at: ctx.now };
  if (!prev || cur < prev.value) return { result: mk('skip', `baseline: replay counter ${cur}`), next: here };
  const elapsed = ctx.now - prev.at;
  const minWindow = ctx.cfg.thresholds.pcieReplayMinWindowMs;
  if (elapsed < minWindow)
    return { result: mk('skip', `replay counter ${cur}; a rate needs ${Math.round(minWindow / 1000)} s between samples`), next: prev };
  // The limit scales with the link the GPU is built for; the current link may idle down to Gen1.
  const gen = s.pcie.maxGen ?? s.pcie.gen ?? 4;
  const width = s.pcie.maxWidth ?? s.pcie.width ?? 16;
  const limit = pcieReplayLimit(ctx.cfg, gen, width);
  const perMin = ((cur - prev.value) * 60_000) / elapsed;
  if (perMin > limit) {
    return {
      result: mk(
        'fail',
        `PCIe replay counter grew by ${cur - prev.value} in ${Math.round(elapsed / 1000)} s (${perMin.toFixed(1)}/min, limit ${limit}/min for Gen${gen} x${width})`,
        { pcieReplayPerMinute: Math.round(perMin * 10) / 10, pcieReplayLimit: limit },
      ),
      next: here,
    };
  }
  return { result: mk('ok', `PCIe replays ${perMin.toFixed(1)}/min (limit ${limit}/min for Gen${gen} x${width})`), next: here };
}

export function checkPcieWidth(ctx: Ctx, s: GpuSample): CheckResult {
  const { width, maxWidth } = s.pcie;
  if (!width || !maxWidth)
    return gpuResult(
      ctx,
      'pcieLinkWidth',
      'NvidiaPCIeLinkDegraded',
      'skip',
      whyMissing(s, ['nvmlDeviceGetCurrPcieLinkWidth', 'nvmlDeviceGetMaxPcieLinkWidth'], 'PCIe link width not reported'),
    );
  // Width only: the link generation drops at idle to save power, so a lower Gen is normal.
  if (width < maxWidth)
    return gpuResult(
      ctx,
      'pcieLinkWidth',
      'NvidiaPCIeLinkDegraded',
      'fail',
      `PCIe link runs at x${width}, below its maximum x${maxWidth}`,
      { pcieWidth: width, pcieMaxWidth: maxWidth },
    );
  return gpuResult(ctx, 'pcieLinkWidth', 'NvidiaPCIeLinkDegraded', 'ok', `PCIe link x${width} of x${maxWidth}`);
}

// ------------------------------------------------------------------ clocks and thermals

const CLOCK_CHECKS = [
  {
    key: 'slowdown',
    check: 'clockHwSlowdown',
    reason: 'NvidiaClockSlowdown',
    bit: CLOCK_REASON_BITS.HwSlowdown,
    what: 'hardware slowdown (HW slowdown clock-event reason)',
  },
  {
    key: 'thermal',
    check: 'clockHwThermal',
    reason: 'NvidiaThermalError',
    bit: CLOCK_REASON_BITS.HwThermalSlowdown,
    what: 'hardware thermal slowdown',
  },
  {
    key: 'power',
    check: 'clockHwPowerBrake',
    reason: 'NvidiaPowerError',
    bit: CLOCK_REASON_BITS.HwPowerBrakeSlowdown,
    what: 'hardware power-brake slowdown',
  },
] as const;

/** HW slowdown bits only: idle, application clocks and SW power/thermal caps are normal operation. */
export function checkClockEvents(
  ctx: Ctx,
  s: GpuSample,
  streak: GpuCheckState['clockStreak'],
): { results: CheckResult[]; next: GpuCheckState['clockStreak'] } {
  const reasons = s.clocksEventReasons;
  const next = { ...streak };
  if (reasons === null) {
    const why = whyMissing(
      s,
      ['nvmlDeviceGetCurrentClocksEventReasons', 'nvmlDeviceGetCurrentClocksThrottleReasons'],
      'clock-event reasons not supported',
    );
    return {
      results: CLOCK_CHECKS.map((c) => gpuResult(ctx, c.check, c.reason, 'skip', why)),
      next: { slowdown: 0, thermal: 0, power: 0 },
    };
  }
  const need = ctx.cfg.thresholds.clockEventPolls;
  const results = CLOCK_CHECKS.map((c) => {
    if (!(reasons & c.bit)) {
      next[c.key] = 0;
      return gpuResult(ctx, c.check, c.reason, 'ok', `no ${c.what}`);
    }
    next[c.key] = streak[c.key] + 1;
    if (next[c.key] < need)
      return gpuResult(ctx, c.check, c.reason, 'skip', `${c.what} active in ${next[c.key]} of ${need} consecutive polls needed`);
    return gpuResult(
      ctx,
      c.check,
      c.reason,
      'fail',
      `${c.what} active for ${next[c.key]} consecutive polls (clock-event reasons 0x${reasons.toString(16)})`,
      { clocksEventReasons: reasons },
    );
  });
  return { results, next };
}

export function checkTemperature(ctx: Ctx, s: GpuSample): CheckResult {
  const { current, slowdown, shutdown } = s.temperature;
  const mk = (status: CheckStatus, msg: string) =>
    gpuResult(ctx, 'temperature', 'NvidiaThermalError', status, msg, current === null ? undefined : { temperatureC: current });
  if (current === null) return mk('skip', whyMissing(s, ['nvmlDeviceGetTemperature'], 'temperature not reported'));
  const margin = ctx.cfg.thresholds.shutdownMarginC;
  if (shutdown !== null && current >= shutdown - margin)
    return mk('fail', `temperature ${current} °C is within ${margin} °C of the GPU's shutdown threshold ${shutdown} °C`);
  if (slowdown !== null && current >= slowdown)
    return mk('fail', `temperature ${current} °C is at or above the GPU's slowdown threshold ${slowdown} °C`);
  if (slowdown === null && shutdown === null) return mk('skip', `temperature ${current} °C; the GPU reports no thresholds`);
  return mk('ok', `temperature ${current} °C (slowdown ${slowdown ?? '?'} °C, shutdown ${shutdown ?? '?'} °C)`);
}

// ------------------------------------------------------------------ NVLink

export function checkNvLinkState(ctx: Ctx, s: GpuSample, baseline: readonly number[]): { result: CheckResult; next: number[] } {
  const nv = s.nvlink;
  if (!nv)
    return {
      result: gpuResult(ctx, 'nvlinkState', 'NvidiaNVLinkError', 'skip', whyMissing(s, ['nvmlDeviceGetNvLinkState'], 'no NVLink')),
      next: [...baseline],
    };
  const active = nv.active.flatMap((a, i) => (a ? [i] : []));
  const down = baseline.filter((l) => !nv.active[l]);
  const next = [...new Set([...baseline, ...active])].sort((a, b) => a - b);
  const expected = ctx.cfg.thresholds.nvlinkExpectedActive;
  const attrs = { nvlinkActive: active.length, nvlinkLinks: nv.active.length };
  if (down.length) {
    return {
      result: gpuResult(
        ctx,
        'nvlinkState',
        'NvidiaNVLinkError',
        'fail',
        `NVLink link${down.length > 1 ? 's' : ''} ${down.join(', ')} went inactive (${active.length} of ${nv.active.length} active)`,
        { ...attrs, nvlinkDown: down.join(',') },
      ),
      next,
    };
  }
  if (expected !== null && active.length < expected) {
    return {
      result: gpuResult(
        ctx,
        'nvlinkState',
        'NvidiaNVLinkError',
        'fail',
        `${active.length} NVLink links active, ${expected} expected`,
        attrs,
      ),
      next,
    };
  }
  return {
    result: gpuResult(ctx, 'nvlinkState', 'NvidiaNVLinkError', 'ok', `${active.length} of ${nv.active.length} NVLink links active`),
    next,
  };
}

export function checkNvLinkErrors(
  ctx: Ctx,
  s: GpuSample,
  prev: GpuCheckState['nvlinkCounters'],
): { result: CheckResult; next: GpuCheckState['nvlinkCounters'] } {
  const nv = s.nvlink;
  const mk = (status: CheckStatus, msg: string, attrs?: Record<string, number>) =>
    gpuResult(ctx, 'nvlinkErrors', 'NvidiaNVLinkErrorCounters', status, msg, attrs);
  if (!nv)
    return { result: mk('skip', whyMissing(s, ['nvmlDeviceGetNvLinkErrorCounter', 'nvmlDeviceGetNvLinkState'], 'no NVLink')), next: null };
  const next = { at: ctx.now, perLink: nv.counters };
  if (!prev) return { result: mk('skip', 'baseline: NVLink error counters recorded'), next };
  let replayRecovery = 0;
  let crc = 0;
  nv.counters.forEach((row, link) => {
    const old = prev.perLink[link];
    if (!row || !old) return;
    // A counter that went down was reset (driver reload): count nothing rather than a negative.
    const d = (k: number) => Math.max(0, row[k] - old[k]);
    replayRecovery += d(0) + d(1);
    crc += d(2) + d(3);
  });
  const seconds = Math.max(1, (ctx.now - prev.at) / 1000);
  const t = ctx.cfg.thresholds;
  const crcRate = crc / seconds;
  const attrs = { nvlinkReplayRecovery: replayRecovery, nvlinkCrc: crc };
  if (replayRecovery >= t.nvlinkReplayRecoveryDelta || crcRate >= t.nvlinkCrcPerSecond) {
    return {
      result: mk(
        'fail',
        `NVLink error counters grew since the last poll: ${replayRecovery} replay/recovery, ${crc} CRC (${crcRate.toFixed(1)}/s)`,
        attrs,
      ),
      next,
    };
  }
  return { result: mk('ok', `NVLink error counters: +${replayRecovery} replay/recovery, +${crc} CRC since the last poll`), next };
}

// ------------------------------------------------------------------ NVSwitch fabric

/** nvmlGpuFabricState_t. */
export const FABRIC_STATE = { NOT_SUPPORTED: 0, NOT_STARTED: 1, IN_PROGRESS: 2, COMPLETED: 3 } as const;
const FABRIC_STATE_NAMES = ['NOT_SUPPORTED', 'NOT_STARTED', 'IN_PROGRESS', 'COMPLETED'];

/**
 * Faults in an nvmlGpuFabricInfo_v2 health mask, as the EKS agent reads DCGM's: the 2-bit fields
 * degraded bandwidth (shift 0), route recovery (2), route unhealthy (4) and access-timeout
 * recovery (6) are faulty at 1 (TRUE); incorrect configuration (4 bits at shift 8) at 2 or more.
 */
export function fabricHealthFaults(mask: number): string[] {
  const out: string[] = [];
  const two = [
    [0, 'degraded bandwidth'],
    [2, 'route recovery in progress'],
    [4, 'route unhealthy'],
    [6, 'access-timeout recovery in progress'],
  ] as const;
  for (const [shift, what] of two) if (((mask >>> shift) & 0x3) === 1) out.push(what);
  const config = (mask >>> 8) & 0xf;
  if (config >= 2) out.push(`incorrect configuration (${config})`);
  return out;
}

/** Whether a GPU takes part in an NVSwitch fabric (the fabric query is supported and not NOT_SUPPORTED). */
export function inFabric(s: GpuSample | undefined): boolean {
  return !!s?.fabric && s.fabric.state !== FABRIC_STATE.NOT_SUPPORTED;
}

export function checkFabric(ctx: Ctx, s: GpuSample): CheckResult {
  const f = s.fabric ?? null;
  const mk = (status: CheckStatus, msg: string, attrs?: Record<string, string | number>) =>
    gpuResult(ctx, 'fabric', 'NvidiaFabricError', status, msg, attrs);
  if (!f || f.state === FABRIC_STATE.NOT_SUPPORTED)
    return mk(
      'skip',
      whyMissing(
        s,
        ['nvmlDeviceGetGpuFabricInfoV', 'nvmlDeviceGetGpuFabricInfo'],
        'no NVSwitch fabric (PCIe or NVLink-bridge GPU, or a driver before R535)',
      ),
    );
  const state = FABRIC_STATE_NAMES[f.state] ?? `state ${f.state}`;
  const attrs = { fabricState: state, fabricStatus: nvmlReturnName(f.status), cliqueId: f.cliqueId };
  if (f.state !== FABRIC_STATE.COMPLETED)
    return mk('fail', `NVSwitch fabric registration is ${state}, not COMPLETED: the GPU cannot use NVLink to its peers`, attrs);
  if (f.status !== NVML_RETURN.SUCCESS)
    return mk('fail', `NVSwitch fabric registration completed with status ${nvmlReturnName(f.status)}`, attrs);
  const faults = f.healthMask === null ? [] : fabricHealthFaults(f.healthMask);
  if (faults.length)
    return mk('fail', `NVSwitch fabric health: ${faults.join(', ')} (mask 0x${f.healthMask!.toString(16)})`, {
      ...attrs,
      fabricHealthMask: f.healthMask!,
    });
  return mk('ok', `NVSwitch fabric registration COMPLETED (clique ${f.cliqueId})`);
}

/**
 * The fabric manager must run where NVSwitches sit on this node's PCI bus and the GPUs take part in
 * the fabric (HGX/DGX A100/H100). NVL5 systems (GB200) have no NVSwitch on the node's bus, so the
 * check skips there, as on PCIe GPUs.
 */
export function checkFabricManager(
  nvswitches: number,
  fabricGpus: number,
  fm: { running: boolean; pids: number[] } | null,
  now: number,
): CheckResult {
  const base = { check: 'fabricManager', gpu: null, entity: '', reason: 'FabricManagerNotRunning' } as const;
  if (nvswitches === 0 || fabricGpus === 0)
    return {
      ...base,
      status: 'skip',
      message:
        nvswitches === 0
          ? 'no NVSwitch on the PCI bus: no fabric manager needed'
          : 'no GPU reports an NVSwitch fabric: no fabric manager needed',
    };
  if (!fm) return { ...base, status: 'skip', message: 'cannot tell whether nv-fabricmanager runs (/proc unreadable)' };
  if (fm.running) return { ...base, status: 'ok', message: `nv-fabricmanager runs (pid ${fm.pids.join(', ')})` };
  const message = `${nvswitches} NVSwitch${nvswitches === 1 ? '' : 'es'} on the PCI bus and ${fabricGpus} GPU${fabricGpus === 1 ? '' : 's'} in the fabric, but no nv-fabricmanager process runs (systemctl status nvidia-fabricmanager)`;
  return {
    ...base,
    status: 'fail',
    message,
    finding: { reason: base.reason, message, source: 'procfs', entity: '', at: now, attrs: { nvswitches, fabricGpus } },
  };
}

// ------------------------------------------------------------------ driver-reported state

export { RECOVERY_ACTION_NAMES };

export function checkRecoveryAction(ctx: Ctx, s: GpuSample): CheckResult {
  const a = s.recoveryAction;
  if (a === null)
    return gpuResult(
      ctx,
      'recoveryAction',
      'NvidiaRecoveryActionRequired',
      'skip',
      whyMissing(s, ['nvmlDeviceGetFieldValues'], 'recovery action field not supported (driver before R565?)'),
    );
  const name = RECOVERY_ACTION_NAMES[a] ?? `action ${a}`;
  if (ctx.cfg.thresholds.recoveryActionsFatal.includes(a)) {
    return gpuResult(
      ctx,
      'recoveryAction',
      'NvidiaRecoveryActionRequired',
      'fail',
      `the driver's recommended recovery action is ${name} (${a})`,
      { recoveryAction: a },
    );
  }
  return gpuResult(ctx, 'recoveryAction', 'NvidiaRecoveryActionRequired', 'ok', `driver recovery action: ${name} (${a})`);
}

export function checkInforom(ctx: Ctx, s: GpuSample): CheckResult {
  if (s.inforom === 'corrupted')
    return gpuResult(ctx, 'inforom', 'NvidiaInfoROMCorrupted', 'fail', 'the InfoROM failed validation (CORRUPTED_INFOROM)');
  if (s.inforom === 'valid') return gpuResult(ctx, 'inforom', 'NvidiaInfoROMCorrupted', 'ok', 'InfoROM valid');
  return gpuResult(
    ctx,
    'inforom',
    'NvidiaInfoROMCorrupted',
    'skip',
    whyMissing(s, ['nvmlDeviceValidateInforom'], 'InfoROM validation not supported'),
  );
}

/** Runs every per-GPU poll check on one sample. */
export function evaluateGpu(
  gpu: GpuInfo,
  s: GpuSample,
  prev: GpuCheckState,
  cfg: GpuConfig,
  now: number,
): { results: CheckResult[]; state: GpuCheckState } {
  const ctx: Ctx = { gpu, now, cfg };
  const replay = checkPcieReplay(ctx, s, prev.replay);
  const clocks = checkClockEvents(ctx, s, prev.clockStreak);
  const link = checkNvLinkState(ctx, s, prev.nvlinkBaseline);
  const linkErr = checkNvLinkErrors(ctx, s, prev.nvlinkCounters);
  const corrected = checkEccCorrected(ctx, s, prev.eccCorrected ?? null);
  const results = [
    ...checkRowRemap(ctx, s),
    checkRetiredPages(ctx, s),
    checkEccUncorrected(ctx, s, prev.ecc),
    corrected.result,
    replay.result,
    checkPcieWidth(ctx, s),
    ...clocks.results,
    checkTemperature(ctx, s),
    link.result,
    linkErr.result,
    checkFabric(ctx, s),
    checkRecoveryAction(ctx, s),
    checkInforom(ctx, s),
  ];
  const state: GpuCheckState = {
    ecc: s.eccUncorrectedVolatile ?? prev.ecc,
    eccAt: s.eccUncorrectedVolatile !== null ? now : (prev.eccAt ?? null),
    eccCorrected: corrected.next,
    replay: replay.next,
    nvlinkBaseline: link.next,
    nvlinkCounters: linkErr.next,
    clockStreak: clocks.next,
  };
  return { results, state };
}

// ------------------------------------------------------------------ node level and failures

export function checkDeviceCount(nvmlCount: number, expected: number, from: string, now: number): CheckResult {
  const base = { check: 'deviceCount', gpu: null, entity: '', reason: 'NvidiaDeviceCountMismatch' } as const;
  if (nvmlCount >= expected)
    return { ...base, status: 'ok', message: `NVML sees ${nvmlCount} GPU${nvmlCount === 1 ? '' : 's'}, ${expected} expected (${from})` };
  const message = `NVML sees ${nvmlCount} GPU${nvmlCount === 1 ? '' : 's'} but ${expected} are expected (${from}); a GPU failed to initialise or fell off the bus`;
  return {
    ...base,
    status: 'fail',
    message,
    finding: { reason: base.reason, message, source: 'nvml', entity: '', at: now, attrs: { nvmlCount, expected } },
  };
}

export function driverLoaded(driverVersion: string | null, libraryPath: string): CheckResult {
  return {
    check: 'driver',
    gpu: null,
    entity: '',
    reason: 'NvidiaDriverNotLoaded',
    status: 'ok',
    message: `NVML loaded from ${libraryPath}, driver ${driverVersion ?? 'version unknown'}`,
  };
}

/** Human wording for why nvmlInit_v2 failed. */
export function initFailureDetail(code: number): string {
  switch (code) {
    case NVML_RETURN.DRIVER_NOT_LOADED:
      return 'nvmlInit_v2 returned DRIVER_NOT_LOADED: the NVIDIA kernel module is not loaded';
    case NVML_RETURN.LIB_RM_VERSION_MISMATCH:
      return 'nvmlInit_v2 returned LIB_RM_VERSION_MISMATCH: the NVML library does not match the loaded kernel driver (driver upgraded without a reboot?)';
    case NVML_RETURN.NO_PERMISSION:
      return 'nvmlInit_v2 returned NO_PERMISSION: Vigil cannot open the NVIDIA device files';
    default:
      return `nvmlInit_v2 returned ${nvmlReturnName(code)}`;
  }
}

/** An NVML call hung past the watchdog. */
export function nvmlTimeout(fn: string, afterMs: number, gpu: GpuInfo | undefined, now: number, note = ''): CheckResult {
  const entity = gpu ? entityOf(gpu) : '';
  const where = gpu ? ` on ${gpuLabel(gpu)}` : '';
  const message = `NVML call ${fn}${where} did not return within ${afterMs} ms; the GPU or driver may be hung. Vigil abandoned the call and keeps monitoring${note ? `; ${note}` : ''}`;
  return {
    check: 'nvmlResponsive',
    gpu: gpu?.index ?? null,
    entity,
    reason: 'NvidiaNVMLTimeout',
    status: 'fail',
    message,
    finding: {
      reason: 'NvidiaNVMLTimeout',
      message,
      source: 'nvml',
      entity,
      at: now,
      attrs: { ...(gpu ? gpuAttrs(gpu) : {}), function: fn, afterMs },
    },
  };
}

/** A call returned GPU_IS_LOST or RESET_REQUIRED. */
export function gpuGone(gpu: GpuInfo, fn: string, rc: number, now: number): CheckResult {
  const reset = rc === NVML_RETURN.RESET_REQUIRED;
  const reason = reset ? 'NvidiaGPUResetRequired' : 'NvidiaGPULost';
  const what = reset ? 'the GPU needs a reset (RESET_REQUIRED)' : 'the GPU is lost (GPU_IS_LOST: fallen off the bus or inaccessible)';
  return { ...gpuResult({ gpu, now }, 'gpuLost', reason, 'fail', `${fn} returned ${nvmlReturnName(rc)}: ${what}`, { function: fn }) };
}

// ------------------------------------------------------------------ events

/** Findings for one NVML event; [] for event types that are only counted. */
export function eventFindings(ev: NvmlEvent, gpu: GpuInfo, cfg: GpuConfig, now = ev.at): BuiltinFinding[] {
  const entity = entityOf(gpu);
  const label = gpuLabel(gpu);
  const mig: Record<string, number> =
    ev.gpuInstanceId !== 0xffffffff ? { gpuInstance: ev.gpuInstanceId, computeInstance: ev.computeInstanceId } : {};
  const f = (reason: ReasonName, message: string, attrs: Record<string, string | number | boolean> = {}): BuiltinFinding => ({
    reason,
    message: `${label}: ${message}`,
    source: 'nvml',
    entity,
    at: now,
    attrs: { ...gpuAttrs(gpu), ...mig, ...attrs },
  });
  const out: BuiltinFinding[] = [];
  if (ev.eventType & EVENT_BITS.XidCriticalError) {
    const xid = ev.eventData;
    // The Xid policy decides, as for the kernel-log line. NVML carries no NVLink5 severity token;
    // for Xid 154 and 144-150 the event worker reads the recovery action (field 230) instead.
    const d = decideXid(
      {
        code: xid,
        pci: gpu.pci,
        index: gpu.index,
        ...((xid === RECOVERY_ACTION_XID || (xid >= NVLINK5_XIDS.first && xid <= NVLINK5_XIDS.last)) && ev.recoveryAction !== null
          ? { recoveryAction: ev.recoveryAction }
          : {}),
      },
      { fatalXids: cfg.fatalXids, recoveryActionsFatal: cfg.thresholds.recoveryActionsFatal },
    );
    const r = f(d.reason, `Xid ${xid}${xid === 999 ? ' (unknown Xid)' : ''} reported through NVML events (${d.why})`, d.attrs);
    out.push({ ...r, entity: d.entity });
  }
  if (ev.eventType & EVENT_BITS.DoubleBitEccError) out.push(f('NvidiaDoubleBitError', 'uncorrectable (double-bit) ECC error event'));
  if (ev.eventType & EVENT_BITS.SingleBitEccError)
    out.push(f('NvidiaSingleBitEccError', 'corrected (single-bit) ECC error event', { eventType: 'SingleBitEccError' }));
  if (ev.eventType & EVENT_BITS.SingleBitEccErrorStorm)
    out.push(f('NvidiaSingleBitEccError', 'storm of corrected (single-bit) ECC errors', { eventType: 'SingleBitEccErrorStorm' }));
  if (ev.eventType & EVENT_BITS.DramRetirementEvent)
    out.push(
      f(
        'NvidiaRowRemapPending',
        'DRAM retirement event: a memory row was remapped (or a page retired) and takes effect at the next GPU reset',
        { eventType: 'DramRetirementEvent' },
      ),
    );
  if (ev.eventType & EVENT_BITS.DramRetirementFailure)
    out.push(f('NvidiaRowRemapFailure', 'DRAM retirement failure event: a failing memory row could not be remapped or retired'));
  if (ev.eventType & EVENT_BITS.GpuUnavailableError) out.push(f('NvidiaGPULost', 'GPU unavailable event: the GPU is no longer usable'));
  if (
    ev.eventType & EVENT_BITS.GpuRecoveryAction &&
    ev.recoveryAction !== null &&
    cfg.thresholds.recoveryActionsFatal.includes(ev.recoveryAction)
  ) {
    const name = RECOVERY_ACTION_NAMES[ev.recoveryAction] ?? `action ${ev.recoveryAction}`;
    out.push(
      f('NvidiaRecoveryActionRequired', `the driver's recommended recovery action changed to ${name} (${ev.recoveryAction})`, {
        recoveryAction: ev.recoveryAction,
      }),
    );
  }
  return out;
}
