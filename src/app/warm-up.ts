/**
 * A fresh agent's first fault pays for compiling the code it runs: V8 compiles a function on its
 * first call, and Vigil runs without optimizing compilers. bench:compare measured 3-7 ms from the
 * kmsg record to the Event's request for a fresh agent's first Xid, against 0.5-2 ms for later ones,
 * which put its first signal behind NPD's. One synthetic Fatal Xid through throwaway copies of the
 * classifier, the pipeline and the engine compiles that path before a real fault takes it; nothing
 * reaches the agent's engine, sinks, metrics or state.
 */
import { Registry } from 'prom-client';
import type { VigilConfig } from '../settings/index.ts';
import { KernelLogClassifier } from '../monitors/kernel-log/classify.ts';
import { conditionTables, createPipeline, kernelLogClassifierOptions } from '../pipeline/index.ts';
import { createEngine } from './engine.ts';

/** A line of the kind a fresh agent must answer fastest: a GPU fallen off the bus (Fatal). */
const XID_LINE = 'NVRM: Xid (PCI:0000:00:00): 79, pid=0, name=warm-up, GPU has fallen off the bus.';

export function warmUp(config: VigilConfig): void {
  const registry = new Registry();
  const { conditions } = conditionTables(config, []);
  const engine = createEngine(config, { bootId: 'warm-up', conditions, registry });
  const pipeline = createPipeline({ config, registry, engine, gpus: { gpuByPci: () => undefined, inventory: () => [] } });
  const classifier = new KernelLogClassifier(kernelLogClassifierOptions(config, { userRules: [], npd: [] }));
  const at = Date.now();
  for (const f of classifier.classify({ message: XID_LINE, level: 4, seq: 0, tsUsec: 0 }, at)) pipeline.finding(f);
  engine.health();
}
