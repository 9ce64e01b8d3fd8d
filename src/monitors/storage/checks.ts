/** Storage checks: samples in, findings and healthy entities out. No I/O. */
import type { ProcSample } from '../../sources/host/procs.ts';
import type { StatFsSample } from '../../sources/host/statfs.ts';
import { finding, pct } from '../host-finding.ts';
import type { CheckReport } from '../host-check.ts';
import type { StorageConfig } from './config.ts';
import type { LineTest } from '../../config/regex.ts';

export interface MountEntry {
  mountPoint: string;
  fsType: string;
  source: string;
  readOnly: boolean;
}

/** mountinfo(5): `id parent maj:min root mountpoint options [optional...] - fstype source superoptions`. */
export function parseMountinfo(text: string): MountEntry[] {
  const out: MountEntry[] = [];
  const unescape = (s: string) => s.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));
  for (const line of text.split('\n')) {
    const f = line.split(' ');
    const dash = f.indexOf('-', 6);
    if (f.length < 10 || dash < 0) continue;
    const opts = f[5].split(',');
    const superOpts = (f[dash + 3] ?? '').split(',');
    out.push({
      mountPoint: unescape(f[4]),
      fsType: f[dash + 1],
      source: unescape(f[dash + 2]),
      readOnly: opts.includes('ro') || superOpts.includes('ro'),
    });
  }
  return out;
}

/** The mount a path lives on: the longest mount point that contains it (the last one wins when stacked). */
export function mountFor(path: string, mounts: MountEntry[]): MountEntry | undefined {
  let best: MountEntry | undefined;
  for (const m of mounts) {
    const inside = m.mountPoint === '/' || path === m.mountPoint || path.startsWith(`${m.mountPoint}/`);
    if (inside && (!best || m.mountPoint.length >= best.mountPoint.length)) best = m;
  }
  return best;
}

export interface FilesystemSample {
  /** The configured path(s) on this mount. */
  paths: string[];
  mount: MountEntry;
  statfs?: StatFsSample;
}

export function checkFilesystems(samples: FilesystemSample[], cfg: StorageConfig, at: number): CheckReport {
  const r: CheckReport = { findings: [], healthy: [] };
  for (const { paths, mount, statfs } of samples) {
    const entity = `mount:${mount.mountPoint}`;
    const attrs = { paths: paths.join(','), fsType: mount.fsType, device: mount.source };
    if (mount.readOnly) {
      r.findings.push(
        finding('FilesystemReadOnly', 'procfs', entity, `${mount.mountPoint} (${paths.join(', ')}) is mounted read-only`, at, attrs),
      );
    } else r.healthy.push({ reasons: ['FilesystemReadOnly'], entity, source: 'procfs' });
    if (!statfs) continue;
    // As df: used / (used + available to unprivileged users).
    const used = statfs.blocks - statfs.bfree;
    if (used + statfs.bavail > 0) {
      const u = used / (used + statfs.bavail);
      if (u >= cfg.diskUsageRatio)
        r.findings.push(finding('DiskUsageHigh', 'procfs', entity, `${mount.mountPoint} is ${pct(u)} full`, at, attrs));
      else r.healthy.push({ reasons: ['DiskUsageHigh'], entity, source: 'procfs' });
    }
    // Filesystems without a fixed inode table (btrfs) report 0 files.
    if (statfs.files > 0) {
      const u = (statfs.files - statfs.ffree) / statfs.files;
      if (u >= cfg.inodeUsageRatio)
        r.findings.push(finding('InodeUsageHigh', 'procfs', entity, `${mount.mountPoint} has used ${pct(u)} of its inodes`, at, attrs));
      else r.healthy.push({ reasons: ['InodeUsageHigh'], entity, source: 'procfs' });
    }
  }
  if (samples.length === 0) r.status = 'skipped';
  return r;
}

export interface DiskCounters {
  /** Completed reads + writes + discards. */
  ios: number;
  /** Milliseconds spent on them (sum of per-request times, so queueing counts). */
  ticks: number;
}

/** /proc/diskstats; flushes are left out (their latency is the device's cache flush, not I/O). */
export function parseDiskstats(text: string): Map<string, DiskCounters> {
  const out = new Map<string, DiskCounters>();
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 14) continue;
    const n = (i: number) => Number(f[i] ?? 0) || 0;
    // 3 reads, 6 read ms, 7 writes, 10 write ms; 14 discards, 17 discard ms (kernel >= 4.18)
    out.set(f[2], { ios: n(3) + n(7) + n(14), ticks: n(6) + n(10) + n(17) });
  }
  return out;
}

export function checkDiskLatency(
  prev: Map<string, DiskCounters> | undefined,
  cur: Map<string, DiskCounters>,
  devices: string[],
  cfg: StorageConfig,
  at: number,
): CheckReport {
  const r: CheckReport = { findings: [], healthy: [] };
  if (!prev) return r; // baseline
  for (const dev of devices) {
    const a = prev.get(dev);
    const b = cur.get(dev);
    if (!a || !b) continue;
    const ios = b.ios - a.ios;
    const ticks = b.ticks - a.ticks;
    if (ios < 0 || ticks < 0) continue; // counters reset (device re-added)
    const entity = `blockdev:${dev}`;
    const avg = ios > 0 ? ticks / ios : 0;
    if (ios >= cfg.ioLatencyMinIos && avg >= cfg.ioLatency) {
      r.findings.push(
        finding('DiskIOLatencyHigh', 'procfs', entity, `${dev}: average I/O latency ${avg.toFixed(0)} ms over ${ios} I/Os`, at, {
          avgMs: Math.round(avg),
          ios,
        }),
      );
    } else r.healthy.push({ reasons: ['DiskIOLatencyHigh'], entity, source: 'procfs' });
  }
  return r;
}

const USER_HZ = 100; // /proc reports clock ticks in USER_HZ, fixed at 100 on Linux

/**
 * Block-I/O delay per process over the window; `prev` (pid → ticks, comm) is updated in place.
 * New processes are baselined. Findings are per comm (bounded cardinality), worst first.
 */
export function checkIoDelays(
  prev: Map<number, { comm: string; ticks: number }>,
  procs: ProcSample[],
  excluded: readonly LineTest[],
  cfg: StorageConfig,
  at: number,
): CheckReport {
  const worst = new Map<string, { ms: number; pid: number }>();
  const baseline = prev.size === 0;
  const alive = new Set<number>();
  for (const p of procs) {
    alive.add(p.pid);
    const before = prev.get(p.pid);
    prev.set(p.pid, { comm: p.comm, ticks: p.blkioTicks });
    if (!before || before.comm !== p.comm || excluded.some((re) => re.test(p.comm))) continue;
    const ms = ((p.blkioTicks - before.ticks) * 1000) / USER_HZ;
    if (ms >= cfg.ioDelay && ms > (worst.get(p.comm)?.ms ?? 0)) worst.set(p.comm, { ms, pid: p.pid });
  }
  for (const pid of prev.keys()) if (!alive.has(pid)) prev.delete(pid);
  const r: CheckReport = { findings: [], healthy: [] };
  if (baseline) return r;
  const top = [...worst].sort((a, b) => b[1].ms - a[1].ms).slice(0, cfg.ioDelayMaxFindings);
  for (const [comm, { ms, pid }] of top) {
    r.findings.push(
      finding(
        'IODelays',
        'procfs',
        `proc:${comm}`,
        `process ${comm} (pid ${pid}) waited ${(ms / 1000).toFixed(1)} s on block I/O since the last poll`,
        at,
        {
          pid,
          delayMs: ms,
        },
      ),
    );
  }
  return r;
}
