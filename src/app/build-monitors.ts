/** Builds the enabled monitors of the registry (src/monitors/registry.ts) from configuration. */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { ConditionType, FindingSink } from '../api/types.ts';
import type { VigilConfig } from '../settings/index.ts';
import type { PersistedState } from '../state/store.ts';
import type { MonitorEntry } from './agent.ts';
import { HostMonitors } from '../monitors/host-monitors.ts';
import type { GpuLookup } from '../monitors/gpu/attribution.ts';
import type { MonitorContext } from '../monitors/module.ts';
import { POLLED_MONITORS, PUSH_MONITORS } from '../monitors/registry.ts';
import { WorkQueue } from '../scheduler/work-queue.ts';
import { createPipeline, throughPipeline, xidInputs } from '../pipeline/index.ts';

export interface BuildContext {
  restored: PersistedState | undefined;
  registry: Registry;
  markDirty: () => void;
  manage: (type: ConditionType) => void;
  log: Logger;
}

export function buildMonitors(config: VigilConfig, ctx: BuildContext): MonitorEntry[] {
  // One sequential queue for every polled check (host checks and the GPU poll), so at most one
  // check runs at a time on the node.
  const queue = new WorkQueue({
    registry: ctx.registry,
    startupJitterMs: config.monitors.scheduler.startupJitter,
    jitter: config.monitors.scheduler.jitter,
  });
  // The GPU inventory, for whichever monitor keeps one; read at call time, so a monitor built
  // before it (the kernel log) still names the GPU behind a line.
  const kept: { by?: GpuLookup } = {};
  const gpus: GpuLookup = { gpuByPci: (pci) => kept.by?.gpuByPci(pci), inventory: () => kept.by?.inventory() ?? [] };
  const monitorCtx: MonitorContext = {
    hostRoot: config.monitors.hostRoot,
    registry: ctx.registry,
    log: ctx.log,
    queue,
    restored: ctx.restored,
    markDirty: ctx.markDirty,
    manage: ctx.manage,
    retry: { initialMs: config.sourceRetry.initial, maxMs: config.sourceRetry.max },
    xid: xidInputs(config),
    gpus,
  };
  const entries: MonitorEntry[] = PUSH_MONITORS.flatMap((m) => m.partFrom(config, monitorCtx) ?? []);
  const keeper = entries.find((e) => e.gpus)?.gpus;
  if (keeper) kept.by = keeper;
  const host = hostEntry(config, ctx, queue);
  if (host) entries.push(host);
  // Every finding takes the path it takes in `vigil scan`: enrich -> mute -> engine.
  const pipeline = (engine: FindingSink) => createPipeline({ config, registry: ctx.registry, engine, ...(kept.by ? { gpus } : {}) });
  for (const e of entries) e.monitor = throughPipeline(e.monitor, pipeline);
  // Last, so it stops after the monitors that put checks on it.
  entries.push({ monitor: { name: 'scheduler', start: () => queue.start(), stop: () => queue.stop() }, conditions: [] });
  return entries;
}

function hostEntry(config: VigilConfig, ctx: BuildContext, queue: WorkQueue): MonitorEntry | undefined {
  const m = config.monitors;
  // The condition of each enabled polled module, once (two modules may watch one condition).
  const conditions = [...new Set(POLLED_MONITORS.filter((p) => m[p.name].enabled).map((p) => p.condition))];
  if (conditions.length === 0) return undefined;
  return { monitor: new HostMonitors(m, { scheduler: queue, log: ctx.log }), conditions };
}
