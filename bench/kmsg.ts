/**
 * Kernel-log classification throughput on one core: 1,000,000 lines through the full built-in
 * rule set. The corpus is the benign and fault fixtures with their numbers randomised (so no two
 * lines are the same string), 99% benign and 1% faults, which is already far more faults than a
 * healthy node logs. Run alone: `npx tsx bench/kmsg.ts`.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { KernelLogClassifier } from '../src/monitors/kernel-log/classify.ts';
import { rng } from '../test/helpers/prng.ts';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'test', 'fixtures', 'kmsg');
const LINES = 1_000_000;
const DISTINCT = 250_000;
const FAULT_EVERY = 100;

function fixtureLines(name: string): string[] {
  return readFileSync(path.join(FIXTURES, name), 'utf8')
    .split('\n')
    .filter((l) => l !== '' && !l.startsWith('#'));
}

export function buildKmsgCorpus(n = DISTINCT): string[] {
  const benign = fixtureLines('benign.txt');
  const faults = fixtureLines('faults.tsv').map((l) => l.split('\t')[2]);
  const rand = rng(42);
  const vary = (s: string) => s.replace(/\d+/g, (d) => String(Math.floor(rand() * 10 ** d.length)).padStart(d.length, '0'));
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const pool = i % FAULT_EVERY === 0 ? faults : benign;
    out.push(vary(pool[Math.floor(rand() * pool.length)]));
  }
  return out;
}

export function benchKmsgClassify(): { kmsg_classify_records_per_s: number } {
  const corpus = buildKmsgCorpus();
  const classifier = new KernelLogClassifier();
  let at = Date.now();
  let findings = 0;
  // Warm up the JIT on a slice first.
  for (let i = 0; i < 50_000; i++) findings += classifier.classify({ message: corpus[i] }, at++).length;
  const start = process.hrtime.bigint();
  for (let i = 0; i < LINES; i++) findings += classifier.classify({ message: corpus[i % DISTINCT] }, at++).length;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  if (findings === 0) throw new Error('the corpus raised no findings: the benchmark is not exercising the rules');
  return { kmsg_classify_records_per_s: Math.round(LINES / seconds) };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(benchKmsgClassify());
}
