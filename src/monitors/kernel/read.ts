/** Kernel samples: small procfs reads, plus adjtimex(2) and klogctl(2) through libc (src/native). */
import { readNumber, readProcFile } from '../../sources/host/read.ts';
import type { LimitsSample, TimexSample } from './checks.ts';
import { libc, type Libc } from '../../native/index.ts';

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

/** libc is bound on first use only, so agents with the clock check off never load koffi. */
function loadLibc(): Libc | undefined {
  try {
    return libc();
  } catch {
    return undefined;
  }
}

// struct timex on LP64 (x86-64, arm64): modes u32 @0, offset @8, freq @16, maxerror @24, esterror @32, status i32 @40; 208 bytes.
const TIMEX_SIZE = 256;
const SYSLOG_ACTION_READ_ALL = 3;
const SYSLOG_ACTION_SIZE_BUFFER = 10;

function readTimex(): TimexSample | undefined {
  const c = loadLibc();
  if (!c) return undefined;
  const buf = Buffer.alloc(TIMEX_SIZE); // modes = 0: read only, no privilege needed
  const state = c.adjtimex(buf);
  if (state < 0) return undefined;
  return { state, status: buf.readInt32LE(40), maxErrorUs: Number(buf.readBigInt64LE(24)) };
}

function readKlog(): string | undefined {
  const c = loadLibc();
  if (!c) return undefined;
  const size = c.klogctl(SYSLOG_ACTION_SIZE_BUFFER, null, 0);
  if (size <= 0) return undefined;
  const buf = Buffer.alloc(size);
  const n = c.klogctl(SYSLOG_ACTION_READ_ALL, buf, size);
  return n < 0 ? undefined : buf.toString('utf8', 0, n);
}

// Promises for the test seam; a throw becomes a rejection, as before.
export const libcSyscalls: KernelSyscalls = {
  timex: () => new Promise((resolve) => resolve(readTimex())),
  klog: () => new Promise((resolve) => resolve(readKlog())),
};
