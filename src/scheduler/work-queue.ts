/**
 * One sequential work queue for every polled check (host checks and the GPU poll).
 *
 * Guarantees:
 * - At most one check runs at a time, so polling never stacks CPU or I/O.
 * - Each check first runs after a random startup jitter in [0, min(startupJitter, interval)),
 *   then every interval ± jitter·interval, jittered on every cycle so a fleet does not poll in step.
 *   Missed slots (the queue was busy) are skipped, never caught up in a burst.
 * - A run that overruns its budget is aborted through its AbortSignal and cut off: the queue moves
 *   on, the run's late result is ignored, and that check does not start again until the abandoned
 *   run settles, so a stuck check never piles up.
 */
import { Gauge, Counter, type Registry } from 'prom-client';
import { VigilError } from '../util/errors.ts';
import { SCHEDULER_DEFAULTS as DEFAULTS } from '../config/scheduler.ts';

export type CheckStatus = 'ok' | 'fault' | 'skipped' | 'error' | 'timeout';
export const CHECK_STATUSES: readonly CheckStatus[] = ['ok', 'fault', 'skipped', 'error', 'timeout'];

export interface ScheduledCheck {
  /** Unique, bounded (used as a metric label). */
  name: string;
  intervalMs: number;
  /** Wall-clock budget for one run; must not exceed the interval. */
  budgetMs: number;
  /** Resolve to a status, or to nothing for 'ok'; must stop work when `signal` aborts. */
  run: (signal: AbortSignal) => Promise<void | CheckStatus>;
  /** Called when this check overran its budget (the queue's onTimeout is called too). */
  onTimeout?: (budgetMs: number) => void;
}

export interface RunRecord {
  name: string;
  /** Clock time the run started. */
  startedAt: number;
  durationMs: number;
  /** Process CPU time during the run (includes other event-loop work done while it awaited). */
  cpuMs: number;
  status: CheckStatus;
  error?: unknown;
}

/** Time source; tests inject a fake one. */
export interface QueueClock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const realClock: QueueClock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

export interface WorkQueueOptions {
  registry?: Registry;
  /** Upper bound of the first-run delay (further capped by each check's interval). Default 60 s. */
  startupJitterMs?: number;
  /** Per-cycle jitter as a fraction of the interval, 0 to 0.5. Default 0.1 (±10 %). */
  jitter?: number;
  random?: () => number;
  clock?: QueueClock;
  onTimeout?: (name: string, budgetMs: number) => void;
  /** Every finished run (after metrics are updated). */
  onRun?: (record: RunRecord) => void;
}

class CheckTimeoutError extends VigilError {
  override readonly name = 'CheckTimeoutError';
  constructor(message: string) {
    super('VIGIL_E_CHECK_TIMEOUT', message);
  }
}

interface Entry {
  check: ScheduledCheck;
  /** Unjittered slot; jitter is applied around it so it does not random-walk. */
  anchor: number;
  due: number;
  /** An abandoned (timed-out) run that has not settled yet. */
  abandoned?: Promise<unknown>;
}

const CUT = Symbol('cut');

interface Metrics {
  duration: Gauge<'check'>;
  cpu: Gauge<'check'>;
  last: Gauge<'check' | 'result'>;
  runs: Counter<'check' | 'result'>;
}

