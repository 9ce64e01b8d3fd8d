/**
 * Reads /dev/kmsg in a worker thread of its own (from the start in mode 'thread'; in mode 'auto'
 * only once the reader sees load, since an idle isolate costs ~8 MiB RSS), so the kernel ring is
 * emptied at read speed whatever the main thread is doing (classifying, a GC pause, an API call).
 * The ring holds only a few thousand records: at 100,000 records/s it turns over every ~15 ms, and
 * a reader that waits for the main event loop loses most of a storm (measured: 44-85% lost on the
 * main thread, <1% here).
 *
 * The thread sends records in kernel order, in batches (one message per read-until-empty, at most
 * BATCH records), and blocks in poll(2) (koffi) on the device and an eventfd when the ring is empty.
 *
 * Bounded queue: the main thread reports what it has finished with (records and characters) in a
 * SharedArrayBuffer, so the thread knows what is in flight (posted, not yet classified).
 *  - Above the high mark it sheds noise: a record that matches none of the `keep` patterns (every
 *    pattern that can turn a line into a finding) goes as its sequence number only, counted as shed
 *    by the reader. A record that can raise a finding is never shed.
 *  - Above the hard mark it stops reading: memory stays bounded, and what the kernel overwrites
 *    meanwhile shows as a sequence gap, counted as lost.
 *
 * Paused start (mode 'auto'): the main thread goes on reading while the isolate boots (tens of ms,
 * in which a storm can overrun the ring); the thread says 'ready' and reads only after go(), which
 * the main thread calls between two of its drains, so exactly one side reads at any time.
 *
 * SAFETY: Node joins worker threads at exit, so a thread stuck in poll(2) would hang the process.
 * close() sets a stop flag and signals the eventfd, as does process 'exit'; poll also returns every
 * `safetyMs` so a forgotten close() delays exit by at most that long.
 */
