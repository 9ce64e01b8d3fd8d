/**
 * `npm run bench`: runs every benchmark and merges its figures into bench/results/latest.json, one
 * flat object of named figures with the unit in each name. `npm run bench -- kmsg gpu` runs some.
 */
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildDist } from './dist.ts';

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
};

/** Benches that time code in this process, not the agent: they need no dist/ build. */
const IN_PROCESS = new Set(['kmsg', 'userrules']);

const out = path.join(path.dirname(fileURLToPath(import.meta.url)), 'results', 'latest.json');
const wanted = process.argv.slice(2).filter((a) => !a.startsWith('-'));
const names = wanted.length ? wanted : Object.keys(benches);

let results: Record<string, number | string> = {};
try {
  results = JSON.parse(readFileSync(out, 'utf8')) as Record<string, number | string>;
} catch {
  /* first run */
}

// The benches that start the agent time the bundle a node runs (dist/), built now.
const fromDist = names.every((n) => IN_PROCESS.has(n)) ? undefined : buildDist((msg) => process.stderr.write(msg + '\n'));

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
    for (const [k, v] of Object.entries(figures)) {
      results[k] = Number.isFinite(v) ? Math.round(v * 1000) / 1000 : v;
      process.stderr.write(`  ${k} = ${results[k]}\n`);
    }
  } catch (err) {
    failed++;
    process.stderr.write(`  failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  }
}
results.measured_at = new Date().toISOString();
if (fromDist !== undefined) results.vigil_from_dist = fromDist ? 1 : 0;
mkdirSync(path.dirname(out), { recursive: true });
writeFileSync(out, JSON.stringify(results, null, 2) + '\n');
process.stderr.write(`wrote ${out}\n`);
process.exitCode = failed ? 1 : 0;
