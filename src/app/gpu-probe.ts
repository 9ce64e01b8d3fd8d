/**
 * `vigil gpu`'s monitor: the GPU module's own GpuMonitor, built here like every other part, with
 * NVML events off (one poll, then stop) and a registry of its own.
 */
import { Registry } from 'prom-client';
import type { GpuConfigInput } from '../monitors/gpu/config.ts';
import { GpuMonitor } from '../monitors/gpu/monitor.ts';

export function createGpuProbe(opts: { config?: GpuConfigInput; library?: string; sysRoot?: string }): GpuMonitor {
  const config: GpuConfigInput = { ...opts.config, events: false, enabled: true };
  if (opts.library) config.libraryPath = opts.library;
  return new GpuMonitor({ config, registry: new Registry(), ownTimer: false, ...(opts.sysRoot ? { sysRoot: opts.sysRoot } : {}) });
}
