/**
 * The shape shared by the host checks: a check reads the host, turns samples into findings and
 * healthy entities through pure functions, and the publisher sends both to the FindingSink.
 */
import type { BuiltinFinding, FindingSink, SourceName } from '../api/types.ts';
import type { ReasonName } from '../catalog/index.ts';
import type { CheckStatus } from '../scheduler/work-queue.ts';

export interface CheckContext {
  /** Where the host's / is mounted ('/' when running on the host). */
  root: string;
  signal: AbortSignal;
  /** Wall-clock ms, for Finding.at. */
  now: number;
}

/** (reasons, entity) a check looked at and found fine. */
export interface HealthyItem {
  reasons: readonly ReasonName[];
  entity: string;
  source: SourceName;
}

export interface CheckReport {
  findings: BuiltinFinding[];
  healthy: HealthyItem[];
  /** 'skipped' when there was nothing to check (no such device, service absent). */
  status?: 'ok' | 'skipped';
}

export interface HostCheck {
  name: string;
  intervalMs: number;
  budgetMs: number;
  run(ctx: CheckContext): Promise<CheckReport>;
}

/** Runs a synchronous check body the way an async `run` would: a throw becomes a rejection. */
export function settle(body: () => CheckReport): Promise<CheckReport> {
  return new Promise((resolve) => resolve(body()));
}

export const emptyReport = (status: CheckReport['status'] = 'ok'): CheckReport => ({ findings: [], healthy: [], status });

/** Per-check timing from config. */
export interface CheckTiming {
  enabled: boolean;
  intervalMs: number;
  budgetMs: number;
}

/**
 * Counts consecutive bad polls per key, for rules like "seen in two consecutive polls".
 * `observe` returns true once the key has been bad `needed` times in a row.
 */
export class Consecutive {
  private readonly counts = new Map<string, number>();
  constructor(private readonly needed: number) {}

  bad(key: string): boolean {
    const n = (this.counts.get(key) ?? 0) + 1;
    this.counts.set(key, n);
    return n >= this.needed;
  }

  good(key: string): void {
    this.counts.delete(key);
  }

  /** True while a key is bad but not yet reported: neither a finding nor healthy. */
  pending(key: string): boolean {
    const n = this.counts.get(key) ?? 0;
    return n > 0 && n < this.needed;
  }

  /** Forget keys not seen this poll (an interface that went away). */
  retain(keys: ReadonlySet<string>): void {
    for (const k of this.counts.keys()) if (!keys.has(k)) this.counts.delete(k);
  }
}

/**
 * Sends a check's report to the sink. It remembers which (reason, entity) pairs it reported, and
 * sends a healthy signal for any that the next report neither repeats nor calls healthy, so an
 * entity that disappeared (an interface removed, a process exited) still clears.
 */
export class ReportPublisher {
  private flagged = new Map<string, { reason: ReasonName; entity: string; source: SourceName }>();

  publish(out: FindingSink, report: CheckReport, at: number): CheckStatus {
    const now = new Map<string, { reason: ReasonName; entity: string; source: SourceName }>();
    for (const f of report.findings) {
      out.finding(f);
      now.set(`${f.reason}\0${f.entity}`, { reason: f.reason, entity: f.entity, source: f.source });
    }
    const covered = new Set<string>();
    for (const h of report.healthy) {
      out.healthy({ reasons: h.reasons, entity: h.entity, source: h.source, at });
      for (const r of h.reasons) covered.add(`${r}\0${h.entity}`);
    }
    for (const [key, f] of this.flagged) {
      if (!now.has(key) && !covered.has(key)) out.healthy({ reasons: [f.reason], entity: f.entity, source: f.source, at });
    }
    this.flagged = now;
    if (report.findings.length > 0) return 'fault';
    return report.status ?? 'ok';
  }
}
