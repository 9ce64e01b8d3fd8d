/**
 * Reads kernel log records from /dev/kmsg as they arrive.
 *
 * The fd is opened O_RDONLY|O_NONBLOCK; each readSync returns exactly one record (the buffer must
 * be >= 8 KiB or the kernel drops the record with EINVAL). Each turn of the event loop reads all
 * the kernel has (up to READ_AHEAD records kept in memory) and delivers one bounded batch, so the
 * ring is emptied at read speed while classification of a burst proceeds batch by batch, without
 * starving the HTTP server; when all is delivered, a Waiter (a worker blocked in poll(2), see
 * wait.ts) says when more arrive, so a quiet log costs nothing on the main thread.
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
 * Lookback 0 skips everything already in the ring when reading starts (like lseek SEEK_END); the
 * records of that first drain are told apart by position, not by clock, because the printk clock
 * and the system's monotonic clock drift apart over a long uptime.
 */
import { closeSync, constants, openSync, readSync } from 'node:fs';
import { Counter, type Registry } from 'prom-client';
import { readBootId } from '../../util/boot-id.ts';
import { errorMessage, toError } from '../../util/errors.ts';
import { parseKmsgRecord, type KmsgRecord } from './parse.ts';
import { IntervalWaiter, PollWaiter, type Waiter, type WaiterHandlers } from './wait.ts';

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
  /** How to wait for data: 'auto' tries the poll worker and falls back to 'interval'. */
  wait?: 'auto' | 'poll' | 'interval';
  /** Re-check period of the interval fallback (default 200 ms). */
  intervalMs?: number;
  registry?: Registry;
  onRecords?: (records: KmsgRecord[]) => void;
  onLost?: (n: number) => void;
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
/** Accounted per record beyond its text: the parsed object, its fields and the array slot. */
const RECORD_OVERHEAD_BYTES = 160;
const DEFAULT_LOOKBACK_MS = 5 * 60_000;
/** Wait after a read error other than EAGAIN/EPIPE before trying again. */
const ERROR_BACKOFF_MS = 1000;

const realIo: KmsgIo = {
  open: (path) => openSync(path, constants.O_RDONLY | constants.O_NONBLOCK),
  read: (fd, buf) => readSync(fd, buf, 0, buf.length, null),
  close: (fd) => closeSync(fd),
};

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
  parseErrors = 0;
  truncated = 0;
  /** Times the waiter woke the reader (a quiet log should leave this still). */
  wakeups = 0;

  /** Bytes of records read but not yet delivered (bounded by READ_AHEAD_BYTES plus one record). */
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
  private waiter: Waiter | undefined;
  private running = false;
  private draining = false;
  /** Read ahead of delivery, oldest first. */
  private backlog: KmsgRecord[] = [];
  private backlogBytes = 0;
  private immediate: NodeJS.Immediate | undefined;
  private retry: NodeJS.Timeout | undefined;

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
  }

  /** Which wait strategy is in use ('poll' worker or 'interval' fallback); undefined before start. */
  get waitMode(): 'poll' | 'interval' | undefined {
    return this.waiter?.mode;
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
    this.running = true;
    this.waiter = this.makeWaiter();
    this.drain();
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    if (this.immediate) clearImmediate(this.immediate);
    if (this.retry) clearTimeout(this.retry);
    const w = this.waiter;
    this.waiter = undefined;
    await w?.close();
    try {
      this.io.close(this.fd);
    } catch {
      /* already gone */
    }
    this.fd = -1;
  }

  private makeWaiter(): Waiter {
    const h: WaiterHandlers = {
      onReady: () => {
        this.wakeups++;
        this.drain();
      },
      onError: (err) => this.waiterFailed(err),
    };
    const mode = this.opts.wait ?? 'auto';
    if (mode !== 'interval' && this.io === realIo) {
      try {
        return new PollWaiter(this.fd, h);
      } catch (err) {
        if (mode === 'poll') throw err;
        this.opts.onError?.(
          new Error(`kmsg: poll worker unavailable, polling every ${this.opts.intervalMs ?? 200} ms: ${errorMessage(err)}`),
        );
      }
    }
    return new IntervalWaiter(this.opts.intervalMs ?? 200, h);
  }

  private waiterFailed(err: Error): void {
    this.opts.onError?.(new Error(`kmsg: wait failed, falling back to interval polling: ${err.message}`));
    if (!this.running) return;
    const old = this.waiter;
    this.waiter = new IntervalWaiter(this.opts.intervalMs ?? 200, {
      onReady: () => {
        this.wakeups++;
        this.drain();
      },
      onError: () => {},
    });
    void old?.close();
    this.waiter.arm();
  }

  /** Reads what is there (bounded), delivers one batch; schedules the next turn or re-arms the waiter. */
  private drain(): void {
    this.immediate = undefined;
    if (!this.running || this.draining) return;
    this.draining = true;
    const backlog = this.backlog;
    let more = true;
    let failed = false;
    try {
      // Errors count toward the bound too, so an EPIPE storm cannot spin forever.
      for (let i = 0; i < READ_AHEAD * 2 && backlog.length < READ_AHEAD && this.backlogBytes < READ_AHEAD_BYTES; i++) {
        let n: number;
        try {
          n = this.io.read(this.fd, this.buf);
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code === 'EAGAIN' || code === 'EWOULDBLOCK') {
            if (this.initial) {
              this.initial = false;
              this.liveFromSeq = this.lastSeq + 1;
            }
            more = false;
            break;
          }
          if (code === 'EPIPE') continue; // overwritten; the seq gap on the next record says how many
          if (code === 'EINTR') continue;
          throw err;
        }
        if (n <= 0) {
          more = false;
          break;
        }
        this.accept(this.buf.toString('utf8', 0, n), backlog);
      }
    } catch (err) {
      more = false;
      failed = true;
      this.opts.onError?.(toError(err));
    } finally {
      this.draining = false;
    }
    if (backlog.length) {
      const batch = backlog.splice(0, this.batchSize);
      for (const rec of batch) this.backlogBytes -= recordBytes(rec);
      this.deliver(batch);
    }
    if (!this.running) return;
    if (more || (this.backlog.length && !failed)) this.immediate = setImmediate(() => this.drain());
    // A device that keeps failing also keeps polling readable: back off instead of spinning.
    else if (failed)
      this.retry = setTimeout(() => {
        this.retry = undefined;
        this.drain();
      }, ERROR_BACKOFF_MS).unref();
    else this.waiter?.arm();
  }

  private accept(text: string, batch: KmsgRecord[]): void {
    this.recordsRead++;
    this.metrics.records.inc();
    const rec = parseKmsgRecord(text);
    if (!rec) {
      this.parseErrors++;
      this.metrics.parseErrors.inc();
      return;
    }
    if (rec.seq <= this.lastSeq) return; // already seen before a restart
    if (this.lastSeq >= 0 && rec.seq > this.lastSeq + 1) this.lost(rec.seq - this.lastSeq - 1);
    this.lastSeq = rec.seq;
    // Lookback applies to what was in the ring at start (0 skips all of it). Judged by timestamp,
    // not by "read before the first EAGAIN": a record written while a large ring is still being
    // drained is new and must not be skipped.
    if (this.initial && rec.tsUsec < this.minTsUsec) return;
    if (rec.truncated) this.truncated++;
    this.backlogBytes += recordBytes(rec);
    batch.push(rec);
  }

  private lost(n: number): void {
    this.recordsLost += n;
    this.metrics.lost.inc(n);
    try {
      this.opts.onLost?.(n);
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
  };
}
