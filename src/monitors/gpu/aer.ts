/**
 * PCIe AER counters from sysfs (aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal under
 * /sys/bus/pci/devices/<BDF>/) for each NVIDIA GPU and the ports above it: a polled check beside
 * the kernel-log AER rules, with the same reasons and entities (`pci:<BDF>`), so one fault seen
 * both ways is one problem. It also catches errors whose log lines the kernel rate-limited.
 *
 * Judged by the increase since the previous reading (or the one persisted before a restart on the
 * same boot; the kernel zeroes them at boot), never by the totals.
 */
import { realpathSync } from 'node:fs';
import path from 'node:path';
import { readSysFile } from '../../sources/host/read.ts';
import type { ReasonName } from '../../catalog/index.ts';
import type { CheckResult, CheckStatus } from './checks.ts';

export interface AerCounts {
  correctable: number | null;
  nonfatal: number | null;
  fatal: number | null;
}

/** One device to read: a GPU function or a port above it, and the GPU (BDF) it leads to. */
export interface AerDevice {
  bdf: string;
  role: 'gpu' | 'port';
  gpu: string;
}

export interface AerReading extends AerCounts {
  at: number;
}

export interface AerConfig {
  /** Corrected errors on one device within windowMs that raise PCIeCorrectedErrors. */
  correctedCount: number;
  correctedWindowMs: number;
}

const BDF = /^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$/;
const FILES = { correctable: 'aer_dev_correctable', nonfatal: 'aer_dev_nonfatal', fatal: 'aer_dev_fatal' } as const;

/**
 * The total of one aer_dev_* file: its TOTAL_ERR_* line (kernels since 4.17 print one), else the
 * sum of the per-error lines. null when the text has no counter at all.
 */
export function parseAerFile(text: string): number | null {
  let sum = 0;
  let any = false;
  for (const line of text.split('\n')) {
    const m = /^(\S+)\s+(\d+)\s*$/.exec(line.trim());
    if (!m) continue;
    if (m[1].startsWith('TOTAL_ERR_')) return Number(m[2]);
    sum += Number(m[2]);
    any = true;
  }
  return any ? sum : null;
}

/** The three counters of one device; null when it has no AER files (AER off, or not PCIe). */
export function readAer(sysRoot: string, bdf: string): AerCounts | null {
  const out: AerCounts = { correctable: null, nonfatal: null, fatal: null };
  let any = false;
  for (const [k, file] of Object.entries(FILES) as [keyof AerCounts, string][]) {
    const text = readSysFile(sysRoot, path.posix.join('/bus/pci/devices', bdf, file));
    if (text === undefined) continue;
    out[k] = parseAerFile(text);
    any = true;
  }
  return any ? out : null;
}

/**
 * Each GPU and the PCIe ports above it (from the device's sysfs path,
 * /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/...), each port once.
 */
export function aerDevices(sysRoot: string, gpuBdfs: readonly string[]): AerDevice[] {
  const out: AerDevice[] = [];
  const seen = new Set<string>();
  for (const raw of gpuBdfs) {
    const gpu = raw.toLowerCase();
    let real: string;
    try {
      real = realpathSync(path.join(sysRoot, 'bus/pci/devices', gpu));
    } catch {
      continue;
    }
    if (!seen.has(gpu)) out.push({ bdf: gpu, role: 'gpu', gpu });
    seen.add(gpu);
    for (const part of real.split('/').reverse()) {
      const p = part.toLowerCase();
      if (!BDF.test(p) || p === gpu || seen.has(p)) continue;
      seen.add(p);
      out.push({ bdf: p, role: 'port', gpu });
    }
  }
  return out;
}

/** What the AER check remembers per device: readings within the corrected-error window. */
export type AerHistory = Map<string, AerReading[]>;

function result(
  dev: AerDevice,
  gpuIndex: number | null,
  reason: ReasonName,
  status: CheckStatus,
  message: string,
  now: number,
  attrs: Record<string, number> = {},
): CheckResult {
  const entity = `pci:${dev.bdf}`;
  const where = `${dev.role === 'gpu' ? 'GPU' : 'PCIe port'} ${dev.bdf}${dev.role === 'port' ? ` above GPU ${dev.gpu}` : ''}`;
  const text = `${where}: ${message}`;
  const r: CheckResult = { check: `aer.${reason}`, gpu: gpuIndex, entity, reason, status, message: text };
  if (status === 'fail')
    r.finding = { reason, message: text, source: 'sysfs', entity, at: now, attrs: { device: dev.bdf, gpu: dev.gpu, ...attrs } };
  return r;
}

