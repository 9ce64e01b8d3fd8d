/** Builds the enabled monitors from configuration. The only place that knows every monitor. */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { ConditionType } from '../api/types.ts';
import type { VigilConfig } from '../config/load.ts';
import type { PersistedState } from '../state/store.ts';
import type { MonitorEntry } from './agent.ts';
import { loadRuleFiles } from './rule-files.ts';
import { KernelLogMonitor } from '../monitors/kernel-log/monitor.ts';
import { HostMonitors } from '../monitors/host-monitors.ts';
import { WorkQueue } from '../scheduler/work-queue.ts';

export interface BuildContext {
  restored: PersistedState | undefined;
  registry: Registry;
  markDirty: () => void;
  manage: (type: ConditionType) => void;
  log: Logger;
}

export function buildMonitors(config: VigilConfig, ctx: BuildContext): MonitorEntry[] {
  const entries: MonitorEntry[] = [];
  // One sequential queue for every polled check (host checks and the GPU poll), so at most one
  // check runs at a time on the node.
  const queue = new WorkQueue({
    registry: ctx.registry,
    startupJitterMs: config.monitors.scheduler.startupJitter,
    jitter: config.monitors.scheduler.jitter,
  });
  if (config.kernelLog.enabled) entries.push(kernelLogEntry(config, ctx));
  const host = hostEntry(config, ctx, queue);
  if (host) entries.push(host);
  // Last, so it stops after the monitors that put checks on it.
  entries.push({ monitor: { name: 'scheduler', start: () => queue.start(), stop: () => queue.stop() }, conditions: [] });
  return entries;
}

function hostEntry(config: VigilConfig, ctx: BuildContext, queue: WorkQueue): MonitorEntry | undefined {
  const m = config.monitors;
  const conditions: ConditionType[] = [
    ...(m.kernel.enabled ? (['KernelReady'] as const) : []),
    ...(m.networking.enabled ? (['NetworkingReady'] as const) : []),
    ...(m.storage.enabled ? (['StorageReady'] as const) : []),
    ...(m.runtime.enabled ? (['ContainerRuntimeReady'] as const) : []),
  ];
  if (conditions.length === 0) return undefined;
  return { monitor: new HostMonitors(m, { scheduler: queue, log: ctx.log }), conditions };
}

function kernelLogEntry(config: VigilConfig, ctx: BuildContext): MonitorEntry {
  const k = config.kernelLog;
  const rules = loadRuleFiles(config);
  const monitor = new KernelLogMonitor({
    ...(ctx.restored?.kmsgCursor ? { cursor: ctx.restored.kmsgCursor } : {}),
    reader: { path: k.path, lookbackMs: k.lookback },
    classifier: {
      fatalXids: k.fatalXids,
      pcieCorrectedThreshold: { count: k.pcieCorrected.count, windowMs: k.pcieCorrected.window },
      userRules: rules.userRules,
      npd: rules.npd,
    },
    registry: ctx.registry,
    onCursor: () => ctx.markDirty(),
    onError: (err) => ctx.log.warn({ err, monitor: 'kernel-log' }, `kernel log: ${err.message}`),
  });
  return {
    monitor,
    // The kernel log proves the kernel is watched; the other types need their own monitors.
    conditions: ['KernelReady'],
    extraConditions: monitor.npdConditions.map((c) => ({ type: c.type, healthyReason: c.reason, healthyMessage: c.message })),
    persist: (state) => {
      const c = monitor.cursor();
      if (c) state.kmsgCursor = c;
    },
  };
}
