/**
 * `npm run bench`: runs every benchmark and merges its figures into bench/results/latest.json, one
 * flat object of named figures with the unit in each name. `npm run bench -- kmsg gpu` runs some.
 * The merge goes through bench/latest.ts: every key this invocation writes is stamped with its time
 * and this run's id (`measured`), written after each bench so a later failure keeps what was done.
 */
import { buildDist } from './dist.ts';
import { LATEST_PATH, mergeLatest, newRun } from './latest.ts';

type Bench = () => Promise<Record<string, number>> | Record<string, number>;

const benches: Record<string, () => Promise<Bench>> = {
  kmsg: async () => (await import('./kmsg.ts')).benchKmsgClassify,
  latency: async () => (await import('./kmsg-latency.ts')).benchKmsgLatency,
  gpu: async () => (await import('./gpu.ts')).benchGpu,
  dcgm: async () => (await import('./dcgm.ts')).benchDcgm,
  host: async () => (await import('./host.ts')).benchHost,
  idle: async () => (await import('./idle.ts')).benchIdle,
  burst: async () => (await import('./burst.ts')).benchBurst,
  diagnose: async () => (await import('./diagnose.ts')).benchDiagnose,
  kubernetes: async () => (await import('./kubernetes.ts')).benchKubernetes,
  corpus: async () => (await import('./corpus.ts')).benchCorpus,
  karpenter: async () => (await import('./karpenter.ts')).benchKarpenter,
  conns: async () => (await import('./conns.ts')).benchConns,
  userrules: async () => (await import('./userrules.ts')).benchUserRules,
  'storm-onset': async () => (await import('./storm-onset.ts')).benchStormOnset,
  memory: async () => (await import('./memory.ts')).benchMemory,
};

/** Benches that time code in this process, not the agent: they need no dist/ build. */
const IN_PROCESS = new Set(['kmsg', 'userrules']);

const wanted = process.argv.slice(2).filter((a) => !a.startsWith('-'));
const names = wanted.length ? wanted : Object.keys(benches);
const run = newRun(names);

// The benches that start the agent time the bundle a node runs (dist/), built now.
const fromDist = names.every((n) => IN_PROCESS.has(n)) ? undefined : buildDist((msg) => process.stderr.write(msg + '\n'));
if (fromDist !== undefined) mergeLatest({ vigil_from_dist: fromDist ? 1 : 0 }, run);

let failed = 0;
for (const name of names) {
  const load = benches[name];
  if (!load) {
    console.error(`unknown benchmark ${name}; known: ${Object.keys(benches).join(', ')}`);
    process.exit(2);
  }
  process.stderr.write(`bench ${name}...\n`);
  try {
    const figures = await (await load())();
    const written = mergeLatest(figures, run);
    for (const [k, v] of Object.entries(written)) process.stderr.write(`  ${k} = ${v}\n`);
  } catch (err) {
    failed++;
    process.stderr.write(`  failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  }
}
process.stderr.write(`wrote ${LATEST_PATH} (run ${run.id})\n`);
process.exitCode = failed ? 1 : 0;
