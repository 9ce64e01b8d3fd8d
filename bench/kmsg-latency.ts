/**
 * Time from a write to the real /dev/kmsg to the engine's finding, through the real reader (mode
 * 'auto': one fault every 10 ms is no load, so the main thread reads, woken by poll(2)),
 * classifier and engine. Needs root. Each record names a fresh GPU so none is deduped.
 */
import { openSync, writeSync, closeSync } from 'node:fs';
import { Registry } from 'prom-client';
import { KernelLogMonitor } from '../src/monitors/kernel-log/monitor.ts';
import { Engine } from '../src/engine/engine.ts';

const WRITES = Number(process.env.BENCH_KMSG_WRITES ?? 300);

export async function benchKmsgLatency(): Promise<Record<string, number>> {
  const latencies = await kmsgToFindingLatencies(WRITES);
  return {
    kmsg_to_finding_p50_ms: percentile(latencies, 50),
    kmsg_to_finding_p99_ms: percentile(latencies, 99),
    kmsg_to_finding_samples: latencies.length,
  };
}

/** Write-to-finding latencies in ms, sorted; bench/diagnose.ts measures the same while a capture runs. */
export async function kmsgToFindingLatencies(writes: number): Promise<number[]> {
  const engine = new Engine({ bootId: 'bench', conditions: new Map() });
  const sent = new Map<string, bigint>();
  const latencies: number[] = [];
  let done: () => void = () => {};
  const finished = new Promise<void>((r) => (done = r));
  engine.on((e) => {
    if (e.kind !== 'finding') return;
    const t0 = sent.get(e.finding.entity);
    if (t0 === undefined) return;
    sent.delete(e.finding.entity);
    latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
    if (latencies.length === writes) done();
  });
  const monitor = new KernelLogMonitor({ reader: { lookbackMs: 0 }, registry: new Registry() });
  monitor.start({ finding: (f) => engine.finding(f), healthy: (h) => engine.healthy(h), source: (r) => engine.source(r) });
  // A running agent, not one starting (the initial ring drain is behind it).
  await new Promise((r) => setTimeout(r, 500));
  try {
    for (let i = 0; i < writes; i++) {
      const pci = `${(0x2000 + i).toString(16)}:${((i % 200) + 16).toString(16).padStart(2, '0')}:00`;
      sent.set(`gpu:${pci}`, process.hrtime.bigint());
      // One open per write: user writes are rate-limited per open file.
      const fd = openSync('/dev/kmsg', 'w');
      writeSync(fd, `<4>NVRM: Xid (PCI:${pci}): 31, pid=${i}, name=bench, latency probe\n`);
      closeSync(fd);
      await new Promise((r) => setTimeout(r, 10));
    }
    await Promise.race([finished, new Promise((r) => setTimeout(r, 5000))]);
  } finally {
    await monitor.stop();
  }
  if (latencies.length < writes) throw new Error(`only ${latencies.length} of ${writes} writes produced a finding`);
  return latencies.sort((a, b) => a - b);
}

export function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}
