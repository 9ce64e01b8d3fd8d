/**
 * The NVML path against the fake library (native/fake-nvml), 8 GPUs:
 * - event_loop_delay_p99_ms_with_nvml: main-thread event-loop delay p99 (1 ms resolution) over 3 s
 *   while the event worker sits in nvmlEventSetWait_v2 (250 ms waits), an Xid arrives every 100 ms
 *   and a full 8-GPU poll starts every 200 ms (1,500x the default rate). It stays near the idle
 *   figure because NVML never runs on the main thread. (Polls back to back, ~400/s, keep the main
 *   thread busy with their results and give ~7 ms.)
 * - gpu_poll_cycle_cpu_ms_8gpu: process CPU time (process.cpuUsage: every thread, user + system)
 *   of one poll cycle over 8 GPUs (~100 NVML calls per GPU, identity + all checks), events off,
 *   averaged over 30 cycles after warm-up. It includes the fake's own cost per call.
 * Run alone: `npx tsx bench/gpu.ts`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { Registry } from 'prom-client';
import type { FindingSink } from '../src/api/types.ts';
import { GpuMonitor } from '../src/monitors/gpu/monitor.ts';
import { buildFakeNvml, fakeGpus, writeFakeConfig, type FakeNvmlConfig } from '../native/fake-nvml/build.ts';
import { makeSysfs } from '../test/integration/nvml-helpers.ts';

const GPUS = 8;
const CYCLES = 30;

export async function benchGpu(): Promise<{ event_loop_delay_p99_ms_with_nvml: number; gpu_poll_cycle_cpu_ms_8gpu: number }> {
  const dir = mkdtempSync(path.join(tmpdir(), 'vigil-bench-gpu-'));
  const configPath = path.join(dir, 'nvml.json');
  const sysRoot = path.join(dir, 'sys');
  const previousEnv = process.env.FAKE_NVML_CONFIG;
  const cfg: FakeNvmlConfig = { gpus: fakeGpus(GPUS), events: [] };
  writeFakeConfig(configPath, cfg);
  makeSysfs(sysRoot, GPUS);
  process.env.FAKE_NVML_CONFIG = configPath;
  const libraryPath = buildFakeNvml();
  let findings = 0;
  const sink: FindingSink = { finding: () => void findings++, healthy: () => {}, source: () => {} };
  try {
    // 1. Event-loop delay with the event worker waiting, events arriving and polls running.
    const live = new GpuMonitor({ config: { libraryPath, eventWait: 250 }, registry: new Registry(), sysRoot, ownTimer: false });
    await live.start(sink);
    const h = monitorEventLoopDelay({ resolution: 1 });
    h.enable();
    const end = Date.now() + 3_000;
    let id = 1;
    const xids = setInterval(() => {
      cfg.events = [...(cfg.events ?? []).slice(-20), { id: id++, gpu: id % GPUS, type: 8, data: 13 }];
      writeFakeConfig(configPath, cfg);
    }, 100);
    while (Date.now() < end) {
      const next = Date.now() + 200;
      await live.pollOnce();
      await new Promise((r) => setTimeout(r, Math.max(0, next - Date.now())));
    }
    clearInterval(xids);
    h.disable();
    await live.stop();
    if (findings === 0) throw new Error('no Xid reached the sink during the delay run');

    // 2. CPU time of one poll cycle, events off.
    const poller = new GpuMonitor({ config: { libraryPath, events: false }, registry: new Registry(), sysRoot, ownTimer: false });
    await poller.start(sink);
    for (let i = 0; i < 5; i++) await poller.pollOnce(); // warm-up (JIT, worker start)
    const before = process.cpuUsage();
    for (let i = 0; i < CYCLES; i++) await poller.pollOnce();
    const used = process.cpuUsage(before);
    await poller.stop();
    return {
      event_loop_delay_p99_ms_with_nvml: h.percentile(99) / 1e6,
      gpu_poll_cycle_cpu_ms_8gpu: (used.user + used.system) / 1000 / CYCLES,
    };
  } finally {
    if (previousEnv === undefined) delete process.env.FAKE_NVML_CONFIG;
    else process.env.FAKE_NVML_CONFIG = previousEnv;
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  console.log(JSON.stringify(await benchGpu(), null, 2));
}
