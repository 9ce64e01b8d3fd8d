/**
 * Waiting for /dev/kmsg on the main thread. Node cannot watch a character device (fs.watch/inotify
 * never fires for kernel printk, net.Socket rejects the fd as type FILE, a blocking read parks a
 * pool thread and cannot be cancelled), so:
 *  - PollWaiter (the normal idle mode): poll(2) on the device and an eventfd, called through koffi's
 *    async call, so it blocks one of libuv's pool threads (4 by default; fs, dns.lookup, crypto and
 *    zlib share the other 3) instead of a second V8 isolate (a worker thread costs ~8 MiB RSS). A
 *    quiet log costs nothing but one wake-up per safety period.
 *  - IntervalWaiter (fallback when koffi/libc is unavailable): re-checks every `intervalMs`.
 *
 * SAFETY: a parked poll keeps the event loop alive, and Node's exit joins libuv's pool threads, so
 * a poll nobody wakes would hang process.exit(). close() and process 'exit' signal the eventfd;
 * poll also returns every `safetyMs`. A reader nobody stops must not hold the process open either:
 * when the safety period passes and nothing but the waiter keeps the loop alive, it stops parking
 * polls and re-checks on an unref'd timer instead (the process then exits as it would without it).
 */
import { closeSync, writeSync } from 'node:fs';
import { libc } from '../../native/index.ts';
import { toError, VigilError } from '../../util/errors.ts';

/** Fallback: re-check every `intervalMs` (only used when poll(2) through koffi is unavailable). `arm()` asks for one `onReady` call. */
export class IntervalWaiter {
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly intervalMs: number,
    private readonly onReady: () => void,
  ) {}

  arm(): void {
    if (this.closed || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (!this.closed) this.onReady();
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

/** Why a PollWaiter woke: records may be there, the fd hung up (a FIFO without writers: back off), or the safety period passed. */
export type PollWake = 'ready' | 'hangup' | 'timeout';

export interface PollWaiterHandlers {
  onReady(wake: PollWake): void;
  /** poll(2) failed or the fd is not open: the caller must wait some other way. */
  onFailed(err: Error): void;
}

const POLLIN = 0x1;
const POLLERR = 0x8;
const POLLHUP = 0x10;
const POLLNVAL = 0x20;
const EINTR = 4;
const EFD_NONBLOCK = 0o4000;
const EFD_CLOEXEC = 0o2000000;
/** What getActiveResourcesInfo() lists that does not keep the loop alive (stdio) or ends on its own (as in test/helpers/leak-check.ts). */
const NOT_HOLDING = new Set(['PipeWrap', 'TTYWrap', 'CloseReq', 'FSReqCallback', 'FSReqPromise', 'WriteWrap', 'ShutdownWrap']);

/** Waits in poll(2) on a pool thread. Throws from the constructor when koffi, libc or eventfd is unavailable. */
export class PollWaiter {
  private readonly wakeFd: number;
  private readonly fds = Buffer.alloc(16); // struct pollfd { int fd; short events; short revents; } x 2
  private inFlight = false;
  /**
   * The first poll returns at once: the wake path (this callback, the reader's drain) is then
   * compiled before a record takes it, not on a fresh agent's first fault (about 0.3 ms).
   */
  private first = true;
  /** Nothing else kept the process alive at the last safety check: re-check on an unref'd timer. */
  private dormant = false;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private released: (() => void) | undefined;
  private readonly onExit = (): void => this.signal();

  constructor(
    private readonly fd: number,
    private readonly h: PollWaiterHandlers,
    private readonly safetyMs = 10_000,
  ) {
    const c = libc();
    this.wakeFd = c.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (this.wakeFd < 0) throw new VigilError('VIGIL_E_KMSG_UNAVAILABLE', `eventfd failed (errno ${c.errno()})`);
    process.once('exit', this.onExit);
  }

  /** Asks for one `onReady` call: when the fd is readable, or after the safety period. */
  arm(): void {
    if (this.closed || this.inFlight || this.timer) return;
    if (this.dormant) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        if (this.closed) return;
        this.dormant = !othersHoldTheLoop();
        this.h.onReady('timeout');
      }, this.safetyMs).unref();
      return;
    }
    this.fds.writeInt32LE(this.fd, 0);
    this.fds.writeInt16LE(POLLIN, 4);
    this.fds.writeInt16LE(0, 6);
    this.fds.writeInt32LE(this.wakeFd, 8);
    this.fds.writeInt16LE(POLLIN, 12);
    this.fds.writeInt16LE(0, 14);
    this.inFlight = true;
    try {
      libc().pollAsync(this.fds, 2, this.first ? 0 : this.safetyMs, (err, n) => this.done(err, n));
    } catch (err) {
      this.inFlight = false;
      // Told on the next turn: the caller is still in its own drain.
      setImmediate(() => {
        if (!this.closed) this.h.onFailed(toError(err));
      });
    }
  }

  /** Wakes a parked poll and releases the eventfd once it has returned (within 1 s). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    process.removeListener('exit', this.onExit);
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.inFlight) {
      const back = new Promise<void>((resolve) => (this.released = resolve));
      this.signal();
      let bound: NodeJS.Timeout | undefined;
      await Promise.race([back, new Promise<void>((resolve) => (bound = setTimeout(resolve, 1000)))]);
      clearTimeout(bound);
    }
    try {
      closeSync(this.wakeFd);
    } catch {
      /* already closed */
    }
  }

  private done(err: unknown, n: number): void {
    this.inFlight = false;
    const first = this.first;
    this.first = false;
    if (this.closed) {
      this.released?.();
      return;
    }
    if (err !== null && err !== undefined) return this.h.onFailed(toError(err));
    if (n < 0) {
      const errno = libc().errno();
      if (errno === EINTR) return this.h.onReady('timeout');
      return this.h.onFailed(new Error(`poll failed with errno ${errno}`));
    }
    // Read before the timeout case too, so the first (immediate) poll compiles it.
    const revents = this.fds.readInt16LE(6);
    if (n === 0) {
      // The first poll's timeout says nothing about who holds the loop: the safety period has not passed.
      if (!first) this.dormant = !othersHoldTheLoop();
      return this.h.onReady('timeout');
    }
    if (revents & POLLNVAL) return this.h.onFailed(new Error('poll: the fd is not open (POLLNVAL)'));
    // POLLERR is how /dev/kmsg says records were overwritten (the read then fails with EPIPE): readable.
    this.h.onReady(revents & POLLHUP && !(revents & (POLLIN | POLLERR)) ? 'hangup' : 'ready');
  }

  private signal(): void {
    const one = Buffer.alloc(8);
    one.writeBigUInt64LE(1n);
    try {
      writeSync(this.wakeFd, one);
    } catch {
      /* closed: nothing to wake */
    }
  }
}

/** Whether anything but a parked poll keeps the event loop alive (a pending pool call is not listed). */
function othersHoldTheLoop(): boolean {
  return process.getActiveResourcesInfo().some((r) => !NOT_HOLDING.has(r));
}