import { closeSync, writeSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { DFA_MAX_MEM, nativeRe2Path } from '../../config/regex.ts';
import { libc, pollWorkerLibc } from '../../native/index.ts';
import { VigilError } from '../../util/errors.ts';

/**
 * A pattern that keeps a record from being shed: a built-in RegExp, or a configured pattern in RE2
 * syntax (flags inline), which the thread runs on RE2 too, so no pattern can stall it: on native
 * RE2 when the main thread runs it there (`nativeSource`), else on re2js.
 */
export type KeepPattern = RegExp | { readonly re2Source: string; readonly nativeSource?: string | undefined };

/** In kernel order: a string is a record's raw text, a number the seq of a record shed under load. */
export type ReadItem = string | number;

export interface ReadThreadHandlers {
  /** `caughtUp`: the thread read until the ring was empty after these items. */
  onItems(items: ReadItem[], caughtUp: boolean): void;
  /** A read error; the thread retries after a second. */
  onError(err: Error): void;
  /** The thread is gone (crashed, or poll failed); the reader must read some other way. */
  onFailed(err: Error): void;
  /** Started paused: the thread is up and waits for go(). */
  onReady?(): void;
}

export interface ReadThreadLimits {
  /** In flight above which noise is shed (records / characters). */
  highRecords: number;
  highChars: number;
  /** In flight at which reading pauses. */
  hardRecords: number;
  hardChars: number;
}

export const DEFAULT_READ_LIMITS: ReadThreadLimits = {
  highRecords: 2048,
  highChars: 1 << 20,
  hardRecords: 16384,
  hardChars: 4 << 20,
};

/** Records per message at most: big enough to keep messages few in a storm, small enough to stay cheap. */
const BATCH = 512;
/** Slots of the shared counters. */
const CONSUMED_RECORDS = 0;
const CONSUMED_CHARS = 1;
const STOP = 2;
const GO = 3;

// Runs inside the worker as CommonJS (eval), so it needs no TypeScript loader and survives bundling.
const WORKER_SOURCE = `
'use strict';
const { parentPort, workerData: d } = require('node:worker_threads');
const errnoNames = new Map(Object.entries(require('node:os').constants.errno).map(([k, v]) => [v, k]));
const koffi = require(d.libc.koffiPath);
const lib = koffi.load(d.libc.soname);
const poll = lib.func(d.libc.poll);
// read(2) itself: about half the cost of fs.readSync a record in the interpreter (no argument
// checks, no Error built for EAGAIN), and reading speed is what keeps a storm's records.
const read = lib.func(d.libc.read);
const EAGAIN = 11, EPIPE = 32;
const POLLIN = 0x1, POLLNVAL = 0x20, EINTR = 4;
const shared = new Int32Array(d.shared);
const keep = d.keep.filter((k) => k.re2 === undefined).map((k) => new RegExp(k.source, k.flags.replace(/[gy]/g, '')));
// Configured patterns: RE2, linear time. Native RE2 (npm re2, which loads in worker threads) for
// those the main thread runs on it; else re2js, where a one-pattern RE2Set takes the DFA memory
// bound (the thread's heap is 16 MiB).
const re2Keep = d.keep.filter((k) => k.re2 !== undefined);
let Native;
if (d.re2Path && re2Keep.some((k) => k.native !== undefined)) try { Native = require(d.re2Path); } catch {}
let RE2Set;
const keepRe2 = re2Keep.map((k) => {
  if (Native && k.native !== undefined) try { return new Native(k.native, 'u'); } catch {}
  RE2Set ??= require(d.re2jsPath).RE2Set;
  const set = new RE2Set(RE2Set.UNANCHORED, 0, ${DFA_MAX_MEM});
  set.add(k.re2);
  set.compile();
  return { test: (msg) => set.match(msg).length > 0 };
});
parentPort.postMessage({ type: 'keep', engines: keepRe2.map((re) => (Native && re instanceof Native ? 're2' : 're2js')) });
const buf = Buffer.alloc(16 * 1024); // the kernel refuses (EINVAL) a buffer smaller than one record
const fds = Buffer.alloc(16); // struct pollfd { int fd; short events; short revents; } x 2
let posted = 0, postedChars = 0, lastPostCaughtUp = false;

// 'ready', 'stop', 'timeout', or an error message. A negative fd is ignored by poll(2).
function wait(withKmsg, ms) {
  fds.writeInt32LE(withKmsg ? d.fd : -1, 0); fds.writeInt16LE(POLLIN, 4); fds.writeInt16LE(0, 6);
  fds.writeInt32LE(d.wakeFd, 8); fds.writeInt16LE(POLLIN, 12); fds.writeInt16LE(0, 14);
  const n = poll(fds, 2, ms);
  if (n < 0) { const e = koffi.errno(); return e === EINTR ? 'timeout' : 'poll failed with errno ' + e; }
  if (fds.readInt16LE(14) !== 0 || Atomics.load(shared, ${STOP})) return 'stop';
  if (n === 0) return 'timeout';
  if (fds.readInt16LE(6) & POLLNVAL) return 'kmsg fd is not open (POLLNVAL)';
  return 'ready';
}
// "<prio>,<seq>,<ts>,<flags>;<message>": the seq, or -1 when the header is malformed.
function seqOf(t) {
  const a = t.indexOf(','), b = a < 0 ? -1 : t.indexOf(',', a + 1);
  const s = b < 0 ? NaN : Number(t.slice(a + 1, b));
  return Number.isSafeInteger(s) && s >= 0 ? s : -1;
}
function matters(t) {
  const msg = t.slice(t.indexOf(';') + 1);
  for (const re of keep) if (re.test(msg)) return true;
  for (const re of keepRe2) if (re.test(msg)) return true;
  return false;
}
if (d.paused) {
  // Reads nothing until go(): a 1 ms poll on the eventfd (which only ever means stop) until then.
  parentPort.postMessage({ type: 'ready' });
  while (!Atomics.load(shared, ${GO}) && !Atomics.load(shared, ${STOP})) if (wait(false, 1) === 'stop') break;
}
for (;;) {
  if (Atomics.load(shared, ${STOP})) break;
  const inFlight = (posted - Atomics.load(shared, ${CONSUMED_RECORDS})) | 0;
  const inFlightChars = (postedChars - Atomics.load(shared, ${CONSUMED_CHARS})) | 0;
  if (inFlight >= d.limits.hardRecords || inFlightChars >= d.limits.hardChars) {
    const w = wait(false, 10);
    if (w === 'stop') break;
    continue;
  }
  const items = [];
  let kept = 0, chars = 0, caughtUp = false, eof = false, error;
  while (items.length < ${BATCH} && inFlight + kept < d.limits.hardRecords && inFlightChars + chars < d.limits.hardChars) {
    const n = read(d.fd, buf, buf.length);
    if (n < 0) {
      const e = koffi.errno();
      if (e === EAGAIN) { caughtUp = true; break; }
      if (e === EPIPE || e === EINTR) continue; // overwritten: the seq gap says how many
      const code = errnoNames.get(e) || 'E' + e;
      error = Object.assign(new Error(code + ': read'), { code });
      break;
    }
    if (n <= 0) { caughtUp = true; eof = true; break; } // a FIFO without writers (tests, benches): it polls readable forever
    const text = buf.toString('utf8', 0, n);
    if (d.keep.length && (inFlight + kept >= d.limits.highRecords || inFlightChars + chars >= d.limits.highChars) && !matters(text)) {
      const seq = seqOf(text);
      if (seq >= 0) { items.push(seq); continue; }
    }
    items.push(text);
    kept++;
    chars += text.length;
  }
  if (items.length || (caughtUp && !lastPostCaughtUp)) {
    posted = (posted + kept) | 0;
    postedChars = (postedChars + chars) | 0;
    parentPort.postMessage({ type: 'items', items, caughtUp });
    lastPostCaughtUp = caughtUp;
  }
  if (error) {
    parentPort.postMessage({ type: 'error', message: String(error.message), code: error.code });
    if (wait(false, 1000) === 'stop') break;
    continue;
  }
  if (eof) {
    if (wait(false, 1000) === 'stop') break;
    continue;
  }
  if (caughtUp) {
    const w = wait(true, d.safetyMs);
    if (w === 'stop') break;
    if (w !== 'ready' && w !== 'timeout') { parentPort.postMessage({ type: 'failed', message: w }); break; }
  }
}
parentPort.close();
`;

type WorkerMessage =
  | { type: 'ready' }
  | { type: 'keep'; engines: ('re2' | 're2js')[] }
  | { type: 'items'; items: ReadItem[]; caughtUp: boolean }
  | { type: 'error'; message: string; code?: string }
  | { type: 'failed'; message: string };

const EFD_NONBLOCK = 0o4000;
const EFD_CLOEXEC = 0o2000000;

/** The reading thread. Throws from the constructor when koffi, libc or the worker cannot start. */
export class ReadThread {
  private readonly worker: Worker;
  private readonly wakeFd: number;
  private readonly shared = new Int32Array(new SharedArrayBuffer(16));
  private consumedRecords = 0;
  private consumedChars = 0;
  private closed = false;
  private readonly exited: Promise<void>;
  private readonly onExit = (): void => this.stopWorker();
  /** The engine each configured keep pattern runs on in the thread, once it has compiled them. */
  keepEngines: readonly ('re2' | 're2js')[] | undefined;

  constructor(
    fd: number,
    private readonly h: ReadThreadHandlers,
    opts: { keep?: readonly KeepPattern[]; limits?: ReadThreadLimits; safetyMs?: number; paused?: boolean } = {},
  ) {
    const c = libc();
    this.wakeFd = c.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (this.wakeFd < 0) throw new VigilError('VIGIL_E_KMSG_UNAVAILABLE', `eventfd failed (errno ${c.errno()})`);
    try {
      this.worker = new Worker(WORKER_SOURCE, {
        eval: true,
        workerData: {
          libc: pollWorkerLibc(),
          fd,
          wakeFd: this.wakeFd,
          shared: this.shared.buffer,
          keep: (opts.keep ?? []).map((re) =>
            re instanceof RegExp ? { source: re.source, flags: re.flags } : { re2: re.re2Source, native: re.nativeSource },
          ),
          re2jsPath: createRequire(import.meta.url).resolve('re2js'),
          re2Path: nativeRe2Path(),
          limits: opts.limits ?? DEFAULT_READ_LIMITS,
          safetyMs: opts.safetyMs ?? 10_000,
          paused: opts.paused ?? false,
        },
        // Plain CommonJS: do not inherit --import tsx and friends (faster start, less memory).
        execArgv: [],
        stdout: false,
        stderr: false,
        resourceLimits: { maxOldGenerationSizeMb: 16, maxYoungGenerationSizeMb: 2 },
      });
    } catch (err) {
      closeSync(this.wakeFd);
      throw err;
    }
    this.worker.on('message', (m: WorkerMessage) => this.onMessage(m));
    this.worker.on('error', (err) => {
      if (!this.closed) this.h.onFailed(err);
    });
    this.exited = new Promise((resolve) => this.worker.once('exit', () => resolve()));
    // After the listeners: adding a 'message' listener refs the worker's port again.
    this.worker.unref();
    process.once('exit', this.onExit);
  }

  /** Started paused: the thread may read from now on (the caller has stopped reading the fd). */
  go(): void {
    Atomics.store(this.shared, GO, 1);
  }

  /** The main thread is done with `records` records of `chars` characters: they leave the queue. */
  consumed(records: number, chars: number): void {
    if (records === 0 && chars === 0) return;
    this.consumedRecords = (this.consumedRecords + records) | 0;
    this.consumedChars = (this.consumedChars + chars) | 0;
    Atomics.store(this.shared, CONSUMED_RECORDS, this.consumedRecords);
    Atomics.store(this.shared, CONSUMED_CHARS, this.consumedChars);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    process.removeListener('exit', this.onExit);
    // Held (ref'd) while closing, so an awaited close() is not cut short by an empty event loop.
    this.worker.ref();
    this.stopWorker();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.exited,
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, 1000);
      }),
    ]);
    clearTimeout(timer);
    await this.worker.terminate();
    try {
      closeSync(this.wakeFd);
    } catch {
      /* already closed */
    }
  }

  private stopWorker(): void {
    Atomics.store(this.shared, STOP, 1);
    const one = Buffer.alloc(8);
    one.writeBigUInt64LE(1n);
    try {
      writeSync(this.wakeFd, one);
    } catch {
      /* closed: nothing to wake */
    }
  }

  private onMessage(m: WorkerMessage): void {
    if (this.closed) return;
    if (m.type === 'keep') this.keepEngines = m.engines;
    else if (m.type === 'ready') this.h.onReady?.();
    else if (m.type === 'items') this.h.onItems(m.items, m.caughtUp);
    else if (m.type === 'error') this.h.onError(Object.assign(new Error(m.message), m.code ? { code: m.code } : {}));
    else this.h.onFailed(new Error(m.message));
  }
}
