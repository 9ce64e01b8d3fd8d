/**
 * The one FindingSink that records what a monitor publishes, for unit and integration tests: the
 * findings (with arrival times), healthy signals and source reports, and a wait for a finding.
 */
import type { Finding, FindingSink, HealthySignal, SourceReport } from '../../src/api/index.ts';
import { slow } from './slowdown.ts';

export class RecordingSink implements FindingSink {
  findings: (Finding & { receivedAt: number })[] = [];
  healthySignals: HealthySignal[] = [];
  private waiters: (() => void)[] = [];

  finding(f: Finding): void {
    this.findings.push({ ...f, receivedAt: Date.now() });
    this.wake();
  }

  healthy(h: HealthySignal): void {
    this.healthySignals.push(h);
    this.wake();
  }

  sources: SourceReport[] = [];

  source(r: SourceReport): void {
    this.sources.push(r);
    this.wake();
  }

  reasons(): string[] {
    return this.findings.map((f) => f.reason);
  }

  healthyFor(reason: string, entity?: string): HealthySignal[] {
    return this.healthySignals.filter(
      (h) => (h.reasons as readonly string[]).includes(reason) && (entity === undefined || h.entity === entity),
    );
  }

  clear(): void {
    this.findings = [];
    this.healthySignals = [];
  }

  /** Resolves with the first finding matching pred (past or future); rejects after timeoutMs (times VIGIL_TEST_SLOWDOWN). */
  async waitFor(pred: (f: Finding) => boolean, timeoutMs = 3_000): Promise<Finding & { receivedAt: number }> {
    timeoutMs = slow(timeoutMs);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.findings.find(pred);
      if (hit) return hit;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no matching finding within ${timeoutMs} ms; got ${JSON.stringify(this.reasons())}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
}
