/**
 * Host-check cost on this machine: CPU of one full cycle of every host check (host root `/`, real
 * readers), the costliest single check, and the polling load those checks add at their default
 * intervals. The first cycle is a warm-up (module loads such as koffi, JIT, counter baselines);
 * the figures are medians over the warm cycles. The agent-wide idle figures are bench/idle.ts's.
 */
import { HostMonitors } from '../src/monitors/host-monitors.ts';
import { hostMonitorsConfigSchema } from '../src/monitors/index.ts';

const WARM_CYCLES = 7;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;
const cpuMs = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1000;

export async function benchHost(): Promise<Record<string, number>> {
  const cfg = hostMonitorsConfigSchema.parse({
    hostRoot: '/',
    scheduler: { startupJitter: 0 },
    networking: { dns: { host: 'localhost' } },
  });
  const hm = new HostMonitors(cfg);
  hm.start({ finding: () => undefined, healthy: () => undefined, source: () => undefined });
  // start() schedules every check at once (no startup jitter): let that cycle run as the warm-up.
  const first = await hm.runOnce();
  const firstCpu = first.reduce((s, r) => s + r.cpuMs, 0);

  const cycles: number[] = [];
  const perCheck = new Map<string, number[]>();
  for (let i = 0; i < WARM_CYCLES; i++) {
    const t0 = process.cpuUsage();
    const recs = await hm.runOnce();
    cycles.push(cpuMs(process.cpuUsage(t0)));
    for (const r of recs) perCheck.set(r.name, [...(perCheck.get(r.name) ?? []), r.cpuMs]);
  }
  const checkMedians = [...perCheck].map(([name, xs]) => [name, median(xs)] as const).sort((a, b) => b[1] - a[1]);

  await hm.stop();

  // Steady-state polling load: each check's CPU spread over its interval.
  const amortized = hm.checks.reduce((s, c) => s + (median(perCheck.get(c.name) ?? [0]) / c.intervalMs) * 1000, 0);
  process.stderr.write(
    `  host: first (cold) cycle ${firstCpu.toFixed(2)} ms CPU; per check (median ms): ${checkMedians.map(([n, v]) => `${n}=${v.toFixed(3)}`).join(' ')}\n` +
      `  host: polling load at default intervals ≈ ${amortized.toFixed(4)} millicores\n`,
  );
  return {
    poll_cycle_cpu_ms: median(cycles),
    max_check_cpu_ms: checkMedians[0]?.[1] ?? NaN,
    // The agent-wide idle figures (idle_cpu_millicores, idle_rss_mib) come from bench/idle.ts.
    host_polling_load_millicores: amortized,
  };
}
