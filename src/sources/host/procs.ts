/**
 * One pass over /proc/<pid>/stat. There is no cheaper source for per-process state (zombies) or
 * block-I/O delay; reads are synchronous (procfs is in memory) and the loop yields every
 * YIELD_EVERY processes so a node with many processes does not hold the event loop.
 */
import fs from 'node:fs';
import { listDir } from './read.ts';
import { hostPath } from './paths.ts';

export interface ProcSample {
  pid: number;
  comm: string;
  /** R, S, D, Z, ... */
  state: string;
  /** Field 42, delayacct_blkio_ticks (USER_HZ = 100 ticks per second). */
  blkioTicks: number;
}

const YIELD_EVERY = 256;

/** Parses one /proc/<pid>/stat line; comm may hold spaces and ')', so split at the last ')'. */
export function parseProcStat(pid: number, text: string): ProcSample | undefined {
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  if (open < 0 || close < open) return undefined;
  // Field 3 (state) starts at close + 2; walk 39 spaces to field 42 without splitting all 50 fields.
  let at = close + 2;
  for (let f = 3; f < 42 && at > 0; f++) at = text.indexOf(' ', at) + 1;
  const ticks = at > 0 ? parseInt(text.slice(at, text.indexOf(' ', at) >>> 0), 10) : 0;
  return { pid, comm: text.slice(open + 1, close), state: text.charAt(close + 2) || '?', blkioTicks: ticks || 0 };
}

const statBuf = Buffer.allocUnsafe(4096);

/** One read: a stat line is well under 4 KiB and procfs returns it whole, so skip the EOF read. */
function readStat(file: string): string | undefined {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch {
    return undefined; // exited since readdir
  }
  try {
    return statBuf.toString('utf8', 0, fs.readSync(fd, statBuf, 0, statBuf.length, null));
  } catch {
    return undefined;
  } finally {
    fs.closeSync(fd);
  }
}

export async function scanProcesses(root: string, signal?: AbortSignal): Promise<ProcSample[]> {
  const out: ProcSample[] = [];
  const base = hostPath(root, '/proc');
  let i = 0;
  for (const name of listDir(root, '/proc')) {
    const c = name.charCodeAt(0);
    if (c < 48 || c > 57) continue;
    if (++i % YIELD_EVERY === 0) {
      await new Promise<void>((r) => setImmediate(r));
      signal?.throwIfAborted();
    }
    const text = readStat(`${base}/${name}/stat`);
    if (text === undefined) continue;
    const s = parseProcStat(Number(name), text);
    if (s) out.push(s);
  }
  return out;
}
