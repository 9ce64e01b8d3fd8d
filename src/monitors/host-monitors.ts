/**
 * The polled monitors of registry.ts (kernel, networking, storage, container runtime) as one Monitor:
 * it puts each enabled check on the shared work queue and publishes reports to the FindingSink.
 *
 * Wiring:
 *   const sched = cfg.monitors.scheduler;
 *   const queue = new WorkQueue({ registry, startupJitterMs: sched.startupJitter, jitter: sched.jitter });
 *   const host = new HostMonitors(cfg.monitors, { scheduler: queue, log });
 *   queue.add({ name: 'gpu.poll', intervalMs, budgetMs, run: (signal) => ... }); // other pollers
 *   await host.start(sink); // adds its checks and starts the queue
 */
import type { Registry } from 'prom-client';
import type { FindingSink, Monitor } from '../api/types.ts';
import { errorMessage } from '../util/errors.ts';
import { WorkQueue, type CheckStatus, type RunRecord, type ScheduledCheck } from '../scheduler/work-queue.ts';
import { ReportPublisher, type HostCheck } from './host-check.ts';
import type { HostDeps } from './host-deps.ts';
import { POLLED_MONITORS, type HostMonitorsConfig } from './registry.ts';

export type { HostDeps } from './host-deps.ts';

/** The subset of a pino logger used here. */
export interface HostLog {
  warn(obj: object, msg: string): void;
  debug?(obj: object, msg: string): void;
}

export interface HostMonitorsOptions {
  /** A shared queue (the GPU poll uses it too); without one, HostMonitors owns a private queue. */
  scheduler?: WorkQueue;
  /** For the private queue's metrics. */
  registry?: Registry;
  log?: HostLog;
  deps?: Partial<HostDeps>;
}

/** Every enabled host check, in the registry's order. */
export function buildHostChecks(cfg: HostMonitorsConfig, deps: Partial<HostDeps> = {}): HostCheck[] {
  return POLLED_MONITORS.flatMap((m) => m.checksFrom(cfg, deps));
}

/** The module a check belongs to (its name's prefix): what it watches, and its reason while it cannot run. */
const moduleOf = (check: HostCheck) => POLLED_MONITORS.find((m) => check.name.startsWith(`${m.name}.`));

export class HostMonitors implements Monitor {
  readonly name = 'host';
  readonly scheduler: WorkQueue;
  readonly checks: readonly HostCheck[];
  private readonly owned: boolean;
  private readonly log: HostLog | undefined;
  private added: string[] = [];

  constructor(
    private readonly cfg: HostMonitorsConfig,
    opts: HostMonitorsOptions = {},
  ) {
    this.log = opts.log;
    this.owned = !opts.scheduler;
    this.scheduler =
      opts.scheduler ??
      new WorkQueue({
        ...(opts.registry ? { registry: opts.registry } : {}),
        startupJitterMs: cfg.scheduler.startupJitter,
        jitter: cfg.scheduler.jitter,
      });
    this.checks = buildHostChecks(cfg, opts.deps);
  }

  start(out: FindingSink): void {
    if (this.added.length > 0) return;
    for (const check of this.checks) {
      this.scheduler.add(this.toScheduled(check, out));
      this.added.push(check.name);
    }
    this.scheduler.start();
  }

  async stop(): Promise<void> {
    for (const name of this.added) this.scheduler.remove(name);
    this.added = [];
    if (this.owned) await this.scheduler.stop();
  }

  /** Runs every host check once, now, on the queue (one-shot mode, benchmarks); after start(). */
  runOnce(): Promise<RunRecord[]> {
    return this.scheduler.runAll(this.added);
  }

  /** Wraps a check: runs it against the host root, publishes unless it was cut off. */
  toScheduled(check: HostCheck, out: FindingSink): ScheduledCheck {
    const publisher = new ReportPublisher();
    const root = this.cfg.hostRoot;
    const domain = moduleOf(check);
    // A check that cannot run (throws, or overruns its budget) leaves its condition blind: Unknown,
    // until a run completes. Reported on change only.
    let blind = false;
    const sees = (up: boolean, why?: string) => {
      if (!domain || up === !blind) return;
      blind = !up;
      out.source({
        component: `host.${check.name}`,
        conditions: [domain.condition],
        up,
        at: Date.now(),
        ...(up ? {} : { reason: domain.unknownReason, message: `check ${check.name} cannot run: ${why ?? 'unknown error'}` }),
      });
    };
    return {
      name: check.name,
      intervalMs: check.intervalMs,
      budgetMs: check.budgetMs,
      run: async (signal): Promise<CheckStatus> => {
        const now = Date.now();
        try {
          const report = await check.run({ root, signal, now });
          if (signal.aborted) return 'timeout'; // late: the queue has moved on, drop it
          sees(true);
          return publisher.publish(out, report, now);
        } catch (err) {
          if (signal.aborted) throw err;
          this.log?.warn({ check: check.name, err }, 'host check failed');
          sees(false, errorMessage(err));
          return 'error';
        }
      },
      onTimeout: (budgetMs) => {
        this.log?.warn({ check: check.name, budgetMs }, 'host check overran its budget');
        sees(false, `overran its ${budgetMs} ms budget`);
        out.finding({
          reason: 'MonitorCheckTimeout',
          source: 'engine',
          entity: `check:${check.name}`,
          message: `check ${check.name} overran its ${budgetMs} ms budget and was cut off`,
          at: Date.now(),
          attrs: { check: check.name, budgetMs },
        });
      },
    };
  }
}
