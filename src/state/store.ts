/**
 * Persists what must survive an agent restart (engine state and the kmsg cursor) in one JSON file,
 * written atomically (temp file, fsync, rename) so a crash leaves the old or the new state, never
 * half of one. Both parts go in the same file so the cursor never runs ahead of the findings.
 *
 * One agent per directory: the store takes an exclusive flock(2) on `<dir>/vigil.lock` before it
 * reads anything and holds it until close(); a second agent is refused with the holder's pid.
 * A lock on a deleted file locks nothing, so before every write (and every `checkMs` while idle)
 * the store checks that its lock is still on the file at that path: if the directory was deleted
 * or replaced, it takes the lock of the new one, or, if another agent holds that, writes nothing
 * and reports it (the write fails as below) until that agent is gone. Two agents never both write.
 *
 * A failed write (read-only or full disk, directory deleted, state.json made a directory) is
 * counted, reported through `onHealth` and retried with exponential backoff until it succeeds;
 * `onSaved` fires only after a write succeeded, so the caller never takes unsaved state for saved.
 * A disk that is full or broken at start does not stop the agent: the lock (if its file cannot be
 * made) and the boot-id file are taken and written with the first write that succeeds.
 *
 * Lost state on the same boot: `<dir>/boot-id` records the boot of the run that owns the
 * directory, written at load() before any state. When state.json is then missing or unreadable
 * and that file names the current boot, the previous run's findings and cursor are gone but its
 * faults are still in the kernel ring, so load() returns a cursor at the start of this boot's
 * ring ({bootId, seq: -1}, see KmsgReader) and the first read replays the whole ring instead of
 * only the lookback: an untilReboot fault older than the lookback comes back. A sidecar rather
 * than the state file itself, because the state file is what was lost; with no sidecar (first
 * start in this directory) or one from another boot, today's lookback applies.
 */
