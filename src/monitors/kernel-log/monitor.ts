/**
 * The kernel-log monitor: /dev/kmsg records -> KernelLogClassifier -> findings.
 *
 * A finding's `at` is the record's time (KmsgReader.timeOf): now for records logged while
 * running, boot time + timestamp for records that were already in the ring at start, so replayed
 * records carry when they happened and the engine's TTLs and thresholds count from there. The state store persists `cursor()` so a
 * restart neither replays nor skips records; `onCursor` fires after each batch to prompt a save.
 */
import type { Registry } from 'prom-client';
import type { FindingSink, Monitor } from '../../api/types.ts';
import type { KmsgRecord } from '../../sources/kmsg/parse.ts';
import { KmsgReader, type KmsgCursor, type KmsgReaderOptions } from '../../sources/kmsg/reader.ts';
import { KernelLogClassifier, type ClassifierOptions } from './classify.ts';
import type { NpdCondition } from './npd.ts';
import { toError } from '../../util/errors.ts';

/** What the monitor needs from a reader (KmsgReader; tests pass a fake). */
export interface KmsgReaderLike {
  start(): void;
  stop(): Promise<void>;
  cursor(): KmsgCursor;
  timeOf(rec: KmsgRecord): number;
}

export interface KernelLogMonitorOptions {
  /** The persisted cursor from the state store, if any. */
  cursor?: KmsgCursor;
  /** Reader settings: path, lookbackMs, newBootLookbackMs, batchSize, wait, intervalMs. */
  reader?: Omit<KmsgReaderOptions, 'cursor' | 'registry' | 'onRecords' | 'onLost' | 'onShed' | 'onError' | 'keep'>;
  classifier?: ClassifierOptions;
  registry?: Registry;
  /**
   * Only classify records the kernel wrote (facility 0). Off by default, because fault injection
   * in tests writes to /dev/kmsg from user space (facility 1 and up).
   */
  kernelOnly?: boolean;
  /** Called on each ring overrun with the records lost and the total since start (to log it once). */
  onLost?: (lost: number, total: number) => void;
  /** Called when the reader shed noise under load, with the count and the total since start. */
  onShed?: (shed: number, total: number) => void;
  /** How long /healthz shows the monitor degraded after records were lost (default 10 min). */
  lostDegradedMs?: number;
  /** Called after every batch with the new cursor (e.g. to schedule a state save). */
  onCursor?: (cursor: KmsgCursor) => void;
  onError?: (err: Error) => void;
  now?: () => number;
  /** Test seam. */
  createReader?: (opts: KmsgReaderOptions) => KmsgReaderLike;
}

/**
 * Warm-ups run the path of a fault this many times: V8 gives a function its inline caches only
 * from its 8th call (--invocation-count-for-feedback-allocation); before that, every property
 * access takes the slow path, and the first fault of a fresh agent would be one of those calls.
 */
const WARM_UP_PASSES = 10;

/** Lines of the kind a fresh agent must answer fastest, for warm-ups: GPUs fallen off the bus (Fatal), one per pass. */
export const WARM_UP_XID_LINES: readonly string[] = Array.from(
  { length: WARM_UP_PASSES },
  (_, i) => `NVRM: Xid (PCI:0000:00:${i.toString(16).padStart(2, '0')}): 79, pid=0, name=warm-up, GPU has fallen off the bus.`,
);

export class KernelLogMonitor implements Monitor {
  readonly name = 'kernel-log';
  /** Extra condition types declared by the loaded NPD files, for the engine to manage. */
  readonly npdConditions: readonly NpdCondition[];
  private readonly classifier: KernelLogClassifier;
  private readonly now: () => number;
  private reader: KmsgReaderLike | undefined;
  private lastCursor: KmsgCursor | undefined;
  private out: FindingSink | undefined;
  /** Records lost to ring overruns since start (also in vigil_kmsg_lost_records_total). */
  lost = 0;
  /** Noise records the reader shed under load since start (also in vigil_kmsg_shed_records_total). */
  shed = 0;
  private lastLossAt = 0;

