/**
 * Main-thread side of the NVML source: spawns the worker threads (worker.ts), talks to them, and
 * watches every NVML call through a shared control array. A call that outlives its budget is
 * reported, its worker is terminated and unref'd (a thread stuck in native code only dies when the
 * call returns, and must never keep the process alive), and a fresh worker is started on demand.
 *
 * Nothing here calls NVML or loads koffi, so a hung GPU can never stall the main thread.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type * as KoffiModule from 'koffi';
import { NvmlError, NvmlLoadError, NvmlTimeoutError, NvmlWorkerGoneError } from './errors.ts';
import type { NvmlMetrics } from './metrics.ts';
import {
  CTL_BUSY,
  CTL_FN,
  CTL_GPU,
  CTL_SEQ,
  CTL_SIZE,
  CTL_STOP,
  NVML_FUNCTION_NAMES,
  type EventDevice,
  type EventMessage,
  type InitResult,
  type NvmlEvent,
  type PollRequest,
  type PollRequestArgs,
  type PollResponse,
  type PollResult,
  type RawIdentity,
  type SerializedError,
  type WorkerInit,
} from './protocol.ts';

export type LogFn = (obj: Record<string, unknown>, msg: string) => void;

export interface NvmlClientOptions {
  libraryPath: string;
  /** Budget for one NVML call (an event wait gets its own timeout on top). */
  watchdogMs: number;
  metrics: NvmlMetrics;
  log: LogFn;
  /**
   * Poll client: end the poll worker once it has been idle this long, when `retireWhen()` says so
   * (the GPU monitor: while the event worker holds its own NVML initialisation, so NVML stays up
   * and the next poll's init is a reference count). A worker thread costs ~9 MiB RSS, and polls
   * are minutes apart. The next request starts a fresh worker.
   */
  retireWhen?: () => boolean;
  /** Idle time before the poll worker is retired (default 10 s). */
  retireAfterMs?: number;
}

/** A stuck call seen by the watchdog. */
export interface HangReport {
  fn: string;
  gpuIndex: number | null;
  afterMs: number;
}

