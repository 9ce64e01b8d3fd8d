/**
 * Main-thread side of the DCGM source: runs worker.ts in a thread of its own and watches every DCGM
 * call through the shared control array, with the watchdog, spawning and abandoning the NVML
 * source uses (sources/nvml/client.ts). Nothing here loads koffi or calls DCGM.
 */
import type { Worker } from 'node:worker_threads';
import { CallWatch, abandon, spawnWorker, type HangReport } from '../nvml/client.ts';
import { CTL_SIZE } from '../nvml/protocol.ts';
import {
  DCGM_FUNCTION_NAMES,
  type DcgmDevice,
  type DcgmFailure,
  type DcgmMessage,
  type DcgmViolation,
  type DcgmWorkerInit,
} from './protocol.ts';

export interface DcgmHandlers {
  ready(devices: DcgmDevice[]): void;
  violation(v: DcgmViolation): void;
  /** The host-engine connection broke; the worker is gone. */
  lost(f: DcgmFailure): void;
  /** Load, init, connect or registration failed; the worker is gone. */
  failed(f: DcgmFailure): void;
  /** A DCGM call outlived the watchdog; the worker was abandoned. */
  hang(h: HangReport): void;
}

export type DcgmClientOptions = Omit<DcgmWorkerInit, 'control'> & { watchdogMs: number };

export class DcgmClient {
  private worker: Worker | null = null;
  private watch: CallWatch | null = null;
  /** A worker that ended itself (lost, failed): stop() waits for its thread to be gone. */
  private exiting: Promise<void> = Promise.resolve();

  constructor(
    private readonly opts: DcgmClientOptions,
    private readonly on: DcgmHandlers,
  ) {}

  get running(): boolean {
    return this.worker !== null;
  }

  start(): void {
    if (this.worker) return;
    const { watchdogMs, ...rest } = this.opts;
    const control = new SharedArrayBuffer(CTL_SIZE * 4);
    const worker = spawnWorker({ ...rest, control } satisfies DcgmWorkerInit, import.meta.url);
    this.worker = worker;
    this.watch = new CallWatch(
      new Int32Array(control),
      // dcgmConnect_v2 waits up to its own timeout by design.
      (fn) => watchdogMs + (fn === 'dcgmConnect_v2' ? this.opts.connectTimeoutMs : 0),
      (h) => {
        if (this.worker !== worker) return;
        this.drop(worker);
        this.on.hang(h);
      },
      watchdogMs,
      DCGM_FUNCTION_NAMES,
    );
    worker.on('message', (m: DcgmMessage) => {
      if (this.worker !== worker) return;
      if (m.kind === 'ready') this.on.ready(m.devices);
      else if (m.kind === 'violation') this.on.violation(m.violation);
      else if (m.kind === 'lost') {
        this.drop(worker);
        this.on.lost(m.failure);
      } else if (m.kind === 'failed') {
        this.drop(worker);
        this.on.failed(m.failure);
      }
    });
    worker.on('error', (err) => {
      if (this.worker !== worker) return;
      this.drop(worker);
      this.on.failed({ fn: null, rc: null, message: `DCGM worker crashed: ${err.message}` });
    });
    worker.on('exit', (code) => {
      if (this.worker !== worker) return;
      this.drop(worker);
      this.on.failed({ fn: null, rc: null, message: `DCGM worker exited with code ${code}` });
    });
  }

  /** Unregisters and disconnects (bounded), then lets the thread go. */
  async stop(): Promise<void> {
    const worker = this.worker;
    if (!worker) return this.exiting;
    this.worker = null;
    this.watch?.stop();
    this.watch = null;
    const exited = exitOf(worker, this.opts.watchdogMs);
    worker.postMessage({ op: 'stop' });
    await exited;
    abandon(worker, null);
  }

  private drop(worker: Worker): void {
    if (this.worker !== worker) return;
    this.worker = null;
    this.watch?.stop();
    this.watch = null;
    this.exiting = exitOf(worker, this.opts.watchdogMs);
    abandon(worker, null);
  }
}

/** Resolves when the thread has exited, or after `ms` (a thread stuck in DCGM is left behind). */
function exitOf(worker: Worker, ms: number): Promise<void> {
  if (worker.threadId === -1) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    timer.unref();
    worker.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}
