/**
 * Reads kernel log records from /dev/kmsg as they arrive.
 *
 * Each read of the device returns exactly one record (the buffer must be >= 8 KiB or the kernel
 * drops the record with EINVAL). Mode 'auto' (the default) reads on the main thread, woken by
 * poll(2) parked on a libuv pool thread (wait.ts PollWaiter): a quiet log costs no second V8
 * isolate (~8 MiB RSS) and no periodic work. Under load (LOAD_RECORDS) it hands the fd to a thread
 * of its own (read-thread.ts; the main thread reads on until it is up), which then stays: it
 * empties the ring at read speed whatever the main thread does and sheds noise (counted) when the
 * main thread falls behind. Until the thread is up (a storm's onset meets the main thread) the main
 * thread sheds noise the same way above SHED_RECORDS, so it reads on ahead of the ring's wrap
 * instead of pausing while classification catches up: a record that can raise a finding anywhere
 * in the storm is read (bench/storm-onset.ts). Mode 'thread' starts that thread at once. Records are delivered in
 * bounded batches, one per turn of the event loop, so classifying a burst never starves the HTTP
 * server. Without koffi (or on a test device) the main thread reads, with the fd O_NONBLOCK,
 * re-checking on an interval.
 * EPIPE means the ring overwrote records we had not read: the gap is counted from sequence
 * numbers and reading continues from the oldest record left.
 *
 * Resume: with a cursor from this boot, records with seq <= cursor.seq are skipped (never
 * replayed) and any gap after it is counted as lost; a cursor from this boot with seq -1 ("nothing
 * of this boot kept": the state store's answer when the state file was lost on this boot) reads
 * the whole ring, so a fault older than the lookback is not forgotten. Without a cursor only
 * records from the last `lookbackMs` are delivered; with a cursor from an earlier boot nothing of
 * this boot has been seen, so by default the whole ring is delivered (`newBootLookbackMs`, default
 * Infinity): after a repair reboot the boot-time faults (a GPU that fails to initialise) are the
 * ones that matter.
 * Lookback 0 skips everything already in the ring when reading starts (like lseek SEEK_END), by
 * reading past it at once in start(): by position, not by clock, because the printk clock and the
 * system's monotonic clock differ by milliseconds and drift apart over a long uptime.
 */
