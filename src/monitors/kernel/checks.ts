/** Kernel checks: samples in, findings and healthy entities out. No I/O. */
import { finding, pct } from '../host-finding.ts';
import type { CheckReport, Consecutive } from '../host-check.ts';
import type { KernelConfig } from './config.ts';

export interface LimitsSample {
  /** Kernel scheduling entities (threads), from /proc/loadavg. */
  threads?: number;
  pidMax?: number;
  threadsMax?: number;
  /** /proc/sys/fs/file-nr: allocated handles and the maximum. */
  filesAllocated?: number;
  fileMax?: number;
}

export function checkLimits(s: LimitsSample, cfg: KernelConfig, at: number): CheckReport {
  const r: CheckReport = { findings: [], healthy: [] };
  // Every thread takes a PID, and fork fails at whichever limit is lower.
  const limit = Math.min(s.pidMax ?? Infinity, s.threadsMax ?? Infinity);
  if (s.threads !== undefined && Number.isFinite(limit) && limit > 0) {
    const used = s.threads / limit;
    if (used >= cfg.pidUsageRatio) {
      r.findings.push(
        finding('ApproachingKernelPidMax', 'procfs', '', `${s.threads} threads use ${pct(used)} of the PID limit ${limit}`, at, {
          threads: s.threads,
          limit,
        }),
      );
    } else r.healthy.push({ reasons: ['ApproachingKernelPidMax'], entity: '', source: 'procfs' });
  }
  if (s.filesAllocated !== undefined && s.fileMax !== undefined && s.fileMax > 0) {
    const used = s.filesAllocated / s.fileMax;
    if (used >= cfg.openFilesRatio) {
      r.findings.push(
        finding(
          'ApproachingMaxOpenFiles',
          'procfs',
          '',
          `${s.filesAllocated} file handles use ${pct(used)} of fs.file-max ${s.fileMax}`,
          at,
          {
            allocated: s.filesAllocated,
            max: s.fileMax,
          },
        ),
      );
    } else r.healthy.push({ reasons: ['ApproachingMaxOpenFiles'], entity: '', source: 'procfs' });
  }
  if (r.findings.length === 0 && r.healthy.length === 0) r.status = 'skipped';
  return r;
}

export function checkZombies(zombies: number, streak: Consecutive, cfg: KernelConfig, at: number): CheckReport {
  if (zombies < cfg.zombieCount) {
    streak.good('zombies');
    return { findings: [], healthy: [{ reasons: ['ExcessiveZombieProcesses'], entity: '', source: 'procfs' }] };
  }
  if (!streak.bad('zombies')) return { findings: [], healthy: [] };
  return {
    findings: [finding('ExcessiveZombieProcesses', 'procfs', '', `${zombies} zombie processes are waiting to be reaped`, at, { zombies })],
    healthy: [],
  };
}

/** adjtimex(2) output. */
export interface TimexSample {
  status: number;
  /** Clock state returned by adjtimex: TIME_OK 0 ... TIME_ERROR 5. */
  state: number;
  maxErrorUs: number;
}

export const STA_UNSYNC = 0x0040;

export function checkClock(t: TimexSample | undefined, at: number): CheckReport {
  if (!t) return { findings: [], healthy: [], status: 'skipped' };
  if (t.status & STA_UNSYNC) {
    return {
      findings: [
        finding(
          'ClockUnsynchronized',
          'procfs',
          '',
          `the kernel clock is not synchronised (STA_UNSYNC; max error ${t.maxErrorUs} µs)`,
          at,
          {
            status: t.status,
            maxErrorUs: t.maxErrorUs,
          },
        ),
      ],
      healthy: [],
    };
  }
  return { findings: [], healthy: [{ reasons: ['ClockUnsynchronized'], entity: '', source: 'procfs' }] };
}

/**
 * WARNING splats in kernel-log text (klogctl READ_ALL format: `<4>[  12.345678] WARNING: ...`)
 * newer than `afterTs` (seconds since boot). Without printk timestamps records cannot be told
 * apart, so `lastTs` is undefined and the caller compares totals.
 */
export function countKernelWarnings(text: string, afterTs: number): { count: number; total: number; lastTs?: number } {
  const re = /^(?:<\d+>)?(?:\[\s*(\d+\.\d+)\]\s*)?WARNING: /gm;
  let count = 0;
  let total = 0;
  let lastTs: number | undefined;
  for (const m of text.matchAll(re)) {
    total++;
    if (m[1] === undefined) continue;
    const ts = Number(m[1]);
    if (ts > afterTs) count++;
    lastTs = lastTs === undefined ? ts : Math.max(lastTs, ts);
  }
  // The newest timestamp of any record is the cursor, not just of warnings.
  const tsRe = /^(?:<\d+>)?\[\s*(\d+\.\d+)\]/gm;
  let newest: number | undefined;
  for (const m of text.matchAll(tsRe)) newest = Number(m[1]);
  return { count, total, ...(newest !== undefined ? { lastTs: Math.max(newest, lastTs ?? 0) } : lastTs !== undefined ? { lastTs } : {}) };
}

/** `via`: /sys/kernel/warn_count (exact, Linux >= 6.2) or the kernel log ring (older kernels). */
export function checkWarnings(newWarnings: number | undefined, via: 'warn_count' | 'klog', cfg: KernelConfig, at: number): CheckReport {
  if (newWarnings === undefined) return { findings: [], healthy: [], status: 'skipped' };
  const source = via === 'klog' ? 'kmsg' : 'sysfs';
  if (newWarnings >= cfg.warningsPerWindow) {
    return {
      findings: [
        finding('RepeatedKernelWarnings', source, '', `${newWarnings} kernel WARNINGs since the last poll (${via})`, at, {
          warnings: newWarnings,
          via,
        }),
      ],
      healthy: [],
    };
  }
  return { findings: [], healthy: [{ reasons: ['RepeatedKernelWarnings'], entity: '', source }] };
}
