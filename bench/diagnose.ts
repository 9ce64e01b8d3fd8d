/**
 * Detection latency while a full diagnostic capture runs: the write-to-finding measurement of
 * bench/kmsg-latency.ts (real /dev/kmsg, reader, classifier and engine in this process, as in the
 * agent) taken while captureInChild collects every category, back to back, in its low-priority
 * child. Compare kmsg_to_finding_p99_ms_during_diagnose with kmsg_to_finding_p99_ms (target:
 * within 20%). On a shared machine the load of others moves p99 more than the capture does, so
 * windows with and without a capture alternate (BENCH_DIAGNOSE_ROUNDS rounds) and each figure
 * pools its windows' samples; the windows without one give kmsg_to_finding_p99_ms_without_diagnose,
 * the baseline under the same load. Needs root.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { captureInChild, type CaptureResult } from '../src/diagnostics/bundle.ts';
import { kmsgToFindingLatencies, percentile } from './kmsg-latency.ts';

const WRITES = Number(process.env.BENCH_KMSG_WRITES ?? 300);
const ROUNDS = Number(process.env.BENCH_DIAGNOSE_ROUNDS ?? 3);

type Timed = CaptureResult & { ms: number };

/** Write-to-finding latencies measured while captures run back to back (from the first collector on). */
async function whileCapturing(dir: string, round: number, finished: Timed[]): Promise<{ latencies: number[]; captures: number }> {
  const ac = new AbortController();
  let collecting: () => void = () => {};
  const firstCollector = new Promise<void>((r) => (collecting = r));
  let measuring = true;
  let started = 0;
  const loop = (async () => {
    for (let i = 0; measuring; i++) {
      const t0 = Date.now();
      started++;
      const output = path.join(dir, `bundle-${round}-${i}.tar.gz`);
      const r = await captureInChild({ output, stateDir: dir, onCollector: () => collecting() }, ac.signal);
      finished.push({ ...r, ms: Date.now() - t0 });
      rmSync(output, { force: true });
    }
  })();
  loop.catch(() => {});
  try {
    // Measured from the moment the child is collecting, not while Node starts.
    await Promise.race([firstCollector, loop]);
    const latencies = await kmsgToFindingLatencies(WRITES);
    return { latencies, captures: started };
  } finally {
    measuring = false;
    ac.abort(new Error('measurement done'));
    await loop.catch(() => {});
  }
}

export async function benchDiagnose(): Promise<Record<string, number>> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-bench-diagnose-'));
  const without: number[] = [];
  const during: number[] = [];
  const finished: Timed[] = [];
  let captures = 0;
  try {
    for (let round = 0; round < ROUNDS; round++) {
      without.push(...(await kmsgToFindingLatencies(WRITES)));
      const r = await whileCapturing(dir, round, finished);
      during.push(...r.latencies);
      captures += r.captures;
    }
    // One complete capture for its cost, when none finished inside a window.
    if (!finished.length) {
      const t0 = Date.now();
      const r = await captureInChild({ output: path.join(dir, 'bundle-last.tar.gz'), stateDir: dir });
      finished.push({ ...r, ms: Date.now() - t0 });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  during.sort((a, b) => a - b);
  without.sort((a, b) => a - b);
  const full = finished[0];
  return {
    kmsg_to_finding_p99_ms_during_diagnose: percentile(during, 99),
    kmsg_to_finding_p50_ms_during_diagnose: percentile(during, 50),
    kmsg_to_finding_samples_during_diagnose: during.length,
    kmsg_to_finding_p99_ms_without_diagnose: percentile(without, 99),
    kmsg_to_finding_p50_ms_without_diagnose: percentile(without, 50),
    diagnose_captures_during_measurement: captures,
    diagnose_full_capture_ms: full.ms,
    diagnose_full_capture_bundle_bytes: full.bytes,
    diagnose_full_capture_collected_bytes: full.manifest.totalBytes,
  };
}
