/**
 * A burst of distinct kernel faults through the real /dev/kmsg into a real standalone agent: the
 * agent's CPU (all threads, from /proc) to digest them, and /healthz latency while it does. Half
 * the lines are Warnings, half Fatal, each on its own device, so every line is a new problem.
 * Needs root. `npx tsx bench/burst.ts 1000 2000 5000` prints each size, to show cost is linear.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { kernelLogOnlyConfig, startAgent } from '../test/helpers/agent-process.ts';
import { burstLine, percentile, pollHealthz, writeBurst } from '../test/helpers/kmsg-burst.ts';
import { cpuSeconds } from './idle.ts';

export interface BurstFigures {
  findings: number;
  cpuMs: number;
  healthzP99Ms: number;
  healthzMaxMs: number;
  healthzSamples: number;
  writeMs: number;
  /** From the first write to the last finding logged. */
  digestMs: number;
  lostRecords: number;
}

export async function measureBurst(n: number): Promise<BurstFigures> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-burst-'));
  // Only the kernel log, from now on: host checks and the ring's old records would blur the figure.
  const config = path.join(dir, 'vigil.yaml');
  writeFileSync(config, kernelLogOnlyConfig());
  const agent = await startAgent(['--standalone', '--state-dir', dir, '--config', config]);
  try {
    const pid = agent.child.pid!;
    const token = Math.random().toString(16).slice(2, 8);
    const mine = new Set(Array.from({ length: n }, (_, i) => burstLine(token, i, true).entity));
    let seen = 0;
    let done!: () => void;
    const all = new Promise<void>((r) => (done = r));
    // Count from the log as it streams: every new problem is one 'finding' line.
    const lines = agent.lines;
    let scanned = 0;
    const scan = setInterval(() => {
      for (; scanned < lines.length; scanned++) {
        const l = lines[scanned];
        if (l.event === 'finding' && typeof l.entity === 'string' && mine.delete(l.entity)) seen++;
      }
      if (seen === n) done();
    }, 5);
    // Let start-up work (the lookback read, the first state save) settle first.
    await new Promise((r) => setTimeout(r, 1500));
    const poller = pollHealthz(agent.port);
    await new Promise((r) => setTimeout(r, 200));
    const c0 = cpuSeconds(pid);
    const t0 = Date.now();
    const { writeMs } = await writeBurst(token, n, true);
    // Give up once nothing new has arrived for 30 s (records lost to the ring never come).
    for (let last = -1; seen < n && seen !== last;) {
      last = seen;
      await Promise.race([all, new Promise((r) => setTimeout(r, 30_000))]);
    }
    const digestMs = Date.now() - t0;
    clearInterval(scan);
    // Include the state save that follows the burst.
    await new Promise((r) => setTimeout(r, 500));
    const cpuMs = (cpuSeconds(pid) - c0) * 1000;
    const samples = await poller.stop();
    const metrics = String(await agent.get('/metrics'));
    const lost = Number(/^vigil_kmsg_lost_records_total (\d+)/m.exec(metrics)?.[1] ?? NaN);
    if (seen < n) throw new Error(`only ${seen} of ${n} findings arrived; the agent counted ${lost} records lost`);
    if (samples.failures.length) throw new Error(`/healthz failed during the burst: ${samples.failures.slice(0, 3).join('; ')}`);
    return {
      findings: n,
      cpuMs,
      healthzP99Ms: percentile(samples.latencies, 99),
      healthzMaxMs: Math.max(...samples.latencies),
      healthzSamples: samples.latencies.length,
      writeMs,
      digestMs,
      lostRecords: lost,
    };
  } finally {
    await agent.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function benchBurst(): Promise<Record<string, number>> {
  const r = await measureBurst(5000);
  return {
    burst_5000_distinct_findings_cpu_ms: r.cpuMs,
    healthz_p99_ms_during_burst: r.healthzP99Ms,
    healthz_max_ms_during_burst: r.healthzMaxMs,
    burst_5000_digest_ms: r.digestMs,
    burst_5000_write_ms: r.writeMs,
    burst_5000_lost_records: r.lostRecords,
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const sizes = process.argv.slice(2).map(Number);
  for (const n of sizes.length ? sizes : [5000]) console.log(JSON.stringify(await measureBurst(n)));
}
