/** Storage checks for the work queue. */
import { scanProcesses } from '../../sources/host/procs.ts';
import { settle, type HostCheck } from '../host-check.ts';
import { checkDiskLatency, checkFilesystems, checkIoDelays, type DiskCounters } from './checks.ts';
import { storageConfigSchema, type StorageConfig } from './config.ts';
import { polledMonitor } from '../module.ts';
import { blockDevices, delayAcctEnabled, readDiskstats, readFilesystems, type StatfsFn } from './read.ts';
import { UserRegex } from '../../config/regex.ts';

export { storageConfigSchema, type StorageConfig } from './config.ts';
export type { StatfsFn } from './read.ts';

/** The storage checks: writable mounts and usage, I/O latency, per-process I/O delay. */
export const storageMonitor = polledMonitor({
  name: 'storage',
  schema: storageConfigSchema,
  condition: 'StorageReady',
  unknownReason: 'StorageChecksUnavailable',
  create: (section, deps) => storageChecks(section, deps),
});

export function storageChecks(cfg: StorageConfig, deps: { statfs?: StatfsFn } = {}): HostCheck[] {
  const c = cfg.checks;
  const checks: HostCheck[] = [];
  if (c.filesystems.enabled) {
    checks.push({
      name: 'storage.filesystems',
      ...c.filesystems,
      run: async (ctx) =>
        checkFilesystems(await readFilesystems(ctx.root, cfg.paths, cfg.statfsTimeout, deps.statfs, ctx.signal), cfg, ctx.now),
    });
  }
  if (c.diskstats.enabled) {
    const excluded = cfg.excludedDevices.map((s) => UserRegex.compile(s));
    let prev: Map<string, DiskCounters> | undefined;
    checks.push({
      name: 'storage.diskstats',
      ...c.diskstats,
      run: (ctx) =>
        settle(() => {
          const cur = readDiskstats(ctx.root);
          if (!cur) return { findings: [], healthy: [], status: 'skipped' };
          const r = checkDiskLatency(prev, cur, blockDevices(ctx.root, excluded), cfg, ctx.now);
          prev = cur;
          return r;
        }),
    });
  }
  if (c.iodelay.enabled) {
    const excluded = cfg.excludedProcesses.map((s) => UserRegex.compile(s));
    const prev = new Map<number, { comm: string; ticks: number }>();
    checks.push({
      name: 'storage.iodelay',
      ...c.iodelay,
      run: async (ctx) => {
        if (!delayAcctEnabled(ctx.root)) return { findings: [], healthy: [], status: 'skipped' };
        return checkIoDelays(prev, await scanProcesses(ctx.root, ctx.signal), excluded, cfg, ctx.now);
      },
    });
  }
  return checks;
}
