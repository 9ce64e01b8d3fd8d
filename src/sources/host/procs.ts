/**
 * One pass over /proc/<pid>/stat. There is no cheaper source for per-process state (zombies) or
 * block-I/O delay; reads are synchronous (procfs is in memory) and the loop yields every
 * YIELD_EVERY processes so a node with many processes does not hold the event loop.
 */
import { readFileSmall, listDir } from './read.ts';
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
  const rest = text.slice(close + 2).split(' ');
  // rest[0] is field 3 (state), so field N is rest[N - 3].
  return { pid, comm: text.slice(open + 1, close), state: rest[0] ?? '?', blkioTicks: Number(rest[39] ?? 0) || 0 };
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
    const text = readFileSmall(`${base}/${name}/stat`);
    if (text === undefined) continue; // exited since readdir
    const s = parseProcStat(Number(name), text);
    if (s) out.push(s);
  }
  return out;
}
