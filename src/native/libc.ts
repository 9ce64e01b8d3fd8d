/**
 * Every libc call Vigil makes, declared in one place and bound through koffi (NVML's calls live in
 * src/sources/nvml/native.ts). libc is bound on first use, so commands that never need it
 * (`vigil scan`, `vigil --help`) never load koffi.
 *
 * The kmsg read thread runs in its own thread and binds poll(2) there; it gets the library name and
 * the declaration from here (POLL_WORKER_LIBC) instead of spelling them itself. On the main thread
 * poll(2) is only ever called asynchronously (`pollAsync`, koffi's `.async`: the call blocks a
 * libuv pool thread, never the event loop).
 */
import { createRequire } from 'node:module';
import type Koffi from 'koffi';
import { errorMessage } from '../util/errors.ts';

const LIBC_SONAME = 'libc.so.6';

const DECLARATIONS = {
  poll: 'int poll(void *fds, unsigned long nfds, int timeout)',
  eventfd: 'int eventfd(unsigned int initval, int flags)',
  flock: 'int flock(int fd, int operation)',
  adjtimex: 'int adjtimex(void *buf)',
  klogctl: 'int klogctl(int type, void *buf, int len)',
  read: 'long read(int fd, void *buf, unsigned long count)',
} as const;

/** flock(2) operations. */
export const LOCK_EX = 2;
export const LOCK_NB = 4;
/** errno values Vigil tells apart (Linux, every architecture Vigil runs on). */
export const EINTR = 4;
export const EWOULDBLOCK = 11;

export interface Libc {
  eventfd(initval: number, flags: number): number;
  flock(fd: number, operation: number): number;
  adjtimex(buf: Buffer): number;
  klogctl(type: number, buf: Buffer | null, len: number): number;
  /**
   * read(2), blocking the calling thread (the kmsg reader's fd is O_NONBLOCK): -1 with errno set on
   * error. Cheaper than fs.readSync per call (no argument checks, no Error built for EAGAIN), which
   * matters at 100,000 records a second with the agent's interpreter-only V8 flags.
   */
  read(fd: number, buf: Buffer, count: number): number;
  /**
   * poll(2) on one of libuv's pool threads (4 by default, shared with fs, dns.lookup, crypto and
   * zlib); `done` runs on the main thread with poll's result, errno readable through errno() there.
   * The pending call keeps the event loop alive until poll returns.
   */
  pollAsync(fds: Buffer, nfds: number, timeoutMs: number, done: (err: unknown, n: number) => void): void;
  /** errno as the last call through koffi on this thread left it. */
  errno(): number;
}

const require = createRequire(import.meta.url);
let bound: { libc: Libc } | { error: Error } | undefined;

/** libc's functions; throws (every time, with the first cause) when koffi or libc cannot be loaded. */
export function libc(): Libc {
  bound ??= bind();
  if ('error' in bound) throw bound.error;
  return bound.libc;
}

function bind(): { libc: Libc } | { error: Error } {
  try {
    const koffi = require('koffi') as typeof Koffi;
    const lib = koffi.load(LIBC_SONAME);
    const fn = <T>(name: keyof typeof DECLARATIONS): T => lib.func(DECLARATIONS[name]) as unknown as T;
    return {
      libc: {
        eventfd: fn<Libc['eventfd']>('eventfd'),
        flock: fn<Libc['flock']>('flock'),
        adjtimex: fn<Libc['adjtimex']>('adjtimex'),
        klogctl: fn<Libc['klogctl']>('klogctl'),
        read: fn<Libc['read']>('read'),
        pollAsync: fn<{ async: Libc['pollAsync'] }>('poll').async,
        errno: () => koffi.errno(),
      },
    };
  } catch (err) {
    return { error: new Error(`cannot load ${LIBC_SONAME} through koffi: ${errorMessage(err)}`, { cause: err }) };
  }
}

/** What the kmsg read thread (plain CommonJS in a worker thread) needs to bind poll(2) and read(2) itself. */
export function pollWorkerLibc(): { koffiPath: string; soname: string; poll: string; read: string } {
  return { koffiPath: require.resolve('koffi'), soname: LIBC_SONAME, poll: DECLARATIONS.poll, read: DECLARATIONS.read };
}