function metricsOn(registry: Registry): Metrics {
  const reuse = <T>(name: string, make: () => T): T => (registry.getSingleMetric(name) as T | undefined) ?? make();
  const registers = [registry];
  return {
    duration: reuse(
      'vigil_check_duration_seconds',
      () =>
        new Gauge({
          name: 'vigil_check_duration_seconds',
          help: 'Wall time of the last run of a polled check',
          labelNames: ['check'],
          registers,
        }),
    ),
    cpu: reuse(
      'vigil_check_cpu_seconds',
      () =>
        new Gauge({
          name: 'vigil_check_cpu_seconds',
          help: 'Process CPU time of the last run of a polled check',
          labelNames: ['check'],
          registers,
        }),
    ),
    last: reuse(
      'vigil_check_last_result',
      () =>
        new Gauge({
          name: 'vigil_check_last_result',
          help: '1 for the result of the last run of a polled check, 0 for the others',
          labelNames: ['check', 'result'],
          registers,
        }),
    ),
    runs: reuse(
      'vigil_check_runs_total',
      () =>
        new Counter({
          name: 'vigil_check_runs_total',
          help: 'Runs of polled checks by result',
          labelNames: ['check', 'result'],
          registers,
        }),
    ),
  };
}

export class WorkQueue {
  private readonly entries = new Map<string, Entry>();
  private readonly clock: QueueClock;
  private readonly random: () => number;
  private readonly startupJitterMs: number;
  private readonly jitter: number;
  private readonly metrics?: Metrics;
  private timer: unknown;
  private started = false;
  private pumping = false;
  /** Serialises the pump and runAll(): the one-at-a-time guarantee. */
  private lock: Promise<void> = Promise.resolve();
  private current?: { name: string; ctl: AbortController };

  constructor(private readonly opts: WorkQueueOptions = {}) {
    this.clock = opts.clock ?? realClock;
    this.random = opts.random ?? Math.random;
    this.startupJitterMs = opts.startupJitterMs ?? DEFAULTS.startupJitter;
    this.jitter = opts.jitter ?? DEFAULTS.jitter;
    if (!(this.jitter >= 0 && this.jitter <= 0.5)) throw new RangeError('jitter must be within [0, 0.5]');
    if (opts.registry) this.metrics = metricsOn(opts.registry);
  }

  add(check: ScheduledCheck): void {
    if (this.entries.has(check.name)) throw new Error(`check ${check.name} is already scheduled`);
    if (!(check.intervalMs > 0)) throw new RangeError(`check ${check.name}: interval must be > 0`);
    if (!(check.budgetMs > 0 && check.budgetMs <= check.intervalMs)) {
      throw new RangeError(`check ${check.name}: budget must be > 0 and <= interval`);
    }
    const anchor = this.clock.now() + this.random() * Math.min(this.startupJitterMs, check.intervalMs);
    this.entries.set(check.name, { check, anchor, due: anchor });
    this.arm();
  }

  remove(name: string): boolean {
    const had = this.entries.delete(name);
    if (this.current?.name === name) this.current.ctl.abort(new Error('check removed'));
    this.arm();
    return had;
  }

  names(): string[] {
    return [...this.entries.keys()];
  }

  /** When each check is next due (clock time); for diagnostics and tests. */
  dueTimes(): Record<string, number> {
    return Object.fromEntries([...this.entries].map(([n, e]) => [n, e.due]));
  }

  /** Name of the check running now, if any. */
  get running(): string | undefined {
    return this.current?.name;
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    this.arm();
  }

  /** Stops scheduling and aborts the running check; resolves once the queue is idle. */
  async stop(): Promise<void> {
    this.started = false;
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.current?.ctl.abort(new Error('queue stopped'));
    await this.lock;
  }

  /** Runs every check (or the named ones) once, now, one after another (one-shot mode, benchmarks, tests). */
  async runAll(names?: readonly string[]): Promise<RunRecord[]> {
    const records: RunRecord[] = [];
    await this.exclusive(async () => {
      for (const e of [...this.entries.values()]) {
        if (names && !names.includes(e.check.name)) continue;
        if (e.abandoned) {
          // still stuck from an earlier run: never two of the same check
          this.notifyTimeout(e.check);
          records.push({ name: e.check.name, startedAt: this.clock.now(), durationMs: 0, cpuMs: 0, status: 'timeout' });
        } else records.push(await this.execute(e));
      }
    });
    return records;
  }

