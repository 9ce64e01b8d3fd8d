/** Storage samples: mountinfo, statfs, diskstats and the delay-accounting switch. */
import { exists, listDir, readNumber, readProcFile } from '../../sources/host/read.ts';
import { hostPath } from '../../sources/host/paths.ts';
import { statfs as realStatfs, type StatFsSample } from '../../sources/host/statfs.ts';
import { mountFor, parseDiskstats, parseMountinfo, type DiskCounters, type FilesystemSample, type MountEntry } from './checks.ts';
import type { LineTest } from '../../config/regex.ts';

export type StatfsFn = (file: string, timeoutMs: number, signal?: AbortSignal) => Promise<StatFsSample>;

/**
 * Mounts as the host sees them: PID 1's mountinfo under the host root is the host's mount namespace
 * (its procfs shows host PIDs); if unreadable, fall back to our own, whose mount points carry the root prefix.
 */
export function readMounts(root: string): { mounts: MountEntry[]; prefix: string } {
  const host = readProcFile(root, '/proc/1/mountinfo');
  if (host !== undefined) return { mounts: parseMountinfo(host), prefix: '' };
  const own = readProcFile(root, '/proc/self/mountinfo') ?? '';
  return { mounts: parseMountinfo(own), prefix: root === '/' ? '' : root.replace(/\/+$/, '') };
}

export async function readFilesystems(
  root: string,
  paths: string[],
  timeoutMs: number,
  statfs: StatfsFn = realStatfs,
  signal?: AbortSignal,
): Promise<FilesystemSample[]> {
  const { mounts, prefix } = readMounts(root);
  const byMount = new Map<string, FilesystemSample>();
  for (const p of paths) {
    if (!exists(root, p)) continue; // no kubelet/containerd on this host
    const m = mountFor(prefix ? (p === '/' ? prefix : prefix + p) : p, mounts);
    if (!m) continue;
    const mount = prefix ? { ...m, mountPoint: m.mountPoint.slice(prefix.length) || '/' } : m;
    const s = byMount.get(mount.mountPoint);
    if (s) s.paths.push(p);
    else byMount.set(mount.mountPoint, { paths: [p], mount });
  }
  for (const s of byMount.values()) {
    try {
      s.statfs = await statfs(hostPath(root, s.paths[0]), timeoutMs, signal);
    } catch {
      if (signal?.aborted) throw signal.reason;
      // a hung or vanished filesystem: the read-only verdict still stands, usage is unknown
    }
  }
  return [...byMount.values()];
}

export function readDiskstats(root: string): Map<string, DiskCounters> | undefined {
  const text = readProcFile(root, '/proc/diskstats');
  return text === undefined ? undefined : parseDiskstats(text);
}

/** Whole disks (/sys/block lists no partitions), minus excluded ones. */
export function blockDevices(root: string, excluded: readonly LineTest[]): string[] {
  return listDir(root, '/sys/block').filter((d) => !excluded.some((re) => re.test(d)));
}

/** Linux >= 5.14 has delay accounting off unless kernel.task_delayacct=1; older kernels count by default. */
export function delayAcctEnabled(root: string): boolean {
  return readNumber(root, '/proc/sys/kernel/task_delayacct') !== 0;
}