  constructor(private readonly opts: KernelLogMonitorOptions = {}) {
    // A line that says an entity recovered ("nfs: server X OK") goes to the sink as a healthy signal.
    this.classifier = new KernelLogClassifier({ ...opts.classifier, onHealthy: (h) => this.out?.healthy(h) });
    this.now = opts.now ?? Date.now;
    this.lastCursor = opts.cursor;
    const seen = new Map<string, NpdCondition>();
    for (const c of opts.classifier?.npd ?? []) for (const cond of c.conditions) if (!seen.has(cond.type)) seen.set(cond.type, cond);
    this.npdConditions = [...seen.values()];
  }

  /** For /healthz: whether it reads, and what it lost (degraded for a while after a loss). */
  status(): { state: 'ok' | 'degraded' | 'failed'; message: string } {
    if (!this.reader) return { state: 'failed', message: 'not reading the kernel log' };
    const shed = this.shed ? `; ${this.shed} noise records (matching no rule) shed under load` : '';
    if (this.lost === 0) return { state: 'ok', message: `reading the kernel log; no records lost${shed}` };
    const message = `${this.lost} records lost to kernel ring overruns since start, last at ${new Date(this.lastLossAt).toISOString()}${shed}`;
    const recent = this.now() - this.lastLossAt < (this.opts.lostDegradedMs ?? 10 * 60_000);
    return { state: recent ? 'degraded' : 'ok', message };
  }

  /** The cursor to persist; undefined until the reader has started and no cursor was given. */
  cursor(): KmsgCursor | undefined {
    return this.reader?.cursor() ?? this.lastCursor;
  }

  /** PCI address -> GPU UUID learnt from the driver's log lines. */
  gpuUuids(): ReadonlyMap<string, string> {
    return this.classifier.gpuUuids();
  }

  /** Compiles the patterns a fresh agent's first fault takes (an Xid), on this monitor's own classifier. */
  warm(): void {
    this.classifier.warm(WARM_UP_XID_LINES);
  }

  /** Opens /dev/kmsg; throws if it cannot be read (the caller reports the monitor as failed). */
  start(out: FindingSink): void {
    if (this.reader) return;
    this.out = out;
    const ro: KmsgReaderOptions = {
      ...this.opts.reader,
      onRecords: (recs) => this.onRecords(recs),
      onLost: (n) => {
        this.lost += n;
        this.lastLossAt = this.now();
        this.opts.onLost?.(n, this.lost);
      },
      onShed: (n) => {
        this.shed += n;
        this.opts.onShed?.(n, this.shed);
      },
      onError: (err) => this.opts.onError?.(err),
      keep: this.classifier.keepPatterns(),
    };
    if (this.lastCursor) ro.cursor = this.lastCursor;
    if (this.opts.registry) ro.registry = this.opts.registry;
    // Set before start(): the first batch is delivered synchronously from start().
    this.reader = (this.opts.createReader ?? ((o) => new KmsgReader(o)))(ro);
    try {
      this.reader.start();
    } catch (err) {
      this.reader = undefined;
      throw err;
    }
  }

  async stop(): Promise<void> {
    const r = this.reader;
    if (!r) return;
    this.lastCursor = r.cursor();
    this.reader = undefined;
    await r.stop();
  }

  private onRecords(recs: KmsgRecord[]): void {
    const out = this.out;
    const reader = this.reader;
    if (!out) return;
    const now = this.now();
    for (const rec of recs) {
      if (this.opts.kernelOnly && rec.facility !== 0) continue;
      const at = Math.min(now, reader ? reader.timeOf(rec) : now);
      try {
        for (const f of this.classifier.classify(rec, at)) out.finding(f);
      } catch (err) {
        this.opts.onError?.(toError(err));
      }
    }
    const c = reader?.cursor();
    if (c && this.opts.onCursor) this.opts.onCursor(c);
  }
}
