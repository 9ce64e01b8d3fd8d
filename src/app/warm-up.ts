/**
 * A fresh agent's first fault pays for compiling the code it runs: V8 compiles a function on its
 * first call and a regular expression on its first use, and Vigil runs without optimizing
 * compilers. bench:compare's trace of a fresh agent's first Xid found about 5 ms more from the
 * kmsg record to the Event's request than for later ones, which put its first signal behind NPD's.
 * Synthetic Fatal Xids (one per pass, WARM_UP_XID_LINES: enough for V8 to give the path its inline
 * caches) go through throwaway copies of the kernel-log monitor and its reader (on records held in
 * memory: the reader's record path, not only the classifier's), the pipeline and the engine; the
 * engine's events from them go to each sink's warm() (throwaway parts that send nothing), and each
 * monitor compiles its own patterns (warm()). V8 compiles a function once for every copy, so the
 * agent's own reader and sinks find theirs compiled. Nothing reaches the agent's engine, sinks,
 * metrics, state or the API server.
 */
import { Registry } from 'prom-client';
import type { Monitor, Published, Sink } from '../api/index.ts';
import type { VigilConfig } from '../settings/index.ts';
import { KernelLogMonitor, WARM_UP_XID_LINES } from '../monitors/index.ts';
import { conditionTables, createPipeline, kernelLogClassifierOptions } from '../pipeline/index.ts';
import { KmsgReader, recordsDevice } from '../sources/index.ts';
import { createEngine } from './engine.ts';

export function warmUp(config: VigilConfig, parts: { monitors: readonly Monitor[]; sinks: readonly Sink[] }): void {
  const registry = new Registry();
  const { conditions } = conditionTables(config, []);
  const engine = createEngine(config, { bootId: 'warm-up', conditions, registry });
  const published: Published[] = [];
  engine.on((event, health) => published.push({ event, health }));
  const pipeline = createPipeline({ config, registry, engine, gpus: { gpuByPci: () => undefined, inventory: () => [] } });
  // One record per pass, each read by a reader of its own: start() delivers it before returning.
  let pass = 0;
  const monitor = new KernelLogMonitor({
    classifier: kernelLogClassifierOptions(config, { userRules: [], npd: [] }),
    registry,
    createReader: (o) =>
      new KmsgReader({
        ...o,
        io: recordsDevice([`4,${pass},0,-;${WARM_UP_XID_LINES[pass]}\n`]),
        wait: 'interval',
        lookbackMs: Infinity,
        bootId: 'warm-up',
      }),
  });
  for (; pass < WARM_UP_XID_LINES.length; pass++) {
    monitor.start(pipeline);
    void monitor.stop();
    engine.health();
  }
  for (const m of parts.monitors) m.warm?.();
  for (const s of parts.sinks) s.warm?.(published);
}
