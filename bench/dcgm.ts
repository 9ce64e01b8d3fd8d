/**
 * Push latency through the C doubles, measured the same way for both channels:
 * - dcgm_event_to_finding_p99_ms: from writing a scripted Xid policy violation to the fake DCGM's
 *   script until its finding reaches the monitor's sink on the main thread. The path: the fake's
 *   own delivery thread (it re-reads its script every 2 ms), the policy callback that koffi queues
 *   onto the DCGM worker's event loop, the decode, a postMessage, the mapping through the Xid policy.
 * - nvml_event_to_finding_p99_ms: the same for an NVML Xid event (the fake NVML's wait re-reads
 *   its script every 5 ms), through the event worker's nvmlEventSetWait_v2 loop.
 * 200 events each, one at a time (the next is written once the previous finding arrived). Both
 * include the doubles' file polling, which real DCGM/NVML do not have.
 * Run alone: `npx tsx bench/dcgm.ts`.
 */
import { pathToFileURL } from 'node:url';
import { Registry } from 'prom-client';
import { DCGM_COND } from '../native/fake-dcgm/build.ts';
import type { Finding, FindingSink } from '../src/api/types.ts';
import { GpuMonitor } from '../src/monitors/gpu/monitor.ts';
import { FakeDcgmEnv, dcgmConfig } from '../test/integration/dcgm-helpers.ts';

const EVENTS = 200;

function p99(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.ceil(s.length * 0.99) - 1)] * 100) / 100;
}

async function latencies(env: FakeDcgmEnv, source: 'nvml' | 'dcgm', send: (xid: number) => void): Promise<number[]> {
  let waiting: { xid: number; sentAt: number; done: (ms: number) => void } | null = null;
  const sink: FindingSink = {
    finding: (f: Finding) => {
      if (waiting && f.attrs?.xid === waiting.xid) waiting.done(performance.now() - waiting.sentAt);
    },
    healthy: () => {},
    source: () => {},
  };
  const config = source === 'dcgm' ? dcgmConfig(env, 'dcgm') : { source };
  const monitor = new GpuMonitor({
    config: { libraryPath: env.libraryPath, eventWait: 250, ...config },
    registry: new Registry(),
    sysRoot: env.sysRoot,
    ownTimer: false,
  });
  await monitor.start(sink);
  const out: number[] = [];
  try {
    for (let i = 0; i < EVENTS; i++) {
      const xid = 1 + (i % 100); // distinct Xids in a row, so each one is a new finding
      const ms = await new Promise<number>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`${source}: Xid ${xid} not reported within 5 s`)), 5_000);
        waiting = {
          xid,
          sentAt: performance.now(),
          done: (v) => {
            clearTimeout(timer);
            resolve(v);
          },
        };
        send(xid);
      });
      waiting = null;
      out.push(ms);
    }
  } finally {
    await monitor.stop();
  }
  return out;
}

export async function benchDcgm(): Promise<{ dcgm_event_to_finding_p99_ms: number; nvml_event_to_finding_p99_ms: number }> {
  const env = new FakeDcgmEnv(2);
  const previous = { nvml: process.env.FAKE_NVML_CONFIG, dcgm: process.env.FAKE_DCGM_CONFIG };
  try {
    const dcgm = await latencies(env, 'dcgm', (xid) => env.violation(1, { condition: DCGM_COND.XID, a: xid }));
    const nvml = await latencies(env, 'nvml', (xid) => env.event({ gpu: 1, type: 8, data: xid }));
    return { dcgm_event_to_finding_p99_ms: p99(dcgm), nvml_event_to_finding_p99_ms: p99(nvml) };
  } finally {
    env.cleanup();
    for (const [k, v] of [
      ['FAKE_NVML_CONFIG', previous.nvml],
      ['FAKE_DCGM_CONFIG', previous.dcgm],
    ] as const) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  console.log(await benchDcgm());
}
