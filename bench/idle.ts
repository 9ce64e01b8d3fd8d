/**
 * The whole agent idle on this machine with every monitor on: CPU in millicores and RSS, read from
 * /proc for the agent process (all its threads) over BENCH_IDLE_SECONDS (default 600 = 10 min).
 * Kernel-log lookback is 0: on a bench machine the ring is full of other benches' synthetic
 * records, and classifying them at start-up is a burst (it can start the read thread), not idle.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startAgent } from '../test/helpers/agent-process.ts';

const SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 600);
const WARMUP_SECONDS = 15;

export function cpuSeconds(pid: number): number {
  // Fields after the ")" of comm: utime and stime are the 12th and 13th (clock ticks, 100/s).
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

export function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

export async function benchIdle(): Promise<Record<string, number>> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-idle-'));
  const config = path.join(dir, 'vigil.yaml');
  writeFileSync(config, 'kernelLog:\n  lookback: "0"\n');
  const agent = await startAgent(['--standalone', '--state-dir', path.join(dir, 'state'), '--config', config]);
  try {
    const pid = agent.child.pid!;
    await new Promise((r) => setTimeout(r, WARMUP_SECONDS * 1000));
    const c0 = cpuSeconds(pid);
    const t0 = Date.now();
    let maxRss = rssMiB(pid);
    while (Date.now() - t0 < SECONDS * 1000) {
      await new Promise((r) => setTimeout(r, 5000));
      maxRss = Math.max(maxRss, rssMiB(pid));
    }
    const cpu = cpuSeconds(pid) - c0;
    const wall = (Date.now() - t0) / 1000;
    return { idle_cpu_millicores: (cpu / wall) * 1000, idle_rss_mib: maxRss, idle_measured_seconds: wall };
  } finally {
    await agent.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
