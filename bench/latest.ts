/**
 * The one writer of bench/results/latest.json. Every bench that records figures there goes
 * through `mergeLatest`, so a reader can tell, key by key, when and in which run a figure was taken.
 *
 * The file stays one flat object of named figures (the unit in each name) that other tools read as
 * before, plus three bookkeeping keys:
 *
 * - `measured`: key → `{ at, run }`: the ISO time the figure was written and the id of the bench
 *   invocation that wrote it. Every key one invocation writes shares its run id. Figures from before
 *   this writer carry `run: "legacy"`, `at` the time of the run that last changed the value in git
 *   history and `commit` that commit (a later run may have re-measured the same value, so a legacy
 *   `at` can be older than the truth, never newer).
 * - `runs`: run id → what that invocation was (`started_at`, `benches`, `commit`, `loadavg_1m` at
 *   its start, `cpus`); only runs that still own a key are kept.
 * - `measured_at`: the time the file was last written (any run). It does not date the other keys.
 *
 * The file is re-read right before each write and only this run's keys replace old ones, so
 * benches run one after the other or side by side do not drop each other's figures; the write is
 * a rename, so a reader never sees half a file.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const LATEST_PATH = path.join(path.dirname(fileURLToPath(import.meta.url)), 'results', 'latest.json');

/** One bench invocation: every key it writes carries its id. */
export interface BenchRun {
  id: string;
  startedAt: string;
  benches: string[];
}

export interface Measured {
  at: string;
  run: string;
  /** Legacy entries only: the commit whose latest.json last changed the value. */
  commit?: string;
}

interface RunInfo {
  started_at: string;
  benches: string[];
  commit?: string;
  loadavg_1m: number;
  cpus: number;
}

type Figure = number | string;
type Latest = Record<string, unknown> & {
  measured?: Record<string, Measured>;
  runs?: Record<string, RunInfo>;
};

const BOOKKEEPING = new Set(['measured', 'runs', 'measured_at']);

function headCommit(): string | undefined {
  try {
    const root = path.dirname(path.dirname(LATEST_PATH));
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
  } catch {
    return undefined;
  }
}

/** Starts a run: call once per bench invocation, before measuring. */
export function newRun(benches: string[]): BenchRun {
  const startedAt = new Date().toISOString();
  const id = `${startedAt.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z')}-${randomBytes(3).toString('hex')}`;
  const info: RunInfo = {
    started_at: startedAt,
    benches,
    commit: headCommit(),
    loadavg_1m: Math.round(os.loadavg()[0] * 100) / 100,
    cpus: os.availableParallelism(),
  };
  pendingRuns.set(id, info);
  return { id, startedAt, benches };
}

const pendingRuns = new Map<string, RunInfo>();

function readLatest(file: string): Latest {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as Latest;
  } catch {
    return {};
  }
}

/** Rounds numbers to 3 decimals, as latest.json always held them. */
function rounded(v: Figure): Figure {
  return typeof v === 'number' && Number.isFinite(v) ? Math.round(v * 1000) / 1000 : v;
}

/**
 * Merges `figures` into latest.json under `run`, stamping each key with now. Returns the values as
 * written. Call it after each bench of a run (not once at the end), so a failure later keeps what
 * was measured.
 */
export function mergeLatest(figures: Record<string, Figure>, run: BenchRun, file = LATEST_PATH): Record<string, Figure> {
  const at = new Date().toISOString();
  const latest = readLatest(file);
  const measured: Record<string, Measured> = { ...(latest.measured ?? {}) };
  const oldAt = typeof latest.measured_at === 'string' ? latest.measured_at : undefined;
  // Keys from before this writer, not yet marked: honest about not knowing their run.
  for (const k of Object.keys(latest)) {
    if (!BOOKKEEPING.has(k) && !measured[k]) measured[k] = { at: oldAt ?? 'unknown', run: 'legacy' };
  }
  const written: Record<string, Figure> = {};
  for (const [k, v] of Object.entries(figures)) {
    if (BOOKKEEPING.has(k)) throw new Error(`bench key ${k} is reserved by bench/latest.ts`);
    written[k] = rounded(v);
    latest[k] = written[k];
    measured[k] = { at, run: run.id };
  }
  const runs: Record<string, RunInfo> = { ...(latest.runs ?? {}) };
  const info = pendingRuns.get(run.id);
  if (info) runs[run.id] = info;
  const owning = new Set(Object.values(measured).map((m) => m.run));
  for (const id of Object.keys(runs)) if (!owning.has(id)) delete runs[id];

  // Figures first (in their old order, new ones appended), bookkeeping last.
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(latest)) if (!BOOKKEEPING.has(k)) out[k] = v;
  out.measured_at = at;
  out.measured = Object.fromEntries(
    Object.keys(out)
      .filter((k) => k !== 'measured_at')
      .map((k) => [k, measured[k]]),
  );
  out.runs = runs;
  mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(out, null, 2) + '\n');
  renameSync(tmp, file);
  return written;
}
