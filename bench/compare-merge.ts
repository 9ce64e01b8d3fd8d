/**
 * A bench:compare run of some phases only (BENCH_COMPARE_PHASES, e.g. stream,burst: minutes, not
 * the hour of a full run) updates the keys it measured in compare.json and keeps the others: each
 * replaced key's aggregate, its figures in per_run (run i with run i) and the notes it wrote, and
 * in `key_measured` when, over how many runs and on which API server backend it was measured (a
 * key absent there was measured with the file's `measured_at`).
 */
import { existsSync, readFileSync } from 'node:fs';

interface RunEntry {
  figures: Record<string, unknown>;
  notes: Record<string, unknown>;
}

interface CompareFile {
  measured_at: string;
  runs: number;
  backend?: string;
  per_run: RunEntry[];
  key_measured?: Record<string, { at: string; runs: number; backend: string }>;
  [key: string]: unknown;
}

export function mergeCompare(file: string, fresh: object, keys: string[]): object {
  const f = fresh as CompareFile;
  if (!existsSync(file)) return fresh;
  const old = JSON.parse(readFileSync(file, 'utf8')) as CompareFile;
  const out: CompareFile = { ...old };
  for (const k of keys) out[k] = f[k];
  const stamp = { at: f.measured_at, runs: f.runs, backend: f.backend ?? 'kine' };
  out.key_measured = { ...old.key_measured, ...Object.fromEntries(keys.map((k) => [k, stamp])) };
  const n = Math.max(old.per_run?.length ?? 0, f.per_run.length);
  out.per_run = Array.from({ length: n }, (_, i) => ({
    figures: { ...old.per_run?.[i]?.figures, ...f.per_run[i]?.figures },
    notes: { ...old.per_run?.[i]?.notes, ...f.per_run[i]?.notes },
  }));
  return out;
}
