/**
 * Reading /dev/kmsg on the main thread when the read thread (read-thread.ts) cannot run: Node
 * cannot watch a character device (fs.watch/inotify never fires for kernel printk, net.Socket
 * rejects the fd as type FILE, a blocking read parks a pool thread), so the reader re-checks on an
 * interval.
 */

/** Tells the reader when to drain. `arm()` asks for one `onReady` call once data is readable. */
export interface Waiter {
  readonly mode: 'interval';
  arm(): void;
  close(): Promise<void>;
}

export interface WaiterHandlers {
  onReady(): void;
  onError(err: Error): void;
}

/** Fallback: re-check every `intervalMs` (only used when the read thread cannot start). */
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
