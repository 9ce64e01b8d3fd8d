/**
 * Reading /dev/kmsg on the main thread when the read thread (read-thread.ts) cannot run: Node
 * cannot watch a character device (fs.watch/inotify never fires for kernel printk, net.Socket
 * rejects the fd as type FILE, a blocking read parks a pool thread), so the reader re-checks on an
 * interval.
 */

/** Fallback: re-check every `intervalMs` (only used when the read thread cannot start). `arm()` asks for one `onReady` call. */
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
