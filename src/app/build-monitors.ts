/** Builds the enabled monitors from configuration. The only place that knows every monitor. */
import { summarizeCounts } from '../util/summarize.ts';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { ConditionType, FindingSink } from '../api/types.ts';
import type { VigilConfig } from '../settings/index.ts';
import type { PersistedState } from '../state/store.ts';
import type { MonitorEntry } from './agent.ts';
import { loadRuleFiles } from './rule-files.ts';
import { NATIVE_MAX_PATTERNS, regexEngineInfo } from '../config/regex.ts';
import { KernelLogMonitor } from '../monitors/kernel-log/monitor.ts';
import { HostMonitors } from '../monitors/host-monitors.ts';
import { POLLED_MONITORS } from '../monitors/registry.ts';
import { WorkQueue } from '../scheduler/work-queue.ts';
import { GpuMonitor } from '../monitors/gpu/monitor.ts';
import { gpuBelow } from '../monitors/gpu/attribution.ts';
import { createPipeline, declaredConditions, kernelLogClassifierOptions, throughPipeline } from '../pipeline/index.ts';
import path from 'node:path';

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
  const gpu = config.gpu.enabled ? gpuMonitor(config, ctx) : undefined;
  if (config.kernelLog.enabled) entries.push(kernelLogEntry(config, ctx, gpu));
  if (gpu) entries.push(gpuEntry(config, ctx, gpu, queue));
  const host = hostEntry(config, ctx, queue);
  if (host) entries.push(host);
  // Every finding takes the path it takes in `vigil scan`: enrich -> mute -> engine.
  const pipeline = (engine: FindingSink) => createPipeline({ config, registry: ctx.registry, engine, ...(gpu ? { gpus: gpu } : {}) });
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

function gpuMonitor(config: VigilConfig, ctx: BuildContext): GpuMonitor {
  return new GpuMonitor({
    config: { ...config.gpu, fatalXids: config.xid.fatal },
    registry: ctx.registry,
    sysRoot: path.join(config.monitors.hostRoot, 'sys'),
    ownTimer: false,
    log: (obj, msg) => ctx.log.info({ ...obj, monitor: 'gpu' }, msg),
    // Counter baselines survive a restart (judged by increase, never lifetime totals).
    restoredBaselines: ctx.restored?.gpu,
    onBaselines: () => ctx.markDirty(),
    retry: { initialMs: config.sourceRetry.initial, maxMs: config.sourceRetry.max },
  });
}

function gpuEntry(config: VigilConfig, ctx: BuildContext, gpu: GpuMonitor, queue: WorkQueue): MonitorEntry {
  return {
    monitor: {
      name: 'gpu',
      start: async (out) => {
        await gpu.start(out);
        // Only a node with NVIDIA GPUs reports AcceleratedHardwareReady as healthy.
        if (gpu.snapshot().state !== 'running') return;
        ctx.manage('AcceleratedHardwareReady');
        queue.add({
          name: 'gpu.poll',
          intervalMs: gpu.pollIntervalMs,
          // Never above the interval (the queue refuses that): a 10 s poll gets a 10 s budget.
          budgetMs: Math.min(gpu.pollIntervalMs, Math.max(30_000, config.gpu.watchdog * 2)),
          run: () => gpu.pollOnce(),
        });
      },
      stop: async () => {
        queue.remove('gpu.poll');
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
    conditions: [],
    persist: (state) => {
      // Also before the first poll: the restored baselines are then passed on unchanged.
      if (gpu.snapshot().state !== 'off') state.gpu = gpu.baselines();
    },
  };
}

function kernelLogEntry(config: VigilConfig, ctx: BuildContext, gpu: GpuMonitor | undefined): MonitorEntry {
  const k = config.kernelLog;
  const rules = loadRuleFiles(config);
  const patterns = [...rules.userRules.map((r) => r.re), ...rules.npd.flatMap((c) => c.rules.map((r) => r.re))];
  if (patterns.length > 0) {
    // Decides each pattern's engine now (else at its first line), so the log says which runs them.
    const native = patterns.filter((re) => re.engine === 're2').length;
    const e = regexEngineInfo();
    const why = e.why ?? (native < patterns.length ? `${e.fallbacks} answered differently, at most ${NATIVE_MAX_PATTERNS} native` : '');
    ctx.log.info(
      { event: 'user_rule_engine', nativeLoaded: e.loaded, native, patterns: patterns.length },
      `kernel log: ${native} of ${patterns.length} user/NPD patterns run on native RE2${native < patterns.length ? `, the rest on re2js (${why})` : ''}`,
    );
  }
  const sysRoot = path.join(config.monitors.hostRoot, 'sys');
  const monitor = new KernelLogMonitor({
    ...(ctx.restored?.kmsgCursor ? { cursor: ctx.restored.kmsgCursor } : {}),
    reader: { path: k.path, lookbackMs: k.lookback, newBootLookbackMs: k.lookback },
    classifier: { ...kernelLogClassifierOptions(config, rules), ...(gpu ? { gpuAbove: gpuBelow(sysRoot, gpu) } : {}) },
    registry: ctx.registry,
    onCursor: () => ctx.markDirty(),
    onError: (err) => ctx.log.warn({ err, monitor: 'kernel-log' }, `kernel log: ${err.message}`),
    // Losses and sheds are logged with their counts, at most once per 10 s (a storm reports them
    // batch by batch); /healthz shows the monitor degraded for a while after a loss.
    onLost: summarizeCounts((lost, total) =>
      ctx.log.warn(
        { event: 'kmsg_lost', monitor: 'kernel-log', lost, total },
        `${lost} kernel log records were lost to a ring overrun (the agent was stopped or too slow); ${total} since start`,
      ),
    ),
    onShed: summarizeCounts((shed, total) =>
      ctx.log.warn(
        { event: 'kmsg_shed', monitor: 'kernel-log', shed, total },
        `${shed} kernel log records that match no rule were shed unclassified while the agent was behind; ${total} since start`,
      ),
    ),
  });
  return {
    monitor,
    // The kernel log proves the kernel is watched; the other types need their own monitors.
    conditions: ['KernelReady'],
    blind: { conditions: ['KernelReady'], reason: 'KernelLogUnavailable' },
    // NPD files' condition types (False while healthy, as NPD reports them) and user rules' own.
    extraConditions: declaredConditions(rules),
    persist: (state) => {
      const c = monitor.cursor();
      if (c) state.kmsgCursor = c;
    },
  };
}