/**
 * Judges one device's reading against its history. Fatal and non-fatal counts raise on any
 * increase; corrected ones when they grew by `correctedCount` within the window. A counter that
 * went down (a reset) starts a new history.
 */
export function checkAer(
  dev: AerDevice,
  gpuIndex: number | null,
  cur: AerCounts | null,
  history: readonly AerReading[],
  cfg: AerConfig,
  now: number,
): { results: CheckResult[]; history: AerReading[] } {
  if (!cur)
    return { results: [result(dev, gpuIndex, 'PCIeUncorrectableError', 'skip', 'no AER counters in sysfs (AER off?)', now)], history: [] };
  const here: AerReading = { ...cur, at: now };
  const reset = history.some((h) =>
    (['correctable', 'nonfatal', 'fatal'] as const).some((k) => h[k] !== null && cur[k] !== null && cur[k] < h[k]),
  );
  const past = reset ? [] : history;
  const last = past[past.length - 1];
  if (!last) return { results: [result(dev, gpuIndex, 'PCIeUncorrectableError', 'skip', `baseline: ${fmt(cur)}`, now)], history: [here] };
  const results: CheckResult[] = [];
  const grew = (k: keyof AerCounts) => (cur[k] !== null && last[k] !== null ? cur[k] - last[k] : 0);
  const fatal = grew('fatal');
  results.push(
    fatal > 0
      ? result(
          dev,
          gpuIndex,
          'PCIeUncorrectableError',
          'fail',
          `${fatal} new uncorrectable fatal AER error${fatal > 1 ? 's' : ''} (aer_dev_fatal ${cur.fatal})`,
          now,
          {
            aerFatal: cur.fatal!,
            aerFatalIncrease: fatal,
          },
        )
      : result(dev, gpuIndex, 'PCIeUncorrectableError', 'ok', 'no new fatal AER errors', now),
  );
  const nonfatal = grew('nonfatal');
  results.push(
    nonfatal > 0
      ? result(
          dev,
          gpuIndex,
          'PCIeUncorrectableNonFatal',
          'fail',
          `${nonfatal} new uncorrectable non-fatal AER error${nonfatal > 1 ? 's' : ''} (aer_dev_nonfatal ${cur.nonfatal})`,
          now,
          { aerNonFatal: cur.nonfatal!, aerNonFatalIncrease: nonfatal },
        )
      : result(dev, gpuIndex, 'PCIeUncorrectableNonFatal', 'ok', 'no new non-fatal AER errors', now),
  );
  // Corrected errors: the increase over the window, from the oldest reading still inside it.
  const kept = [...past.filter((h) => now - h.at <= cfg.correctedWindowMs), here];
  const oldest = past.filter((h) => now - h.at > cfg.correctedWindowMs).pop() ?? kept[0];
  const corrected = cur.correctable !== null && oldest.correctable !== null ? cur.correctable - oldest.correctable : 0;
  const mins = Math.round(cfg.correctedWindowMs / 60_000);
  results.push(
    corrected >= cfg.correctedCount
      ? result(
          dev,
          gpuIndex,
          'PCIeCorrectedErrors',
          'fail',
          `${corrected} corrected AER errors within ${mins} min (limit ${cfg.correctedCount}; aer_dev_correctable ${cur.correctable})`,
          now,
          { aerCorrectable: cur.correctable!, aerCorrectableIncrease: corrected },
        )
      : result(dev, gpuIndex, 'PCIeCorrectedErrors', 'ok', `${corrected} corrected AER errors within ${mins} min`, now),
  );
  // Keep the reading just outside the window too: it is the base of the next increase.
  const outside = past.filter((h) => now - h.at > cfg.correctedWindowMs).pop();
  return { results, history: outside ? [outside, ...kept] : kept };
}

function fmt(c: AerCounts): string {
  return `correctable ${c.correctable ?? '?'}, non-fatal ${c.nonfatal ?? '?'}, fatal ${c.fatal ?? '?'}`;
}
