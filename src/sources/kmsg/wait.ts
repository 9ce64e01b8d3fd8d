/**
 * Waiting for /dev/kmsg to become readable without a timer and without holding a libuv pool
 * thread. Node cannot watch a character device (fs.watch/inotify never fires for kernel printk,
 * net.Socket rejects the fd as type FILE, a blocking read parks a pool thread), so a small
 * worker thread sits in libc poll(2) (via koffi, declared in src/native/libc.ts) on the reader's
 * fd plus an eventfd used to wake it, and posts one message when data is there. The main thread
 * drains with readSync and re-arms.
 *
 * SAFETY: Node joins worker threads at exit, so a worker stuck in poll(2) would hang the process.
 * The eventfd is signalled on close() and from process 'exit'; poll also returns every
 * `safetyMs` (10 s; each return is a wake-up, so not shorter) so a forgotten close() delays
 * exit by at most that long.
 */
import { closeSync, writeSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { libc, pollWorkerLibc } from '../../native/index.ts';

/** Tells the reader when to drain. `arm()` asks for one `onReady` call once data is readable. */
export interface Waiter {
  readonly mode: 'poll' | 'interval';
  arm(): void;
  close(): Promise<void>;
}

export interface WaiterHandlers {
  onReady(): void;
  onError(err: Error): void;
}

/** Fallback: re-check every `intervalMs` (only used when the poll worker cannot start). */
export class IntervalWaiter implements Waiter {
  readonly mode = 'interval' as const;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly intervalMs: number,
    private readonly h: WaiterHandlers,
  ) {}

  arm(): void {
    if (this.closed || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (!this.closed) this.h.onReady();
    }, this.intervalMs);
    this.timer.unref();
  }

  close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    return Promise.resolve();
  }
}

// Runs inside the worker as CommonJS (eval), so it needs no TypeScript loader and survives bundling.
const WORKER_SOURCE = `
'use strict';
const { parentPort, workerData } = require('node:worker_threads');
const koffi = require(workerData.libc.koffiPath);
const poll = koffi.load(workerData.libc.soname).func(workerData.libc.poll);
const POLLIN = 0x1, POLLERR = 0x8, POLLHUP = 0x10, POLLNVAL = 0x20, EINTR = 4;
const fds = Buffer.alloc(16); // struct pollfd { int fd; short events; short revents; } x 2
function wait() {
  for (;;) {
    fds.writeInt32LE(workerData.fd, 0); fds.writeInt16LE(POLLIN, 4); fds.writeInt16LE(0, 6);
    fds.writeInt32LE(workerData.wakeFd, 8); fds.writeInt16LE(POLLIN, 12); fds.writeInt16LE(0, 14);
    const n = poll(fds, 2, workerData.safetyMs);
    if (n === 0) continue;
    if (n < 0) {
      const e = koffi.errno();
      if (e === EINTR) continue;
      return { type: 'error', message: 'poll failed with errno ' + e };
    }
    if (fds.readInt16LE(14) !== 0) return { type: 'stopped' };
    const r = fds.readInt16LE(6);
    if (r & POLLNVAL) return { type: 'error', message: 'kmsg fd is not open (POLLNVAL)' };
    if (r & (POLLIN | POLLERR | POLLHUP)) return { type: 'ready' };
  }
}
parentPort.on('message', (m) => {
  if (m !== 'arm') return;
  const out = wait();
  parentPort.postMessage(out);
  if (out.type !== 'ready') parentPort.close();
});
`;

type WorkerMessage = { type: 'ready' } | { type: 'stopped' } | { type: 'error'; message: string };

const EFD_NONBLOCK = 0o4000;
const EFD_CLOEXEC = 0o2000000;

/** The poll(2) worker. Throws from the constructor when koffi or libc cannot be loaded. */
export class PollWaiter implements Waiter {
  readonly mode = 'poll' as const;
  private readonly worker: Worker;
  private readonly wakeFd: number;
  private armed = false;
  private closed = false;
  private readonly exited: Promise<void>;
  private readonly onExit = (): void => this.wake();

  constructor(
    fd: number,
    private readonly h: WaiterHandlers,
    safetyMs = 10_000,
  ) {
    const c = libc();
    this.wakeFd = c.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (this.wakeFd < 0) throw new Error(`eventfd failed (errno ${c.errno()})`);
    try {
      this.worker = PollWaiter.spawn(fd, this.wakeFd, safetyMs);
    } catch (err) {
      closeSync(this.wakeFd);
      throw err;
    }
    this.worker.on('message', (m: WorkerMessage) => this.onMessage(m));
    this.worker.on('error', (err) => {
      if (!this.closed) this.h.onError(err);
    });
    this.exited = new Promise((resolve) => this.worker.once('exit', () => resolve()));
    // After the listeners: adding a 'message' listener refs the worker's port again.
    this.worker.unref();
    process.once('exit', this.onExit);
  }

  private static spawn(fd: number, wakeFd: number, safetyMs: number): Worker {
    return new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { libc: pollWorkerLibc(), fd, wakeFd, safetyMs },
      // Plain CommonJS: do not inherit --import tsx and friends (faster start, less memory).
      execArgv: [],
      stdout: false,
      stderr: false,
      resourceLimits: { maxOldGenerationSizeMb: 8, maxYoungGenerationSizeMb: 1 },
    });
  }

  arm(): void {
    if (this.closed || this.armed) return;
    this.armed = true;
    this.worker.postMessage('arm');
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    process.removeListener('exit', this.onExit);
    // Held (ref'd) while closing, so an awaited close() is not cut short by an empty event loop.
    this.worker.ref();
    if (this.armed) {
      // The worker is in (or about to enter) poll(2): wake it so it returns and exits cleanly.
      this.wake();
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        this.exited,
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, 1000);
        }),
      ]);
      clearTimeout(timer);
    }
    await this.worker.terminate();
    try {
      closeSync(this.wakeFd);
    } catch {
      /* already closed */
    }
  }

  private wake(): void {
    const one = Buffer.alloc(8);
    one.writeBigUInt64LE(1n);
    try {
      writeSync(this.wakeFd, one);
    } catch {
      /* closed: nothing to wake */
    }
  }

  private onMessage(m: WorkerMessage): void {
    this.armed = false;
    if (this.closed) return;
    if (m.type === 'ready') this.h.onReady();
    else if (m.type === 'error') this.h.onError(new Error(m.message));
  }
}