/** Starts worker.ts (or .js when built) beside `self`: the NVML worker by default, DCGM's from sources/dcgm. */
export function spawnWorker(init: WorkerInit | object, self: string = import.meta.url): Worker {
  if (!self.endsWith('.ts')) return new Worker(new URL('./worker.js', self), { workerData: init });
  // Running from TypeScript sources (tsx): the worker needs tsx registered before it imports
  // worker.ts, whether or not the parent was started with --import tsx.
  const tsx = import.meta.resolve('tsx/esm/api');
  const entry = new URL('./worker.ts', self).href;
  const boot = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(entry)}); });`;
  return new Worker(boot, { eval: true, workerData: init });
}

/** Rebuilds a typed error from what the worker sent. */
export function reviveError(e: SerializedError): Error {
  if (e.name === 'NvmlError' && e.fn !== undefined && e.code !== undefined) return new NvmlError(e.fn, e.code);
  if (e.name === 'NvmlLoadError') return new NvmlLoadError(e.libraryPath ?? '', e.message);
  const err = new Error(e.message);
  err.name = e.name;
  return err;
}

/**
 * Watches one worker's control array. A call counts as stuck once the same call (same SEQ) has
 * been in progress for longer than its budget.
 */
export class CallWatch {
  private seq = -1;
  private since = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly ctl: Int32Array,
    private readonly budgetMs: (fn: string) => number,
    private readonly onHang: (h: HangReport) => void,
    watchdogMs: number,
    /** Names of the calls by CTL_FN index (DCGM's worker passes its own). */
    private readonly names: readonly string[] = NVML_FUNCTION_NAMES,
  ) {
    this.timer = setInterval(() => this.check(), Math.max(10, Math.min(250, watchdogMs / 4)));
    this.timer.unref();
  }

  private check(): void {
    if (Atomics.load(this.ctl, CTL_BUSY) !== 1) {
      this.seq = -1;
      return;
    }
    const seq = Atomics.load(this.ctl, CTL_SEQ);
    const now = Date.now();
    if (seq !== this.seq) {
      this.seq = seq;
      this.since = now;
      return;
    }
    const fn = this.names[Atomics.load(this.ctl, CTL_FN)] ?? 'unknown';
    if (now - this.since < this.budgetMs(fn)) return;
    const gpu = Atomics.load(this.ctl, CTL_GPU);
    this.stop();
    this.onHang({ fn, gpuIndex: gpu >= 0 ? gpu : null, afterMs: now - this.since });
  }

  stop(): void {
    clearInterval(this.timer);
  }
}

/** The id of the shutdown request that retires an idle poll worker (requests count up from 1). */
const RETIRE_ID = -1;

/** Every worker told to terminate that has not exited yet (process-wide). */
const leftBehind = new Set<Worker>();

/** Lets go of a worker that may be stuck in native code: it dies when its call returns. */
export function abandon(w: Worker, stuck: Set<Worker> | null): void {
  if (w.threadId === -1) return; // already exited
  leftBehind.add(w);
  w.once('exit', () => leftBehind.delete(w));
  if (stuck) {
    stuck.add(w);
    w.once('exit', () => stuck.delete(w));
  }
  void w.terminate().catch(() => {});
  w.unref();
}

/**
 * NVML worker threads that were terminated but have not exited, because they are still inside a
 * hung NVML call. Node joins every worker thread at process exit (process.exit() included), so
 * while this is above zero the process cannot exit until those calls return; use exitNow().
 */
export function nvmlThreadsLeft(): number {
  return leftBehind.size;
}

/**
 * Ends the process at once with libc _exit(), skipping Node's join of worker threads stuck in
 * NVML. Flush logs first: nothing else runs after this (no 'exit' handlers, no buffered writes).
 */
export function exitNow(code: number): never {
  const koffi = createRequire(import.meta.url)('koffi') as typeof KoffiModule;
  const libcExit = koffi.load('libc.so.6').func('void _exit(int status)') as (status: number) => void;
  libcExit(code);
  throw new Error('unreachable: _exit returned');
}

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

interface LivePoll {
  worker: Worker;
  ctl: Int32Array;
  watch: CallWatch;
  pending: Map<number, Pending>;
  initialised: boolean;
}

/**
 * Request/response client for the poll worker. One request at a time is the normal case (the
 * monitor's polls are sequential), but the map keeps it correct if callers overlap.
 */
export class NvmlPollClient {
  private live: LivePoll | null = null;
  private readonly stuck = new Set<Worker>();
  private nextId = 1;
  private closed = false;
  /** The last call the watchdog caught, until a poll completes again. */
  lastHang: HangReport | null = null;
  /** GPU identities as the worker read them, kept even if it hangs later in the same poll. */
  private readonly identities = new Map<number, RawIdentity>();
  private retireTimer: NodeJS.Timeout | undefined;
  /** Poll workers retired while idle (tests, metrics). */
  retired = 0;

  constructor(private readonly opts: NvmlClientOptions) {}

  /** Workers abandoned while stuck in an NVML call that has not returned yet. */
  get stuckWorkers(): number {
    return this.stuck.size;
  }

  get initialised(): boolean {
    return this.live?.initialised ?? false;
  }

  /** Whether a poll worker thread is running now (it is retired between polls while `retireWhen()` holds). */
  get workerRunning(): boolean {
    return this.live !== null;
  }

  identityAt(index: number): RawIdentity | undefined {
    return this.identities.get(index);
  }

  /** Loads the library and calls nvmlInit_v2 in a (new, if needed) worker. */
  async init(): Promise<InitResult> {
    const res = (await this.request({ id: 0, op: 'init' })) as InitResult;
    if (this.live) this.live.initialised = true;
    return res;
  }

  async poll(args: PollRequestArgs): Promise<PollResult> {
    const res = (await this.request({ id: 0, op: 'poll', args })) as PollResult;
    this.lastHang = null;
    return res;
  }

  /** Drops the worker (e.g. to re-initialise NVML after a GPU was lost). */
  reset(why: string): void {
    if (!this.live) return;
    this.opts.metrics.workerRestarts.inc({ role: 'poll', why });
    this.teardown(new NvmlWorkerGoneError(`NVML poll worker reset: ${why}`), null);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retireTimer);
    const live = this.live;
    if (!live) return;
    // Best effort: let NVML shut down cleanly if the worker is responsive, but never wait long.
    const bye = this.request({ id: 0, op: 'shutdown' }).catch(() => {});
    await Promise.race([bye, new Promise((r) => setTimeout(r, 200).unref())]);
    const exited = new Promise((r) => live.worker.once('exit', r));
    this.teardown(new NvmlWorkerGoneError('NVML client closed'), null);
    // A responsive worker exits at once; only a hung one is left behind (see nvmlThreadsLeft()).
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([exited, new Promise((r) => (timer = setTimeout(r, 500)))]);
    clearTimeout(timer);
  }

  private ensure(): LivePoll {
    if (this.live) return this.live;
    if (this.closed) throw new NvmlWorkerGoneError('NVML client closed');
    const control = new SharedArrayBuffer(CTL_SIZE * 4);
    const ctl = new Int32Array(control);
    const worker = spawnWorker({ role: 'poll', libraryPath: this.opts.libraryPath, control, eventWaitMs: 0, eventMask: 0 });
    const live: LivePoll = {
      worker,
      ctl,
      pending: new Map(),
      initialised: false,
      watch: new CallWatch(
        ctl,
        () => this.opts.watchdogMs,
        (h) => this.onHang(live, h),
        this.opts.watchdogMs,
      ),
    };
    worker.on('message', (m: PollResponse) => {
      if ('progress' in m) {
        this.identities.set(m.progress.index, m.progress);
        return;
      }
      this.opts.metrics.record(m.stats);
      const p = live.pending.get(m.id);
      if (!p) return;
      live.pending.delete(m.id);
      clearTimeout(p.timer);
      if (m.ok) p.resolve(m.result);
      else p.reject(reviveError(m.error));
      if (live.pending.size === 0) this.scheduleRetire(live);
    });
    worker.on('error', (err) => {
      if (this.live !== live) return;
      this.opts.log({ err: err.message }, 'NVML poll worker crashed');
      this.opts.metrics.workerRestarts.inc({ role: 'poll', why: 'crash' });
      this.teardown(new NvmlWorkerGoneError(`NVML poll worker crashed: ${err.message}`), null);
    });
    worker.on('exit', () => {
      if (this.live === live) this.teardown(new NvmlWorkerGoneError('NVML poll worker exited'), null);
    });
    this.live = live;
    return live;
  }

  private scheduleRetire(live: LivePoll): void {
    clearTimeout(this.retireTimer);
    if (!this.opts.retireWhen) return;
    this.retireTimer = setTimeout(() => this.retire(live), this.opts.retireAfterMs ?? 10_000);
    this.retireTimer.unref();
  }

  /**
   * Ends an idle poll worker: detached first (a request from now on starts a fresh one), then
   * nvmlShutdown drops its NVML reference and the thread ends. A shutdown that hangs leaves the
   * thread stuck like any hung call (counted in stuckWorkers).
   */
  private retire(live: LivePoll): void {
    if (this.live !== live || live.pending.size > 0 || this.closed || !this.opts.retireWhen?.()) return;
    this.live = null;
    live.watch.stop();
    this.retired++;
    const w = live.worker;
    const done = (ok: boolean) => {
      clearTimeout(timer);
      w.off('message', onMessage);
      if (ok) void w.terminate().catch(() => {});
      else {
        this.opts.log({ afterMs: this.opts.watchdogMs }, 'NVML poll worker did not shut down; abandoning it');
        abandon(w, this.stuck);
      }
    };
    const onMessage = (m: PollResponse) => {
      if (!('progress' in m) && m.id === RETIRE_ID) done(true);
    };
    const timer = setTimeout(() => done(false), this.opts.watchdogMs);
    timer.unref();
    w.on('message', onMessage);
    w.postMessage({ id: RETIRE_ID, op: 'shutdown' } satisfies PollRequest);
  }

  private request(req: PollRequest): Promise<unknown> {
    // Backstop for a worker stuck outside NVML; the per-call watchdog normally fires first.
    const backstopMs = Math.max(60_000, this.opts.watchdogMs * 10);
    return new Promise((resolve, reject) => {
      // A throw from ensure() (closed, or the worker cannot start) rejects this promise.
      const live = this.ensure();
      const id = this.nextId++;
      const timer = setTimeout(() => {
        live.pending.delete(id);
        reject(new NvmlTimeoutError(`worker ${req.op}`, null, backstopMs));
        this.teardown(new NvmlWorkerGoneError('NVML poll worker unresponsive'), this.stuck);
      }, backstopMs);
      timer.unref();
      live.pending.set(id, { resolve, reject, timer });
      live.worker.postMessage({ ...req, id });
    });
  }

  private onHang(live: LivePoll, h: HangReport): void {
    if (this.live !== live) return;
    this.lastHang = h;
    this.opts.metrics.timeouts.inc({ function: h.fn });
    this.opts.metrics.workerRestarts.inc({ role: 'poll', why: 'hang' });
    this.opts.log({ fn: h.fn, gpu: h.gpuIndex, afterMs: h.afterMs }, 'NVML call hung; abandoning the poll worker');
    this.teardown(new NvmlTimeoutError(h.fn, h.gpuIndex, h.afterMs), this.stuck);
  }

  private teardown(err: Error, stuck: Set<Worker> | null): void {
    const live = this.live;
    if (!live) return;
    this.live = null;
    live.watch.stop();
    for (const p of live.pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    live.pending.clear();
    abandon(live.worker, stuck);
  }
}

export interface EventHandlers {
  ready(devices: EventDevice[], missing: string[]): void;
  event(e: NvmlEvent): void;
  /** The wait loop ended with an error (e.g. GPU_IS_LOST); the worker is gone. */
  waitError(rc: number, gpu: { index: number | null; uuid: string | null; busId: string | null }): void;
  /** Setup failed (library, init, missing event symbols); the worker is gone. */
  failed(err: Error): void;
  /** A call in the event worker hung; the worker was abandoned. */
  hang(h: HangReport): void;
}

/** Owns the event worker: one nvmlEventSetWait_v2 loop with a bounded timeout. */
export class NvmlEventClient {
  private worker: Worker | null = null;
  private ctl: Int32Array | null = null;
  private watch: CallWatch | null = null;

  constructor(
    private readonly opts: NvmlClientOptions & {
      waitMs: number;
      mask: number;
      /** Collects workers abandoned in a hung call, until they exit (shared across restarts). */
      stuck?: Set<Worker>;
    },
    private readonly on: EventHandlers,
  ) {}

  get running(): boolean {
    return this.worker !== null;
  }

  start(): void {
    if (this.worker) return;
    const control = new SharedArrayBuffer(CTL_SIZE * 4);
    const ctl = new Int32Array(control);
    const worker = spawnWorker({
      role: 'events',
      libraryPath: this.opts.libraryPath,
      control,
      eventWaitMs: this.opts.waitMs,
      eventMask: this.opts.mask,
    });
    this.worker = worker;
    this.ctl = ctl;
    // A wait legitimately lasts up to waitMs; anything else gets the plain watchdog budget.
    const budget = (fn: string) => (fn === 'nvmlEventSetWait_v2' ? this.opts.waitMs : 0) + this.opts.watchdogMs;
    this.watch = new CallWatch(
      ctl,
      budget,
      (h) => {
        if (this.worker !== worker) return;
        this.opts.metrics.timeouts.inc({ function: h.fn });
        this.opts.metrics.workerRestarts.inc({ role: 'events', why: 'hang' });
        this.drop(worker, true);
        this.on.hang(h);
      },
      this.opts.watchdogMs,
    );
    worker.on('message', (m: EventMessage) => {
      if (this.worker !== worker) return;
      if ('stats' in m) this.opts.metrics.record(m.stats);
      switch (m.kind) {
        case 'ready':
          this.on.ready(m.devices, m.missing);
          break;
        case 'event':
          this.opts.metrics.events.inc({ type: `0x${m.event.eventType.toString(16)}` });
          this.on.event(m.event);
          break;
        case 'waitError':
          this.drop(worker);
          this.on.waitError(m.rc, { index: m.index, uuid: m.uuid, busId: m.busId });
          break;
        case 'failed':
          this.drop(worker);
          this.on.failed(reviveError(m.error));
          break;
        case 'stats':
          break;
      }
    });
    worker.on('error', (err) => {
      if (this.worker !== worker) return;
      this.drop(worker);
      this.on.failed(err);
    });
    worker.on('exit', (code) => {
      if (this.worker !== worker) return;
      this.drop(worker);
      this.on.failed(new NvmlWorkerGoneError(`NVML event worker exited with code ${code}`));
    });
  }

  /** Asks the wait loop to stop (it checks between waits), then terminates the thread. */
  async stop(): Promise<void> {
    const worker = this.worker;
    if (!worker) return;
    Atomics.store(this.ctl!, CTL_STOP, 1);
    const exited = new Promise<void>((r) => worker.once('exit', () => r()));
    this.worker = null;
    this.watch?.stop();
    this.watch = null;
    // The loop ends within one wait timeout and frees its event set; a hung call gets terminated.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([exited, new Promise((r) => (timer = setTimeout(r, this.opts.waitMs + 500)))]);
    clearTimeout(timer);
    abandon(worker, null);
  }

  private drop(worker: Worker, hung = false): void {
    if (this.worker !== worker) return;
    this.worker = null;
    this.watch?.stop();
    this.watch = null;
    abandon(worker, hung ? (this.opts.stuck ?? null) : null);
  }
}
