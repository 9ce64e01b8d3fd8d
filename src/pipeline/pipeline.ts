/**
 * The one path every finding takes on its way to the engine, whether it came from the live agent
 * (`vigil run`), a saved log (`vigil scan`) or a test: enrich (name the GPU behind a PCI address)
 * -> mute (Xids the operator chose not to hear about, counted) -> engine (dedup, thresholds,
 * escalation, conditions). Anything that decides what a finding means belongs in one of these
 * stages, never in a caller, so `run` and `scan` cannot disagree.
 */
import { Counter, type Registry } from 'prom-client';
import type { FindingSink, Monitor } from '../api/types.ts';
import type { VigilConfig } from '../settings/index.ts';
import { attributeGpu, type GpuLookup } from '../monitors/gpu/attribution.ts';
import { isIgnoredXid } from '../monitors/xid/policy.ts';

export interface PipelineOptions {
  config: Pick<VigilConfig, 'xid'>;
  /** Where the count of muted findings goes (vigil_findings_suppressed_total{why="ignored_xid"}). */
  registry: Registry;
  /** The Engine, or the agent's sink in front of it. */
  engine: FindingSink;
  /** The NVML inventory, when the GPU monitor runs. */
  gpus?: GpuLookup;
}

/** The sink monitors publish through: enrich -> mute -> engine. */
export function createPipeline(o: PipelineOptions): FindingSink {
  const muted = muteIgnoredXids(o.engine, o.config.xid.ignore, o.registry);
  return o.gpus ? attributeGpu(muted, o.gpus) : muted;
}

/** A monitor that publishes through the pipeline built for the sink it is started with. */
export function throughPipeline(monitor: Monitor, pipeline: (engine: FindingSink) => FindingSink): Monitor {
  return {
    name: monitor.name,
    start: (out) => monitor.start(pipeline(out)),
    stop: () => monitor.stop(),
    ...(monitor.status ? { status: () => monitor.status!() } : {}),
    ...(monitor.warm ? { warm: () => monitor.warm!() } : {}),
  };
}

function muteIgnoredXids(out: FindingSink, ignore: readonly number[], registry: Registry): FindingSink {
  if (ignore.length === 0) return out;
  const set = new Set(ignore);
  let counter: Counter<'why'> | undefined;
  return {
    finding: (f) => {
      if (!isIgnoredXid(f, set)) return out.finding(f);
      // Looked up on first use: the engine registers this counter, and may be built after us.
      counter ??= suppressedCounter(registry);
      counter.inc({ why: 'ignored_xid' });
    },
    healthy: (h) => out.healthy(h),
    source: (r) => out.source(r),
  };
}

function suppressedCounter(registry: Registry): Counter<'why'> {
  const name = 'vigil_findings_suppressed_total';
  return (
    (registry.getSingleMetric(name) as Counter<'why'> | undefined) ??
    new Counter({ name, help: 'Findings counted but not re-emitted.', labelNames: ['why'], registers: [registry] })
  );
}
