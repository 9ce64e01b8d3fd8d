/**
 * Detection latency while a full diagnostic capture runs: the write-to-finding measurement of
 * bench/kmsg-latency.ts (real /dev/kmsg, reader, classifier, engine in this process, as in the
 * agent) taken while captureInChild collects every category back to back in its low-priority
 * child. Compare kmsg_to_finding_p99_ms_during_diagnose with kmsg_to_finding_p99_ms (target:
 * within 20%); the same measurement just before the captures is kmsg_to_finding_p99_ms_before_diagnose,
 * taken under the same machine load. Needs root.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { captureInChild, type CaptureResult } from '../src/diagnostics/bundle.ts';
import { kmsgToFindingLatencies, percentile } from './kmsg-latency.ts';

const WRITES = Number(process.env.BENCH_KMSG_WRITES ?? 300);

export async function benchDiagnose(): Promise<Record<string, number>> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-bench-diagnose-'));
  const ac = new AbortController();
  const results: (CaptureResult & { ms: number })[] = [];
  let collecting: () => void = () => {};
  const firstCollector = new Promise<void>((r) => (collecting = r));
  let measuring = true;
  try {
    const before = await kmsgToFindingLatencies(WRITES);
    // Captures back to back, so one is running for the whole measurement.
    const loop = (async () => {
      for (let i = 0; measuring; i++) {
        const t0 = Date.now();
        const r = await captureInChild(
          { output: path.join(dir, `bundle-${i}.tar.gz`), stateDir: dir, onCollector: () => collecting() },
          ac.signal,
        );
        results.push({ ...r, ms: Date.now() - t0 });
      }
    })();
    loop.catch(() => {});
    // Measure from the moment the child is collecting (not while Node starts).
    await Promise.race([firstCollector, loop]);
    const during = await kmsgToFindingLatencies(WRITES);
    const capturesDuring = results.length + 1;
    measuring = false;
    // The capture in flight is not needed any more.
    ac.abort(new Error('measurement done'));
    await loop.catch(() => {});
    // One complete capture, for its cost, when none finished during the measurement.
    const done = results[0] ?? (await timed(() => captureInChild({ output: path.join(dir, 'bundle-last.tar.gz'), stateDir: dir })));
    return {
      kmsg_to_finding_p99_ms_during_diagnose: percentile(during, 99),
      kmsg_to_finding_p50_ms_during_diagnose: percentile(during, 50),
      kmsg_to_finding_p99_ms_before_diagnose: percentile(before, 99),
      kmsg_to_finding_p50_ms_before_diagnose: percentile(before, 50),
      diagnose_captures_during_measurement: capturesDuring,
      diagnose_full_capture_ms: done.ms,
      diagnose_full_capture_bundle_bytes: done.bytes,
      diagnose_full_capture_collected_bytes: done.manifest.totalBytes,
    };
  } finally {
    measuring = false;
    ac.abort();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function timed(f: () => Promise<CaptureResult>): Promise<CaptureResult & { ms: number }> {
  const t0 = Date.now();
  const r = await f();
  return { ...r, ms: Date.now() - t0 };
}
