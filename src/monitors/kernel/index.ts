/** Kernel checks for the work queue. */
import { readNumber } from '../../sources/host/read.ts';
import { scanProcesses } from '../../sources/host/procs.ts';
import { Consecutive, settle, type HostCheck } from '../host-check.ts';
import { checkClock, checkLimits, checkWarnings, checkZombies, countKernelWarnings } from './checks.ts';
import { kernelConfigSchema, type KernelConfig } from './config.ts';
import { polledMonitor } from '../module.ts';
import { libcSyscalls, readLimits, type KernelSyscalls } from './read.ts';

export { kernelConfigSchema, type KernelConfig } from './config.ts';
export type { KernelSyscalls } from './read.ts';

/** The kernel checks: PID and open-file headroom, zombies, clock sync, WARNING splats. */
export const kernelMonitor = polledMonitor({
  name: 'kernel',
  schema: kernelConfigSchema,
  condition: 'KernelReady',
  unknownReason: 'KernelChecksUnavailable',
  create: (section, deps) => kernelChecks(section, deps.kernel),
});

export function kernelChecks(cfg: KernelConfig, sys: KernelSyscalls = libcSyscalls): HostCheck[] {
  const c = cfg.checks;
  const checks: HostCheck[] = [];
  if (c.limits.enabled) {
    checks.push({ name: 'kernel.limits', ...c.limits, run: (ctx) => settle(() => checkLimits(readLimits(ctx.root), cfg, ctx.now)) });
  }
  if (c.zombies.enabled) {
    const streak = new Consecutive(cfg.zombieConsecutivePolls);
    checks.push({
      name: 'kernel.zombies',
      ...c.zombies,
      run: async (ctx) => {
        const procs = await scanProcesses(ctx.root, ctx.signal);
        let zombies = 0;
        for (const p of procs) if (p.state === 'Z') zombies++;
        return checkZombies(zombies, streak, cfg, ctx.now);
      },
    });
  }
  if (c.clock.enabled) {
    checks.push({ name: 'kernel.clock', ...c.clock, run: async (ctx) => checkClock(await sys.timex(), ctx.now) });
  }
  if (c.warnings.enabled) checks.push({ name: 'kernel.warnings', ...c.warnings, run: warningsCheck(cfg, sys) });
  return checks;
}

/**
 * Counts WARNING splats per window. Linux >= 6.2 counts them in /sys/kernel/warn_count (exact, one
 * small read). Older kernels: scan the kernel log ring (klogctl, one syscall) for `WARNING:` lines
 * newer than the previous poll's last timestamp. The first poll only sets the baseline.
 */
function warningsCheck(cfg: KernelConfig, sys: KernelSyscalls): HostCheck['run'] {
  let prevCount: number | undefined;
  let klogCursor: { ts?: number; total: number } | undefined;
  return async (ctx) => {
    const count = readNumber(ctx.root, '/sys/kernel/warn_count');
    if (count !== undefined) {
      const delta = prevCount === undefined || count < prevCount ? undefined : count - prevCount;
      prevCount = count;
      return delta === undefined ? { findings: [], healthy: [] } : checkWarnings(delta, 'warn_count', cfg, ctx.now);
    }
    const text = await sys.klog();
    if (text === undefined) return { findings: [], healthy: [], status: 'skipped' };
    const seen = countKernelWarnings(text, klogCursor?.ts ?? Infinity);
    const prev = klogCursor;
    klogCursor = { total: seen.total, ...(seen.lastTs !== undefined ? { ts: seen.lastTs } : {}) };
    if (!prev) return { findings: [], healthy: [] };
    // Without timestamps, fall back to the change in total (the ring can also drop old lines).
    const delta = prev.ts !== undefined ? seen.count : Math.max(0, seen.total - prev.total);
    return checkWarnings(delta, 'klog', cfg, ctx.now);
  };
}