  private exclusive(fn: () => Promise<void>): Promise<void> {
    const next = this.lock.then(fn);
    this.lock = next.catch(() => undefined);
    return next;
  }

  private arm(): void {
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    if (!this.started || this.pumping || this.entries.size === 0) return;
    let earliest = Infinity;
    for (const e of this.entries.values()) earliest = Math.min(earliest, e.due);
    const delay = Math.min(2 ** 31 - 1, Math.max(0, earliest - this.clock.now())); // setTimeout's limit
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      void this.pump();
    }, delay);
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      await this.exclusive(async () => {
        for (;;) {
          if (!this.started) return;
          const e = this.nextDue();
          if (!e) return;
          if (e.abandoned)
            this.notifyTimeout(e.check); // still stuck: say so, do not start another
          else await this.execute(e);
          if (this.entries.get(e.check.name) === e) this.reschedule(e);
        }
      });
    } finally {
      this.pumping = false;
      this.arm();
    }
  }

  private nextDue(): Entry | undefined {
    const now = this.clock.now();
    let best: Entry | undefined;
    for (const e of this.entries.values()) if (e.due <= now && (!best || e.due < best.due)) best = e;
    return best;
  }

  private reschedule(e: Entry): void {
    const interval = e.check.intervalMs;
    const now = this.clock.now();
    e.anchor += interval;
    if (e.anchor <= now) e.anchor += (Math.floor((now - e.anchor) / interval) + 1) * interval;
    e.due = e.anchor + (2 * this.random() - 1) * this.jitter * interval;
  }

  private notifyTimeout(check: ScheduledCheck): void {
    for (const fn of [check.onTimeout?.bind(check), (b: number) => this.opts.onTimeout?.(check.name, b)]) {
      try {
        fn?.(check.budgetMs);
      } catch {
        // a listener's failure must not stop the queue
      }
    }
  }

  private async execute(e: Entry): Promise<RunRecord> {
    const { check } = e;
    const ctl = new AbortController();
    this.current = { name: check.name, ctl };
    const startedAt = this.clock.now();
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    let timedOut = false;
    const budget = this.clock.setTimeout(() => {
      timedOut = true;
      ctl.abort(new CheckTimeoutError(`${check.name} overran its ${check.budgetMs}ms budget`));
    }, check.budgetMs);
    const cut = new Promise<typeof CUT>((resolve) => ctl.signal.addEventListener('abort', () => resolve(CUT), { once: true }));
    const run = Promise.resolve().then(() => check.run(ctl.signal));
    let status: CheckStatus;
    let error: unknown;
    try {
      const r = await Promise.race([run, cut]);
      status = r === CUT ? (timedOut ? 'timeout' : 'skipped') : (r ?? 'ok');
      if (r === CUT) {
        e.abandoned = run.catch(() => undefined).finally(() => (e.abandoned = undefined));
      }
    } catch (err) {
      status = timedOut ? 'timeout' : ctl.signal.aborted ? 'skipped' : 'error';
      error = err;
    } finally {
      this.clock.clearTimeout(budget);
      this.current = undefined;
    }
    const cpu = process.cpuUsage(cpu0);
    const record: RunRecord = {
      name: check.name,
      startedAt,
      durationMs: performance.now() - t0,
      cpuMs: (cpu.user + cpu.system) / 1000,
      status,
      ...(error !== undefined ? { error } : {}),
    };
    this.observe(record);
    if (status === 'timeout') this.notifyTimeout(check);
    this.opts.onRun?.(record);
    return record;
  }

  private observe(r: RunRecord): void {
    const m = this.metrics;
    if (!m) return;
    m.duration.set({ check: r.name }, r.durationMs / 1000);
    m.cpu.set({ check: r.name }, r.cpuMs / 1000);
    for (const s of CHECK_STATUSES) m.last.set({ check: r.name, result: s }, s === r.status ? 1 : 0);
    m.runs.inc({ check: r.name, result: r.status });
  }
}
