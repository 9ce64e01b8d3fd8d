/** Builds the enabled monitors from configuration. The only place that knows every monitor. */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { ConditionType } from '../api/types.ts';
import type { VigilConfig } from '../config/load.ts';
import type { PersistedState } from '../state/store.ts';
import type { MonitorEntry } from './agent.ts';
import { loadRuleFiles } from './rule-files.ts';
import { KernelLogMonitor } from '../monitors/kernel-log/monitor.ts';

export interface BuildContext {
  restored: PersistedState | undefined;
  registry: Registry;
  markDirty: () => void;
  manage: (type: ConditionType) => void;
  log: Logger;
}

export function buildMonitors(config: VigilConfig, ctx: BuildContext): MonitorEntry[] {
  const entries: MonitorEntry[] = [];
  if (config.kernelLog.enabled) entries.push(kernelLogEntry(config, ctx));
  return entries;
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