import {
  closeSync,
  constants,
  fstatSync,
  fsyncSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { Counter, type Registry } from 'prom-client';
import type { EngineSnapshot } from '../engine/engine.ts';
import type { PersistedGpuBaselines } from '../monitors/gpu/baselines.ts';
import { EINTR, EWOULDBLOCK, LOCK_EX, LOCK_NB, libc } from '../native/index.ts';
import { errorCode, errorMessage, VigilError } from '../util/errors.ts';

export interface PersistedState {
  version: 1;
  engine?: EngineSnapshot;
  kmsgCursor?: { bootId: string; seq: number };
  /** Condition types Vigil wrote to its Node, so a type dropped from configuration is cleaned up. */
  kubernetes?: { writtenTypes: string[] };
  /**
   * GPU counter baselines (ECC, PCIe replay, NVLink, AER), so a restart judges increases, not
   * totals. Optional: files without it load as before; the GPU monitor validates it on use.
   */
  gpu?: PersistedGpuBaselines;
}

export interface StateStoreOptions {
  /** This run's boot id, kept in `<dir>/boot-id` to tell a lost state file on this boot from a reboot. */
  bootId: string;
  collect: () => PersistedState;
  /** Coalescing delay of schedule() (default 100 ms). */
  delayMs?: number;
  /** Backoff of failed writes: the first retry after `firstMs`, doubling up to `maxMs` (default 1 s to 60 s). */
  retry?: { firstMs: number; maxMs: number };
  /** How often an idle store checks that its directory and lock are still there (default 5 s; 0: only before writes). */
  checkMs?: number;
  /** Where vigil_state_write_failures_total is registered. */
  registry?: Registry;
  /** 'ok' at load(), after the first good write and after a recovery; 'failed' after each failed write (cause and next try). */
  onHealth?: (state: 'ok' | 'failed', message: string) => void;
  /** Called after each successful write, synchronously inside flush(): what collect() returned is on disk. */
  onSaved?: () => void;
}

export interface LoadResult {
  state: PersistedState | undefined;
  warning?: string;
  /** The state file was lost or unreadable on the boot it was written in: reading restarts at the ring's start. */
  lostThisBoot?: boolean;
}

/** Another process holds the state directory's lock. */
export class StateDirLockedError extends VigilError {
  constructor(
    readonly dir: string,
    readonly pid: number | undefined,
  ) {
    super(
      'VIGIL_E_STATE_DIR_LOCKED',
      `state directory ${dir} is in use by another Vigil agent (${pid ? `pid ${pid}` : 'pid unknown'}, holding ` +
        `${path.join(dir, LOCK_FILE)}); stop that agent or give this one its own --state-dir`,
    );
    this.name = 'StateDirLockedError';
  }
}

const LOCK_FILE = 'vigil.lock';
const BOOT_ID_FILE = 'boot-id';
/** A cursor before the first record of the boot: the kmsg reader then delivers the whole ring. */
const RING_START_SEQ = -1;

export class StateStore {
  readonly dir: string;
  readonly file: string;
  readonly lockFile: string;
  private readonly bootIdFile: string;
  private readonly opts: StateStoreOptions;
  private readonly failures: Counter;
  private timer: NodeJS.Timeout | undefined;
  /** How long the last write took: the next waits at least 10 times that, so saving a large state stays a small share of the time. */
  private lastWriteMs = 0;
  /** The held lock's file; undefined while not held (not yet taken at start, or another agent took the directory). */
  private lockFd: number | undefined;
  private closed = false;
  private loaded = false;
  private checkTimer: NodeJS.Timeout | undefined;
  /** This pid is not in the lock file yet (its write failed: a full disk). */
  private pidPending = false;
  private lastError: unknown;
  /** Failed writes in a row (0 after a success). */
  private streak = 0;
  private saved = false;
  private bootIdPending = false;
  /** Why the directory or its lock could not be had at start (a full or read-only disk); retried by flush(). */
  private startError: unknown;

  /**
   * Creates the directory and takes its lock; throws StateDirLockedError when another agent holds
   * it. Any other failure (a full or read-only disk) is reported by load() and retried by flush().
   */
  constructor(dir: string, opts: StateStoreOptions) {
    this.dir = dir;
    this.opts = opts;
    this.file = path.join(dir, 'state.json');
    this.lockFile = path.join(dir, LOCK_FILE);
    this.bootIdFile = path.join(dir, BOOT_ID_FILE);
    this.failures = failureCounter(opts.registry);
    try {
      mkdirSync(dir, { recursive: true });
      this.lockFd = this.lock();
    } catch (err) {
      if (err instanceof StateDirLockedError) throw err;
      this.startError = err;
    }
    const checkMs = opts.checkMs ?? 5000;
    if (checkMs > 0) {
      this.checkTimer = setInterval(() => this.check(), checkMs);
      this.checkTimer.unref();
    }
  }

  /**
   * Reads the saved state; a missing file is a first start, a corrupt one is reported and set
   * aside. Records this boot in `<dir>/boot-id` (after reading the previous one).
   */
  load(): LoadResult {
    this.loaded = true;
    const previousBoot = readText(this.bootIdFile)?.trim();
    this.bootIdPending = true;
    if (this.startError === undefined) {
      try {
        this.writeBootId();
      } catch (err) {
        this.lastError = err; // reported below, and retried
      }
    }
    const result = this.read();
    if (this.startError !== undefined || this.bootIdPending) {
      // Detection runs on; the state is saved once the disk takes it again.
      this.failed(this.startError ?? this.lastError ?? new Error('cannot write the boot-id file'));
      this.startError = undefined;
    } else this.opts.onHealth?.('ok', `state is kept in ${this.file}`);
    if (result.state || previousBoot !== this.opts.bootId) return result;
    const why = result.warning ?? `${this.file} is missing`;
    return {
      state: { version: 1, kmsgCursor: { bootId: this.opts.bootId, seq: RING_START_SEQ } },
      warning: `${why}; the state of this boot is lost, so the kernel log is read again from the start of the ring`,
      lostThisBoot: true,
    };
  }

  private read(): LoadResult {
    let text: string;
    try {
      text = readFileSync(this.file, 'utf8');
    } catch (err) {
      if (errorCode(err) === 'ENOENT') return { state: undefined };
      return { state: undefined, warning: `cannot read ${this.file}: ${errorMessage(err)}` };
    }
    try {
      const parsed = JSON.parse(text) as PersistedState;
      if (parsed?.version !== 1) throw new Error(`unsupported state version ${String(parsed?.version)}`);
      return { state: parsed };
    } catch (err) {
      const aside = `${this.file}.corrupt-${Date.now()}`;
      try {
        renameSync(this.file, aside);
      } catch {
        /* keep going without it */
      }
      return { state: undefined, warning: `state file ${this.file} is unreadable (${errorMessage(err)}); moved to ${aside}` };
    }
  }

  /** Coalesces bursts of changes into one write shortly after; while a failed write waits for its retry, the retry covers it. */
  schedule(): void {
    if (this.timer || this.closed) return;
    const delay = Math.max(this.opts.delayMs ?? 100, Math.min(10 * this.lastWriteMs, 10_000));
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flush();
    }, delay);
    this.timer.unref();
  }

  /** Writes the state now (also during a backoff: a clean stop tries once more). Returns whether it was saved. */
  flush(): boolean {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.closed) return false;
    try {
      this.ensureLock();
      if (this.bootIdPending) this.writeBootId();
      const t0 = performance.now();
      writeAtomic(this.file, JSON.stringify(this.opts.collect()));
      this.lastWriteMs = performance.now() - t0;
    } catch (err) {
      this.failed(err);
      return false;
    }
    const recovered = this.streak;
    this.lastError = undefined;
    this.streak = 0;
    this.opts.onSaved?.();
    if (!this.saved || recovered) {
      this.opts.onHealth?.('ok', recovered ? `saved to ${this.file} again after ${recovered} failed writes` : `saved to ${this.file}`);
    }
    this.saved = true;
    return true;
  }

  /** Stops retrying and releases the lock (without writing: flush() first for a clean stop). */
  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.checkTimer) clearInterval(this.checkTimer);
    this.checkTimer = undefined;
    this.closed = true;
    if (this.lockFd === undefined) return;
    try {
      closeSync(this.lockFd);
    } catch {
      /* already closed */
    }
    this.lockFd = undefined;
  }

  /** The last write error, if the latest write failed. */
  get error(): unknown {
    return this.lastError;
  }

  private failed(err: unknown): void {
    if (this.timer) clearTimeout(this.timer);
    this.lastError = err;
    this.streak++;
    this.failures.inc();
    const { firstMs, maxMs } = this.opts.retry ?? { firstMs: 1000, maxMs: 60_000 };
    const delay = Math.min(maxMs, firstMs * 2 ** Math.min(this.streak - 1, 30));
    this.opts.onHealth?.(
      'failed',
      `cannot save ${this.file}: ${errorMessage(err)} (${this.streak} failed in a row, next try in ${formatDelay(delay)})`,
    );
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flush();
    }, delay);
    this.timer.unref();
  }

  /**
   * Makes sure this store holds the lock of the directory at `dir` now; throws (the write fails)
   * when it cannot. The directory may have been deleted or replaced since the lock was taken: the
   * old lock is then on a deleted file and another agent may have started here meanwhile; if it
   * holds the new lock, this agent writes nothing rather than fight it (StateDirLockedError says so).
   */
  private ensureLock(): void {
    if (this.lockFd !== undefined && sameFile(this.lockFd, this.lockFile)) {
      if (this.pidPending) this.writePid(this.lockFd);
      return;
    }
    mkdirSync(this.dir, { recursive: true });
    const fd = this.lock();
    if (this.lockFd !== undefined) {
      closeSync(this.lockFd);
      // A new directory: its boot-id file is written again before the state.
      this.bootIdPending = true;
    }
    this.lockFd = fd;
  }

  /** The idle check: a directory deleted or taken over is noticed (and made again) before the next change. */
  private check(): void {
    if (!this.loaded || this.closed || this.timer || (this.lockFd !== undefined && sameFile(this.lockFd, this.lockFile))) return;
    this.flush();
  }

  private writeBootId(): void {
    writeAtomic(this.bootIdFile, `${this.opts.bootId}\n`);
    this.bootIdPending = false;
  }

  /** Opens the lock file and takes flock(LOCK_EX|LOCK_NB) on it; writes this pid into it for the next one refused. */
  private lock(): number {
    const fd = openSync(this.lockFile, constants.O_RDWR | constants.O_CREAT, 0o644);
    try {
      const c = libc();
      let rc: number;
      do rc = c.flock(fd, LOCK_EX | LOCK_NB);
      while (rc < 0 && c.errno() === EINTR);
      if (rc < 0) {
        const errno = c.errno();
        if (errno === EWOULDBLOCK) {
          const pid = Number(readText(this.lockFile)?.trim());
          throw new StateDirLockedError(this.dir, Number.isInteger(pid) && pid > 0 ? pid : undefined);
        }
        throw new VigilError('VIGIL_E_STATE_DIR_LOCK_FAILED', `cannot lock ${this.lockFile}: flock failed with errno ${errno}`);
      }
      this.writePid(fd);
      return fd;
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  /** The pid in the lock file only names the holder for a refused agent: a full disk must not fail the lock. */
  private writePid(fd: number): void {
    try {
      ftruncateSync(fd, 0);
      writeSync(fd, `${process.pid}\n`, 0);
      this.pidPending = false;
    } catch {
      this.pidPending = true;
    }
  }
}

/** Temp file with a name of its own (pid + random), fsync, rename over the target. */
export function writeAtomic(file: string, text: string): void {
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  try {
    const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o644);
    try {
      writeFileSync(fd, text);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, file);
  } catch (err) {
    try {
      unlinkSync(tmp);
    } catch {
      /* never created, or already renamed */
    }
    throw err;
  }
}

/** Whether the open fd is still the file at `file` (not a deleted one replaced since). */
function sameFile(fd: number, file: string): boolean {
  try {
    const a = fstatSync(fd);
    const b = statSync(file);
    return a.dev === b.dev && a.ino === b.ino;
  } catch {
    return false;
  }
}

function readText(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

function formatDelay(ms: number): string {
  return ms < 1000 ? `${ms} ms` : `${Number((ms / 1000).toFixed(1))} s`;
}

/** One counter per registry, shared if a second store registers on it. */
function failureCounter(registry: Registry | undefined): Counter {
  const name = 'vigil_state_write_failures_total';
  const existing = registry?.getSingleMetric(name);
  if (existing) return existing as Counter;
  return new Counter({
    name,
    help: 'Failed writes of the state file; each is retried with backoff until one succeeds.',
    registers: registry ? [registry] : [],
  });
}
