/** The NVIDIA GPU monitor as a registry module: NVML (or DCGM) events, polls on the shared queue, AER. */
import path from 'node:path';
import { pushMonitor } from '../module.ts';
import { gpuSectionSchema } from './config.ts';
import { GpuMonitor } from './monitor.ts';

export const gpuModule = pushMonitor({
  key: 'gpu',
  schema: gpuSectionSchema,
  conditions: ['AcceleratedHardwareReady'],
  unknownReason: 'NvidiaMonitoringUnavailable',
  create: (section, ctx) => {
    const gpu = new GpuMonitor({
      config: { ...section, fatalXids: [...ctx.xid.fatal] },
      registry: ctx.registry,
      sysRoot: path.join(ctx.hostRoot, 'sys'),
      ownTimer: false,
      log: (obj, msg) => ctx.log.info({ ...obj, monitor: 'gpu' }, msg),
      // Counter baselines survive a restart (judged by increase, never lifetime totals).
      restoredBaselines: ctx.restored?.gpu,
      onBaselines: () => ctx.markDirty(),
      retry: ctx.retry,
    });
    return {
      monitor: {
        name: 'gpu',
        start: async (out) => {
          await gpu.start(out);
          // Only a node with NVIDIA GPUs reports AcceleratedHardwareReady as healthy.
          if (gpu.snapshot().state !== 'running') return;
          ctx.manage('AcceleratedHardwareReady');
          ctx.queue.add({
            name: 'gpu.poll',
            intervalMs: gpu.pollIntervalMs,
            // Never above the interval (the queue refuses that): a 10 s poll gets a 10 s budget.
            budgetMs: Math.min(gpu.pollIntervalMs, Math.max(30_000, section.watchdog * 2)),
            run: () => gpu.pollOnce(),
          });
        },
        stop: async () => {
          ctx.queue.remove('gpu.poll');
          await gpu.stop();
        },
        status: () => {
          const s = gpu.snapshot();
          if (s.state === 'off') return { state: 'off', message: 'no NVIDIA GPU on the PCI bus, or the GPU monitor is disabled' };
          if (s.state !== 'running') return { state: 'failed', message: s.state };
          const events = s.events.status === 'failed' ? `events failed: ${s.events.detail ?? 'unknown'}` : `events ${s.events.status}`;
          const push = s.push?.source === 'dcgm' ? `push: DCGM (${s.push.dcgm?.state ?? 'off'})` : 'push: NVML';
          return { state: s.events.status === 'failed' ? 'degraded' : 'ok', message: `${s.gpus.length} GPUs, ${push}, ${events}` };
        },
      },
      // Managed late, once a GPU is proved present (start above).
      conditions: [],
      persist: (state) => {
        // Also before the first poll: the restored baselines are then passed on unchanged.
        if (gpu.snapshot().state !== 'off') state.gpu = gpu.baselines();
      },
      gpus: gpu,
    };
  },
});
