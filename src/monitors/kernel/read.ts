/** Kernel samples: small procfs reads, plus adjtimex(2) and klogctl(2) through libc (koffi). */
import { readNumber, readProcFile } from '../../sources/host/read.ts';
import type { LimitsSample, TimexSample } from './checks.ts';

export function readLimits(root: string): LimitsSample {
  const s: LimitsSample = {};
  // loadavg's 4th field is running/total scheduling entities: a thread count in one read.
  const total = readProcFile(root, '/proc/loadavg')?.split(' ')[3]?.split('/')[1];
  if (total !== undefined && /^\d+$/.test(total)) s.threads = Number(total);
  const pidMax = readNumber(root, '/proc/sys/kernel/pid_max');
  if (pidMax !== undefined) s.pidMax = pidMax;
  const threadsMax = readNumber(root, '/proc/sys/kernel/threads-max');
  if (threadsMax !== undefined) s.threadsMax = threadsMax;
  const fileNr = readProcFile(root, '/proc/sys/fs/file-nr')?.trim().split(/\s+/);
  if (fileNr?.length === 3) {
    s.filesAllocated = Number(fileNr[0]);
    s.fileMax = Number(fileNr[2]);
  }
  return s;
}

/** Kernel time status and the kernel log, both from the kernel the process runs on (shared with the host). */
export interface KernelSyscalls {
  timex(): Promise<TimexSample | undefined>;
  /** The kernel log ring as text (needs CAP_SYSLOG), or undefined. */
  klog(): Promise<string | undefined>;
}

interface Libc {
  adjtimex: (buf: Buffer) => number;
  klogctl: (type: number, buf: Buffer | null, len: number) => number;
}

let libc: Promise<Libc | undefined> | undefined;

/** koffi is loaded on first use only, so agents with the clock check off never load it. */
function loadLibc(): Promise<Libc | undefined> {
  libc ??= import('koffi')
    .then(({ default: koffi }) => {
      const lib = koffi.load('libc.so.6');
      return {
        adjtimex: lib.func('int adjtimex(void *buf)') as unknown as Libc['adjtimex'],
        klogctl: lib.func('int klogctl(int type, void *buf, int len)') as unknown as Libc['klogctl'],
      };
    })
    .catch(() => undefined);
  return libc;
}

// struct timex on LP64 (x86-64, arm64): modes u32 @0, offset @8, freq @16, maxerror @24, esterror @32, status i32 @40; 208 bytes.
const TIMEX_SIZE = 256;
const SYSLOG_ACTION_READ_ALL = 3;
const SYSLOG_ACTION_SIZE_BUFFER = 10;

export const libcSyscalls: KernelSyscalls = {
  async timex() {
    const c = await loadLibc();
    if (!c) return undefined;
    const buf = Buffer.alloc(TIMEX_SIZE); // modes = 0: read only, no privilege needed
    const state = c.adjtimex(buf);
    if (state < 0) return undefined;
    return { state, status: buf.readInt32LE(40), maxErrorUs: Number(buf.readBigInt64LE(24)) };
  },
  async klog() {
    const c = await loadLibc();
    if (!c) return undefined;
    const size = c.klogctl(SYSLOG_ACTION_SIZE_BUFFER, null, 0);
    if (size <= 0) return undefined;
    const buf = Buffer.alloc(size);
    const n = c.klogctl(SYSLOG_ACTION_READ_ALL, buf, size);
    return n < 0 ? undefined : buf.toString('utf8', 0, n);
  },
};
