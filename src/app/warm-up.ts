/**
 * A fresh agent's first fault pays for compiling the code it runs: V8 compiles a function on its
 * first call and a regular expression on its first use, and Vigil runs without optimizing
 * compilers. bench:compare's trace of a fresh agent's first Xid found about 5 ms more from the
 * kmsg record to the Event's request than for later ones, which put its first signal behind NPD's.
 * Synthetic Fatal Xids (one per pass, WARM_UP_XID_LINES: enough for V8 to give the path its inline
 * caches) go through throwaway copies of the classifier, the pipeline and the engine; the engine's
 * events from them go to each sink's warm() (throwaway parts that send nothing), and each monitor
 * compiles its own patterns (warm()). Nothing reaches the agent's engine, sinks,
 * metrics, state or the API server.
 */
import { Registry } from 'prom-client';
import type { EngineEvent, Monitor, Sink } from '../api/index.ts';
import type { VigilConfig } from '../settings/index.ts';
import { KernelLogClassifier, WARM_UP_XID_LINES } from '../monitors/index.ts';
import { conditionTables, createPipeline, kernelLogClassifierOptions } from '../pipeline/index.ts';
import { createEngine } from './engine.ts';

export function warmUp(config: VigilConfig, parts: { monitors: readonly Monitor[]; sinks: readonly Sink[] }): void {
  const registry = new Registry();
  const { conditions } = conditionTables(config, []);
  const engine = createEngine(config, { bootId: 'warm-up', conditions, registry });
  const events: EngineEvent[] = [];
  engine.on((event) => events.push(event));
  const pipeline = createPipeline({ config, registry, engine, gpus: { gpuByPci: () => undefined, inventory: () => [] } });
  const classifier = new KernelLogClassifier(kernelLogClassifierOptions(config, { userRules: [], npd: [] }));
  const at = Date.now();
  for (const [seq, message] of WARM_UP_XID_LINES.entries()) {
    for (const f of classifier.classify({ message, level: 4, seq, tsUsec: 0 }, at)) pipeline.finding(f);
    engine.health();
  }
  for (const m of parts.monitors) m.warm?.();
  for (const s of parts.sinks) s.warm?.(events);
}