import { closeSync, constants, openSync, readSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { Counter, type Registry } from 'prom-client';
import { readBootId } from '../../util/boot-id.ts';
import { errorMessage, toError } from '../../util/errors.ts';
import { parseKmsgRecord, type KmsgRecord } from './parse.ts';
import { ReadThread, type KeepPattern, type ReadItem, type ReadThreadLimits } from './read-thread.ts';
import { IntervalWaiter, PollWaiter, type PollWake } from './wait.ts';
import { libc } from '../../native/index.ts';

/** Where the reader is: persisted by the state store so a restart neither replays nor skips. */
export interface KmsgCursor {
  bootId: string;
  seq: number;
}

/** The file operations the reader needs; tests substitute a fake device. */
export interface KmsgIo {
  open(path: string): number;
  /** Returns the byte count of one record; throws errors with `code` EAGAIN / EPIPE / ... */
  read(fd: number, buf: Buffer): number;
  close(fd: number): void;
}

export interface KmsgReaderOptions {
  path?: string;
  cursor?: KmsgCursor;
  /** Without a cursor: deliver records at most this old (default 5 min; 0 = only new records). */
  lookbackMs?: number;
  /** With a cursor from an earlier boot (default Infinity = the whole ring). */
  newBootLookbackMs?: number;
  /** Records per batch before yielding to the event loop (default 64). */
  batchSize?: number;
  /**
   * How to read: 'auto' on the main thread woken by poll(2), moving to the read thread under load;
   * 'thread' in the read thread from the start; both fall back to 'interval' (main thread, re-checking).
   */
  wait?: 'auto' | 'thread' | 'interval';
  /** Longest a parked poll(2) waits before re-checking (default 10 s; test seam). */
  safetyMs?: number;
  /** Re-check period of the interval fallback (default 200 ms). */
  intervalMs?: number;
  /**
   * Records that can raise a finding match one of these; only records that match none are shed
   * when the main thread falls behind. Without patterns nothing is shed (reading pauses at the bound).
   */
  keep?: readonly KeepPattern[];
  /** The read thread's queue bounds (test seam; defaults in read-thread.ts). */
  limits?: ReadThreadLimits;
  registry?: Registry;
  onRecords?: (records: KmsgRecord[]) => void;
  onLost?: (n: number) => void;
  /** Records shed under load (noise that could raise no finding), per batch that shed any. */
  onShed?: (n: number) => void;
  onError?: (err: Error) => void;
  /** Test seams. */
  io?: KmsgIo;
  bootId?: string;
  uptimeMs?: () => number;
  now?: () => number;
}

const READ_BUFFER = 16 * 1024;
/**
 * Records read but not yet delivered, at most. More than a default ring holds (4096 records with
 * a 128 KiB log buffer), so a burst moves from the ring to memory at read speed (a few µs a
 * record) instead of waiting on classification and overrunning the ring.
 */
const READ_AHEAD = 8192;
/**
 * And at most this many bytes of them (about 4 MiB): records can be 8 KiB each, so the count
 * alone would let a storm of long lines hold 64 MiB. At the bound reading pauses until
 * classification catches up; what the kernel overwrites meanwhile is counted as lost.
 */
const READ_AHEAD_BYTES = 4 << 20;
/**
 * Reading on the main thread, live records in the backlog above which noise is shed (counted, as
 * the read thread does above its high mark): a storm's onset, before the read thread is up, then
 * never pauses reading for noise, so the ring is read ahead of its wrap (a default 128 KiB ring
 * turns over in ~15 ms at 100,000 records/s). A record a keep pattern matches is never shed.
 */
const SHED_RECORDS = 2048;
const SHED_BYTES = 2 << 20;
/** Records lookback 0 skips at most at start: more than a 16 MiB ring holds. */
const SKIP_BOUND = 1 << 20;
/** Accounted per record beyond its text: the parsed object, its fields and the array slot. */
const RECORD_OVERHEAD_BYTES = 160;
const DEFAULT_LOOKBACK_MS = 5 * 60_000;
/** Wait after a read error other than EAGAIN/EPIPE before trying again. */
const ERROR_BACKOFF_MS = 1000;
/**
 * Mode 'auto' moves reading to the read thread once this many live records were read while the
 * backlog never emptied (or any record was lost, or the read-ahead filled): the main thread is
 * no longer keeping up on its own turns, and only the thread reads at ring speed whatever the main
 * thread does. One sixteenth of a default ring (4096 records): low enough to start the thread early
 * in a storm, high enough that a burst of a few hundred lines (a GPU reset) stays on the main thread.
 * The main thread reads on while the thread boots (bootThread).
 */
const LOAD_RECORDS = 256;

/**
 * A device holding `records` (raw /dev/kmsg records, newline-terminated), read once each from
 * every open, then EAGAIN: the warm-up runs the reader's record path on it, and tests a fixed ring.
 */
export function recordsDevice(records: readonly string[]): KmsgIo {
  let i = 0;
  return {
    open: () => {
      i = 0;
      return 0;
    },
    read: (_fd, buf) => {
      if (i >= records.length) throw Object.assign(new Error('EAGAIN'), { code: 'EAGAIN' });
      return buf.write(records[i++]);
    },
    close: () => {},
  };
}

const realIo: KmsgIo = {
  open: (path) => openSync(path, constants.O_RDONLY | constants.O_NONBLOCK),
  read: (fd, buf) => (libcRead() ?? nodeRead)(fd, buf),
  close: (fd) => closeSync(fd),
};

const nodeRead = (fd: number, buf: Buffer): number => readSync(fd, buf, 0, buf.length, null);
/** errno number -> name (EAGAIN, EPIPE, ...), for errors shaped like Node's. */
const ERRNO_NAMES = new Map(Object.entries(osConstants.errno).map(([name, n]) => [n, name]));
let boundRead: ((fd: number, buf: Buffer) => number) | null | undefined;

/**
 * read(2) through koffi: about half the cost of fs.readSync a record with the agent's V8 flags
 * (interpreter only), which decides how much of a storm a CPU-starved reader keeps. Errors are
 * thrown with Node's `code` (EAGAIN, EPIPE, ...), as readOne expects; null when koffi is unavailable.
 */
function libcRead(): ((fd: number, buf: Buffer) => number) | null {
  if (boundRead !== undefined) return boundRead;
  try {
    const c = libc();
    boundRead = (fd, buf) => {
      const n = c.read(fd, buf, buf.length);
      if (n >= 0) return n;
      const errno = c.errno();
      const code = ERRNO_NAMES.get(errno) ?? `E${errno}`;
      throw Object.assign(new Error(`${code}: read`), { code, errno: -errno, syscall: 'read' });
    };
  } catch {
    boundRead = null;
  }
  return boundRead;
}

/** CLOCK_MONOTONIC (time since boot, without suspend): the closest clock to printk's. */
function monotonicMs(): number {
  return Number(process.hrtime.bigint() / 1_000_000n);
}

export class KmsgReader {
  readonly path: string;
  readonly bootId: string;
  /** Wall-clock ms of boot (now - uptime at start), to turn record timestamps into times. */
  bootTimeMs = 0;
  recordsRead = 0;
  recordsLost = 0;
  /** Records the read thread shed under load: noise that could raise no finding. */
  recordsShed = 0;
  parseErrors = 0;
  truncated = 0;
  /** Times the main thread was woken to take records (a quiet log should leave this still). */
  wakeups = 0;

  /** Bytes of records read but not yet delivered (in-thread reading bounds this by READ_AHEAD_BYTES plus one record). */
  get readAheadBytes(): number {
    return this.backlogBytes;
  }

  private readonly io: KmsgIo;
  private readonly buf = Buffer.alloc(READ_BUFFER);
  private readonly batchSize: number;
  private readonly now: () => number;
  private readonly lookbackMs: number;
  /** Records of the first drain older than this are skipped (set at start). */
  private minTsUsec = -1;
  /** True until the first EAGAIN: the records read so far were in the ring before start. */
  private initial = true;
  /** The first seq read after the initial drain: records from here on are live. */
  private liveFromSeq = Infinity;
  private readonly metrics: ReturnType<typeof kmsgMetrics>;
  private fd = -1;
  private lastSeq: number;
  /** Reading on the main thread: woken by poll(2) on a pool thread, or re-checking on an interval. */
  private waiter: PollWaiter | IntervalWaiter | undefined;
  /** Live records read on the main thread since its backlog was last empty (the load rule). */
  private liveSinceEmpty = 0;
  /** Mode 'auto': the read thread, started paused, until it is up and takes over. */
  private pendingThread: ReadThread | undefined;
  /** Mode 'auto': the read thread could not start; stay on the main thread. */
  private threadRefused = false;
  /** The last read hit end of file (a FIFO without writers, a regular file: never /dev/kmsg), which polls readable forever. */
  private atEof = false;
  /** Reading in a thread of its own (the normal case on the real device). */
  private thread: ReadThread | undefined;
  private running = false;
  private draining = false;
  /** Read ahead of delivery, oldest first. */
  private backlog: KmsgRecord[] = [];
  private backlogBytes = 0;
  /** With the read thread: each backlog record's size as the thread counted it (raw characters). */
  private backlogChars: number[] = [];
  private immediate: NodeJS.Immediate | undefined;
  private retry: NodeJS.Timeout | undefined;
  /** The keep patterns as the main thread tests them; undefined when one cannot be tested here (then nothing is shed here). */
  private readonly keepHere: ((msg: string) => boolean)[] | undefined;

  constructor(private readonly opts: KmsgReaderOptions = {}) {
    this.path = opts.path ?? '/dev/kmsg';
    this.io = opts.io ?? realIo;
    this.bootId = opts.bootId ?? readBootId();
    this.batchSize = Math.max(1, opts.batchSize ?? 64);
    this.now = opts.now ?? Date.now;
    const sameBoot = opts.cursor !== undefined && opts.cursor.bootId === this.bootId;
    this.lastSeq = sameBoot ? opts.cursor!.seq : -1;
    this.lookbackMs = sameBoot ? Infinity : opts.cursor ? (opts.newBootLookbackMs ?? Infinity) : (opts.lookbackMs ?? DEFAULT_LOOKBACK_MS);
    this.metrics = kmsgMetrics(opts.registry);
    this.keepHere = keepTesters(opts.keep ?? []);
  }

  /** How records are read: 'thread', or on the main thread woken by 'poll' or re-checking on an 'interval'; undefined before start. */
  get waitMode(): 'thread' | 'poll' | 'interval' | undefined {
    return this.thread ? 'thread' : this.waiter instanceof PollWaiter ? 'poll' : this.waiter ? 'interval' : undefined;
  }

  /** The position to persist: the last record handled in this boot (seq -1 before any); never past one read but not delivered. */
  cursor(): KmsgCursor {
    return { bootId: this.bootId, seq: this.backlog.length ? this.backlog[0].seq - 1 : this.lastSeq };
  }

  /**
   * Wall-clock ms of a record. Records logged after start are stamped now (they are read within
   * milliseconds); older ones get boot time + their timestamp. The kernel's printk clock drifts
   * from wall time by some ppm, which adds up to minutes over months of uptime, so the
   * estimate is kept for records that were already in the ring.
   */
  timeOf(rec: KmsgRecord): number {
    const now = this.now();
    if (rec.seq >= this.liveFromSeq) return now;
    return Math.min(now, this.bootTimeMs + Math.floor(rec.tsUsec / 1000));
  }

  /** Opens the device (throws if it cannot) and starts delivering records. */
  start(): void {
    if (this.running) return;
    this.fd = this.io.open(this.path);
    const uptimeMs = (this.opts.uptimeMs ?? monotonicMs)();
    this.bootTimeMs = this.now() - uptimeMs;
    this.minTsUsec = this.lookbackMs === Infinity ? -1 : (uptimeMs - this.lookbackMs) * 1000;
    this.initial = true;
    this.liveFromSeq = Infinity;
    // Records read ahead before a stop were never delivered: read them again.
    this.lastSeq = this.cursor().seq;
    this.backlog = [];
    this.backlogBytes = 0;
    this.backlogChars = [];
    this.liveSinceEmpty = 0;
    this.atEof = false;
    if (this.lookbackMs === 0) this.skipRing();
    this.running = true;
    const mode = this.opts.wait ?? 'auto';
    if (this.io === realIo && mode === 'auto') {
      this.waiter = this.pollWaiter() ?? this.intervalWaiter();
      this.drain();
      return;
    }
    if (this.io === realIo && mode === 'thread') {
      // What the ring holds now is read here, at once: records written after start() are then told
      // apart by position (after the first EAGAIN), not by the printk clock, which can lag the
      // monotonic clock by milliseconds. The thread continues from the same file position.
      let state: 'empty' | 'more' | 'failed' = 'failed';
      try {
        state = this.readHere();
      } catch (err) {
        this.opts.onError?.(toError(err));
      }
      try {
        if (state !== 'failed') this.thread = this.startThread(false);
      } catch (err) {
        this.running = false;
        this.io.close(this.fd);
        this.fd = -1;
        throw err;
      }
      if (this.thread) {
        if (this.backlog.length) this.immediate = setImmediate(() => this.deliverNext());
        return;
      }
    }
    this.waiter = this.intervalWaiter();
    this.drain();
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    if (this.immediate) clearImmediate(this.immediate);
    if (this.retry) clearTimeout(this.retry);
    const w = this.waiter;
    const t = this.thread;
    const p = this.pendingThread;
    this.waiter = undefined;
    this.thread = undefined;
    this.pendingThread = undefined;
    await w?.close();
    await p?.close();
    // The thread reads the fd: it must be gone before the fd is closed (and its number reused).
    await t?.close();
    try {
      this.io.close(this.fd);
    } catch {
      /* already gone */
    }
    this.fd = -1;
  }

  /** The read thread on the real device; undefined (after saying why) when it cannot start. */
  private startThread(paused: boolean): ReadThread | undefined {
    const mode = this.opts.wait ?? 'auto';
    const fallBack = (why: string) =>
      this.opts.onError?.(
        new Error(`kmsg: read thread ${why}; reading on the main thread${this.waiter ? '' : ` every ${this.opts.intervalMs ?? 200} ms`}`),
      );
    let booting: ReadThread | undefined;
    try {
      booting = new ReadThread(
        this.fd,
        {
          onItems: (items, caughtUp) => this.take(items, caughtUp),
          onError: (err) => this.opts.onError?.(err),
          onReady: () => this.takeOver(booting),
          onFailed: (err) => {
            if (this.running && booting && booting === this.pendingThread) {
              // Failed before it read anything: the main thread never stopped reading.
              fallBack(`failed: ${err.message}`);
              this.pendingThread = undefined;
              this.threadRefused = true;
              void booting.close();
              return;
            }
            if (!this.running || !this.thread) return;
            fallBack(`failed: ${err.message}`);
            const t = this.thread;
            this.thread = undefined;
            void t.close();
            this.waiter = this.intervalWaiter();
            this.waiter.arm();
          },
        },
        {
          ...(this.opts.keep ? { keep: this.opts.keep } : {}),
          ...(this.opts.limits ? { limits: this.opts.limits } : {}),
          ...(this.opts.safetyMs ? { safetyMs: this.opts.safetyMs } : {}),
          paused,
        },
      );
      return booting;
    } catch (err) {
      if (mode === 'thread') throw err;
      fallBack(`unavailable: ${errorMessage(err)}`);
      return undefined;
    }
  }

  /** Mode 'auto': the main thread's poll(2) waker; undefined (after saying why) when koffi/libc is unavailable. */
  private pollWaiter(): PollWaiter | undefined {
    try {
      return new PollWaiter(
        this.fd,
        {
          onReady: (wake) => this.woken(wake),
          onFailed: (err) => {
            if (!this.running || !(this.waiter instanceof PollWaiter)) return;
            this.opts.onError?.(new Error(`kmsg: poll(2) failed: ${err.message}; reading every ${this.opts.intervalMs ?? 200} ms`));
            void this.waiter.close();
            this.waiter = this.intervalWaiter();
            this.drain();
          },
        },
        this.opts.safetyMs,
      );
    } catch (err) {
      this.opts.onError?.(new Error(`kmsg: poll(2) unavailable: ${errorMessage(err)}; reading every ${this.opts.intervalMs ?? 200} ms`));
      return undefined;
    }
  }

  /** `_wake`: a hang-up shows as end of file on the read, where it is handled for every waiter. */
  private woken(_wake: PollWake): void {
    this.wakeups++;
    this.drain();
  }

  /**
   * Mode 'auto' under load: starts the read thread paused. The main thread goes on reading while
   * the thread's isolate boots (tens of ms, in which a storm could overrun the ring); takeOver()
   * then moves the fd to it. The thread stays once started: a hand-back would need the thread to
   * stop between two reads and say where, to save ~8 MiB after a storm.
   */
  private bootThread(): void {
    const t = this.startThread(true);
    if (t) this.pendingThread = t;
    else this.threadRefused = true;
  }

  /**
   * The paused thread is up: from here on only it reads. This runs between two drains (a message,
   * never inside one), the main thread reads no more (no waiter: drain() returns at once), and the
   * thread reads from the fd's position, so nothing is read twice or skipped; records already in
   * the backlog keep their place (marked -1: never in the thread's queue) and the thread's follow.
   */
  private takeOver(t: ReadThread | undefined): void {
    if (!t || !this.running || t !== this.pendingThread) return;
    this.pendingThread = undefined;
    const w = this.waiter;
    this.waiter = undefined;
    this.thread = t;
    if (this.immediate) clearImmediate(this.immediate);
    this.immediate = undefined;
    if (this.retry) clearTimeout(this.retry);
    this.retry = undefined;
    void w?.close(); // the parked poll only waits; it never reads
    t.go();
    if (this.backlog.length) this.immediate = setImmediate(() => this.deliverNext());
  }

  private intervalWaiter(): IntervalWaiter {
    return new IntervalWaiter(this.opts.intervalMs ?? 200, () => {
      this.wakeups++;
      this.drain();
    });
  }

  /** Records from the read thread: parsed into the backlog now, delivered batch by batch. */
  private take(items: ReadItem[], caughtUp: boolean): void {
    if (!this.running) return;
    this.wakeups++;
    let dropped = 0;
    let droppedChars = 0;
    let shed = 0;
    for (const item of items) {
      if (typeof item === 'number') {
        this.recordsRead++;
        this.metrics.records.inc();
        if (this.skipTo(item)) shed++;
        continue;
      }
      if (this.accept(item, this.backlog)) this.backlogChars.push(item.length);
      else {
        dropped++;
        droppedChars += item.length;
      }
    }
    this.thread?.consumed(dropped, droppedChars);
    if (shed) this.shed(shed);
    if (caughtUp) this.caughtUp();
    if (this.backlog.length && !this.immediate) this.immediate = setImmediate(() => this.deliverNext());
  }

  /** With the read thread: one batch per turn of the event loop until the backlog is empty. */
  private deliverNext(): void {
    this.immediate = undefined;
    if (!this.running) return;
    this.deliverBatch();
    if (this.backlog.length) this.immediate = setImmediate(() => this.deliverNext());
  }

  /** Delivers the oldest batch of the backlog and tells the read thread those records left its queue. */
  private deliverBatch(): void {
    if (!this.backlog.length) return;
    const batch = this.backlog.splice(0, this.batchSize);
    let records = 0;
    let chars = 0;
    for (const c of this.backlogChars.splice(0, batch.length)) {
      if (c < 0) continue; // read on this thread: never in the thread's queue
      records++;
      chars += c;
    }
    for (const rec of batch) this.backlogBytes -= recordBytes(rec);
    this.deliver(batch);
    this.thread?.consumed(records, chars);
  }

  /** The ring was read to its end: what was there at start is behind us. */
  private caughtUp(): void {
    if (!this.initial) return;
    this.initial = false;
    this.liveFromSeq = this.lastSeq + 1;
  }

  /** Reading on the main thread: reads what is there (bounded), delivers one batch; schedules the next turn or re-arms. */
  private drain(): void {
    this.immediate = undefined;
    if (!this.running || this.draining || !this.waiter) return;
    this.draining = true;
    const live = !this.initial;
    const read = this.recordsRead;
    const lost = this.recordsLost;
    let state: 'empty' | 'more' | 'failed';
    try {
      state = this.readHere();
    } catch (err) {
      state = 'failed';
      this.opts.onError?.(toError(err));
    } finally {
      this.draining = false;
    }
    if (live) this.liveSinceEmpty += this.recordsRead - read;
    const loaded = live && (this.liveSinceEmpty >= LOAD_RECORDS || this.recordsLost > lost || state === 'more');
    if (loaded && this.waiter instanceof PollWaiter && !this.threadRefused && !this.pendingThread && this.running) this.bootThread();
    this.deliverBatch();
    if (!this.backlog.length) this.liveSinceEmpty = 0;
    if (!this.running || !this.waiter) return;
    if (state === 'more' || (this.backlog.length && state !== 'failed')) this.immediate = setImmediate(() => this.drain());
    // A device that keeps failing also keeps polling readable: back off instead of spinning.
    else if (state === 'failed')
      this.retry = setTimeout(() => {
        this.retry = undefined;
        this.drain();
      }, ERROR_BACKOFF_MS).unref();
    else if (this.atEof && this.recordsRead === read) {
      // Woken for nothing but end of file: wait instead of spinning.
      this.retry = setTimeout(() => {
        this.retry = undefined;
        this.waiter?.arm();
      }, ERROR_BACKOFF_MS).unref();
    } else this.waiter.arm();
  }

  /**
   * Lookback 0: reads past what the ring holds now, here, before anything else can write. By
   * position, not by timestamp: the printk clock runs ahead of the monotonic clock by milliseconds
   * on some hosts (1.8 ms here), so a record logged just before start looked new.
   */
  private skipRing(): void {
    // A writer faster than this loop would keep it going: past the bound, what follows is live.
    for (let i = 0; i < SKIP_BOUND; i++) {
      let n: number | 'again' | 'retry';
      try {
        n = this.readOne();
      } catch {
        return; // the first drain meets it again and reports it
      }
      if (n === 'retry') continue;
      if (n === 'again' || n <= 0) break;
      this.recordsRead++;
      this.metrics.records.inc();
      const rec = parseKmsgRecord(this.buf.toString('utf8', 0, n));
      // Skipped on purpose: a gap between these records is nothing lost.
      if (rec && rec.seq > this.lastSeq) this.lastSeq = rec.seq;
    }
    this.caughtUp();
  }

  /** One read into `buf`: its length (0 at end of file), 'again' when the ring is empty, 'retry' after EPIPE or EINTR. */
  private readOne(): number | 'again' | 'retry' {
    try {
      return this.io.read(this.fd, this.buf);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EAGAIN' || code === 'EWOULDBLOCK') return 'again';
      // EPIPE: overwritten; the seq gap on the next record says how many.
      if (code === 'EPIPE' || code === 'EINTR') return 'retry';
      throw err;
    }
  }

  /**
   * Reads on this thread into the backlog until the ring is empty or the read-ahead is full; throws
   * on a read error. Live noise above the shed mark is counted as shed, not held, so a storm that
   * meets the main thread (its onset, before the read thread is up) is read at ring speed.
   */
  private readHere(): 'empty' | 'more' {
    let shed = 0;
    try {
      // Errors count toward the bound too, so an EPIPE storm cannot spin forever.
      for (let i = 0; i < READ_AHEAD * 2 && this.backlog.length < READ_AHEAD && this.backlogBytes < READ_AHEAD_BYTES; i++) {
        const n = this.readOne();
        if (n === 'retry') continue;
        if (n === 'again') {
          this.atEof = false;
          this.caughtUp();
          return 'empty';
        }
        if (n <= 0) {
          this.atEof = true;
          return 'empty';
        }
        this.atEof = false;
        const text = this.buf.toString('utf8', 0, n);
        if (this.sheddingHere() && !this.keptHere(text)) {
          const seq = rawSeq(text);
          if (seq >= 0) {
            this.recordsRead++;
            this.metrics.records.inc();
            if (this.skipTo(seq)) shed++;
            continue;
          }
        }
        if (this.accept(text, this.backlog)) this.backlogChars.push(-1);
      }
      return 'more';
    } finally {
      if (shed) this.shed(shed);
    }
  }

  /** Reading here, live, with the backlog above the shed mark and patterns to tell noise by. */
  private sheddingHere(): boolean {
    return (
      !this.initial &&
      this.keepHere !== undefined &&
      this.keepHere.length > 0 &&
      (this.backlog.length >= SHED_RECORDS || this.backlogBytes >= SHED_BYTES)
    );
  }

  /** Whether a raw record's message matches a keep pattern (a record that could raise a finding). */
  private keptHere(text: string): boolean {
    const msg = text.slice(text.indexOf(';') + 1);
    for (const test of this.keepHere!) if (test(msg)) return true;
    return false;
  }

  /** Parses one raw record; true when it joined the backlog (false: unparsable, already seen, or before the lookback). */
  private accept(text: string, batch: KmsgRecord[]): boolean {
    this.recordsRead++;
    this.metrics.records.inc();
    const rec = parseKmsgRecord(text);
    if (!rec) {
      this.parseErrors++;
      this.metrics.parseErrors.inc();
      return false;
    }
    if (!this.skipTo(rec.seq)) return false; // already seen before a restart
    // A lookback above 0 applies to what was in the ring at start, judged by timestamp, not by
    // "read before the first EAGAIN": a record written while a large ring is still being drained
    // is new and must not be skipped. Lookback 0 has skipped the ring in start().
    if (this.initial && rec.tsUsec < this.minTsUsec) return false;
    if (rec.truncated) this.truncated++;
    this.backlogBytes += recordBytes(rec);
    batch.push(rec);
    return true;
  }

  /** Moves the position to `seq`, counting a gap before it as lost; false when `seq` was already seen. */
  private skipTo(seq: number): boolean {
    if (seq <= this.lastSeq) return false;
    if (this.lastSeq >= 0 && seq > this.lastSeq + 1) this.lost(seq - this.lastSeq - 1);
    this.lastSeq = seq;
    return true;
  }

  private shed(n: number): void {
    this.recordsShed += n;
    this.metrics.shed.inc(n);
    this.tell(this.opts.onShed, n);
  }

  private lost(n: number): void {
    this.recordsLost += n;
    this.metrics.lost.inc(n);
    this.tell(this.opts.onLost, n);
  }

  /** A caller's callback must not break reading: what it throws goes to onError. */
  private tell(cb: ((n: number) => void) | undefined, n: number): void {
    try {
      cb?.(n);
    } catch (err) {
      this.opts.onError?.(toError(err));
    }
  }

  private deliver(batch: KmsgRecord[]): void {
    try {
      this.opts.onRecords?.(batch);
    } catch (err) {
      this.opts.onError?.(toError(err));
    }
  }
}

/** "<prio>,<seq>,<ts>,<flags>;<message>": the seq, or -1 when the header is malformed (as the read thread reads it). */
function rawSeq(text: string): number {
  const a = text.indexOf(',');
  const b = a < 0 ? -1 : text.indexOf(',', a + 1);
  const seq = b < 0 ? NaN : Number(text.slice(a + 1, b));
  return Number.isSafeInteger(seq) && seq >= 0 ? seq : -1;
}

/**
 * The keep patterns as functions for the main thread: a RegExp copied without its global/sticky
 * state (the classifier owns the original's lastIndex), a configured pattern by its own test().
 * Undefined when one has no test() here: then the main thread sheds nothing (and pauses at the bound).
 */
function keepTesters(keep: readonly KeepPattern[]): ((msg: string) => boolean)[] | undefined {
  const out: ((msg: string) => boolean)[] = [];
  for (const k of keep) {
    if (k instanceof RegExp) {
      const re = new RegExp(k.source, k.flags.replace(/[gy]/g, ''));
      out.push((msg) => re.test(msg));
    } else if (typeof (k as { test?: unknown }).test === 'function') {
      const re = k as unknown as { test(s: string): boolean };
      out.push((msg) => re.test(msg));
    } else return undefined;
  }
  return out;
}

/** What a record read ahead holds in memory, about: two bytes a character plus the object. */
function recordBytes(rec: KmsgRecord): number {
  return 2 * rec.message.length + RECORD_OVERHEAD_BYTES;
}

/** Counters on the given registry; reused if another reader registered them first. */
function kmsgMetrics(registry: Registry | undefined) {
  const get = (name: string, help: string): Counter => {
    const existing = registry?.getSingleMetric(name);
    if (existing) return existing as Counter;
    return new Counter({ name, help, registers: registry ? [registry] : [] });
  };
  return {
    records: get('vigil_kmsg_records_total', 'Records read from /dev/kmsg.'),
    lost: get('vigil_kmsg_lost_records_total', 'Kernel log records overwritten before Vigil read them (sequence gaps).'),
    parseErrors: get('vigil_kmsg_parse_errors_total', 'Records from /dev/kmsg that could not be parsed.'),
    shed: get(
      'vigil_kmsg_shed_records_total',
      'Kernel log records dropped unclassified because Vigil fell behind (only records no rule could match).',
    ),
  };
}
