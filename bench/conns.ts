/**
 * /healthz latency while 20,000 idle connections are opened to the agent's port and held (issue
 * #22 point 10): a real standalone agent, a fresh loopback connection for each /healthz. Two
 * phases: while the flood opens its connections (the agent accepts them and evicts idle ones at
 * its cap), and for HOLD_MS once all are made and the flood holds them (before the agent's 10 s
 * idle timeout closes what it kept). Also the most descriptors the agent had open.
 * `npm run bench -- conns`, or `npx tsx bench/conns.ts` to print the figures only.
 */
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { kernelLogOnlyConfig, startAgent } from '../test/helpers/agent-process.ts';
import { acceptQueue, idleFlood } from '../test/helpers/idle-connections.ts';
import { percentile, pollHealthz } from '../test/helpers/kmsg-burst.ts';
import { cpuSeconds } from './idle.ts';

const CONNECTIONS = 20_000;
const HOLD_MS = 5000;

export async function benchConns(): Promise<Record<string, number>> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-conns-bench-'));
  const config = path.join(dir, 'vigil.yaml');
  writeFileSync(config, kernelLogOnlyConfig());
  const agent = await startAgent(['--standalone', '--state-dir', dir, '--config', config]);
  try {
    const pid = agent.child.pid!;
    const fds = () => readdirSync(`/proc/${pid}/fd`).length;
    await new Promise((r) => setTimeout(r, 1000));
    let maxFds = fds();
    const sampler = setInterval(() => (maxFds = Math.max(maxFds, fds())), 20);
    const opening = pollHealthz(agent.port, { timeoutMs: 10_000 });
    const flood = idleFlood(agent.port, CONNECTIONS);
    let holding: ReturnType<typeof pollHealthz> | undefined;
    try {
      const t0 = Date.now();
      const c0 = cpuSeconds(pid);
      const opened = await flood.opened;
      while (acceptQueue(agent.port) !== 0 && Date.now() - t0 < 60_000) await new Promise((r) => setTimeout(r, 100));
      const openMs = Date.now() - t0;
      const openCpuMs = (cpuSeconds(pid) - c0) * 1000;
      const during = await opening.stop();
      holding = pollHealthz(agent.port, { timeoutMs: 10_000 });
      await new Promise((r) => setTimeout(r, HOLD_MS));
      const held = await holding.stop();
      clearInterval(sampler);
      if (opened.connected !== CONNECTIONS) throw new Error(`only ${opened.connected} of ${CONNECTIONS} connections were made`);
      const failures = [...during.failures, ...held.failures];
      if (failures.length) throw new Error(`/healthz failed ${failures.length} times: ${failures.slice(0, 3).join('; ')}`);
      return {
        healthz_p99_ms_with_20000_idle_connections: percentile(held.latencies, 99),
        healthz_samples_with_20000_idle_connections: held.latencies.length,
        healthz_p99_ms_while_opening_20000_connections: percentile(during.latencies, 99),
        healthz_max_ms_while_opening_20000_connections: Math.max(...during.latencies),
        healthz_samples_while_opening_20000_connections: during.latencies.length,
        agent_max_fds_with_20000_idle_connections: maxFds,
        idle_connections_20000_open_ms: openMs,
        agent_cpu_ms_opening_20000_connections: openCpuMs,
      };
    } finally {
      clearInterval(sampler);
      await opening.stop();
      await holding?.stop();
      await flood.stop();
    }
  } finally {
    await agent.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(JSON.stringify(await benchConns()));
}
