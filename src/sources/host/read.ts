/**
 * Small readers for /proc and /sys. procfs and most sysfs files are generated from kernel memory,
 * so synchronous reads are cheaper than async ones (one open/read/close, no thread-pool hops) and
 * cannot block; attributes that ask a device (RDMA counters query firmware) use readSysFileAsync.
 * Every reader returns undefined when the file is missing or unreadable: absent is a normal state.
 */
import fs from 'node:fs';
import { hostPath } from './paths.ts';

let scratch = Buffer.allocUnsafe(64 * 1024);
/** Largest file read (mountinfo on a busy node is a few hundred KiB). */
const MAX_READ = 8 * 1024 * 1024;

/** Whole file, synchronously, through one reused buffer. */
export function readFileSmall(file: string): string | undefined {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch {
    return undefined;
  }
  try {
    let off = 0;
    for (;;) {
      if (off === scratch.length) {
        if (scratch.length >= MAX_READ) break;
        const bigger = Buffer.allocUnsafe(scratch.length * 2);
        scratch.copy(bigger, 0, 0, off);
        scratch = bigger;
      }
      const n = fs.readSync(fd, scratch, off, scratch.length - off, null);
      if (n === 0) break;
      off += n;
    }
    return scratch.toString('utf8', 0, off);
  } catch {
    return undefined;
  } finally {
    fs.closeSync(fd);
  }
}

export function readProcFile(root: string, p: string): string | undefined {
  return readFileSmall(hostPath(root, p));
}

export function readSysFile(root: string, p: string): string | undefined {
  return readFileSmall(hostPath(root, p));
}

/** For attributes that may wait on hardware: off the event loop, abortable. */
export async function readSysFileAsync(root: string, p: string, signal?: AbortSignal): Promise<string | undefined> {
  try {
    return await fs.promises.readFile(hostPath(root, p), { encoding: 'utf8', signal });
  } catch (err) {
    if (signal?.aborted) throw err;
    return undefined;
  }
}

/** A trimmed file parsed as a number; undefined when missing or not numeric. */
export function readNumber(root: string, p: string): number | undefined {
  const text = readFileSmall(hostPath(root, p));
  if (text === undefined) return undefined;
  const n = Number(text.trim());
  return Number.isFinite(n) ? n : undefined;
}

export function listDir(root: string, p: string): string[] {
  try {
    return fs.readdirSync(hostPath(root, p));
  } catch {
    return [];
  }
}

export function exists(root: string, p: string): boolean {
  return fs.existsSync(hostPath(root, p));
}

/** Last path element of a symlink's target (driver names: device/driver -> .../ena). */
export function readLinkBase(root: string, p: string): string | undefined {
  try {
    const target = fs.readlinkSync(hostPath(root, p));
    return target.slice(target.lastIndexOf('/') + 1);
  } catch {
    return undefined;
  }
}
