/**
 * A storm at the onset: a fresh agent, started the way operators start it (`vigil run
 * --standalone`, the bundle in dist/), idle for a moment, then meets BENCH_STORM_ONSET_RECORDS
 * (100,000) kernel-log records written to the real /dev/kmsg at BENCH_STORM_ONSET_RATE (100,000/s)
 * by BENCH_STORM_ONSET_WRITERS (2) writer processes, with one Xid 79 (a GPU fallen off the bus, on
 * a PCI address of its own) at a random position. Each of BENCH_STORM_ONSET_RUNS (20) runs starts
 * a new agent; the Xid is found when the agent logs a finding for that GPU within 15 s of the storm.
 *
 * storm_onset_xid_found_runs of storm_onset_runs: runs in which the Xid was found.
 * storm_onset_records_lost: the median over runs of the agent's own vigil_kmsg_lost_records_total
 * (sequence gaps: records the kernel overwrote before the agent read them); _max the worst run.
 * storm_onset_records_shed: the same for vigil_kmsg_shed_records_total (noise the read thread let
 * go unclassified because classification was behind; never a record a rule could match).
 * storm_onset_achieved_records_per_s: the median rate the writers reached (2 CPUs shared with the
 * agent: the writers are paced in 10 ms slices and may fall short).
 * storm_onset_xid_to_finding_p50/max_ms: from the Xid's write to the finding's log line.
 *
 * The agent's config is every default but a kernel-log lookback of 0 (the ring is full of the
 * previous run's storm; reading it at start-up would be a burst, not an idle agent). Each storm
 * holds /tmp/vigil-ring.lock (as bench:compare's storm does) from before the agent starts, so tests
 * that read the ring are not overrun by it and the agent meets the storm fresh, and sets
 * printk_devkmsg to `on` for its length (user writes are otherwise rate-limited per open file),
 * restoring it after. Needs root. `npm run bench -- storm-onset`.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startAgent, uniquePci } from '../test/helpers/agent-process.ts';
import { ringLock } from './ring-lock.ts';

const RUNS = Number(process.env.BENCH_STORM_ONSET_RUNS ?? 20);
const RECORDS = Number(process.env.BENCH_STORM_ONSET_RECORDS ?? 100_000);
const RATE = Number(process.env.BENCH_STORM_ONSET_RATE ?? 100_000);
const WRITERS = Number(process.env.BENCH_STORM_ONSET_WRITERS ?? 2);
const FOUND_WITHIN_MS = 15_000;

// One writer: `count` noise records at `rate`/s, paced in 10 ms slices; the hidden line goes out
// after `hideAfter` of them (-1: none). Prints {written, seconds, hiddenAt}.
const WRITER = `
const fs = require('node:fs');
const [index, rate, count, hideAfter] = process.argv.slice(1, 5).map(Number);
const hidden = process.argv[5];
const NOISE = [
  'audit: type=1400 audit(1700000000.%n:42): apparmor="STATUS" operation="profile_replace" name="snap.lxd.daemon" pid=%n',
  'IPv6: ADDRCONF(NETDEV_CHANGE): veth%n: link becomes ready',
  'cni0: port %n(veth%n) entered forwarding state',
  'EXT4-fs (nvme0n1p%n): mounted filesystem with ordered data mode. Quota mode: none.',
  'systemd[1]: Started session-%n.scope - Session %n of User root.',
];
const fd = fs.openSync('/dev/kmsg', 'w');
let written = 0, hiddenAt = null;
const t0 = Date.now();
(async () => {
  while (written < count) {
    const due = Math.min(count, Math.floor(((Date.now() - t0) / 1000) * rate)) - written;
    for (let i = 0; i < Math.min(due, Math.ceil(rate / 100)); i++) {
      if (written === hideAfter) { hiddenAt = Date.now(); fs.writeSync(fd, '<4>' + hidden + '\\n'); }
      fs.writeSync(fd, '<6>' + NOISE[written % NOISE.length].replaceAll('%n', String(index * 1000000 + written)) + '\\n');
      written++;
    }
    if (due <= 0) await new Promise((r) => setTimeout(r, 2));
  }
  fs.closeSync(fd);
  process.stdout.write(JSON.stringify({ written, seconds: (Date.now() - t0) / 1000, hiddenAt }));
})();
`;

interface WriterResult {
  written: number;
  seconds: number;
  hiddenAt: number | null;
}

function runWriter(args: (string | number)[]): Promise<WriterResult> {
  const child = spawn(process.execPath, ['-e', WRITER, ...args.map(String)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (err += d));
  return new Promise((resolve, reject) =>
    child.once('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out) as WriterResult) : reject(new Error(`storm writer exited ${code}: ${err}`)),
    ),
  );
}

/** The sum of a Prometheus counter's samples in a /metrics text. */
function metric(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split('\n')) if (line.startsWith(name + ' ') || line.startsWith(name + '{')) sum += Number(line.split(' ').pop());
  return sum;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor((s.length - 1) / 2)] : NaN;
};

export interface StormOnsetRun {
  found: boolean;
  lost: number;
  shed: number;
  rate: number;
  xidToFindingMs: number | null;
  hidePosition: number;
  idleMs: number;
}

/** One run: a fresh agent, a moment idle, the storm, then whether the Xid became a finding. */
export async function stormOnsetRun(dir: string): Promise<StormOnsetRun> {
  const config = path.join(dir, 'vigil.yaml');
  writeFileSync(config, 'kernelLog:\n  lookback: "0"\n');
  const stateDir = mkdtempSync(path.join(dir, 'state-'));
  // The ring lock first: the agent must meet the storm fresh, not after waiting for another bench.
  const lock = await ringLock();
  let agent: Awaited<ReturnType<typeof startAgent>>;
  try {
    agent = await startAgent(['--standalone', '--state-dir', stateDir, '--config', config]);
  } catch (err) {
    await lock.release();
    throw err;
  }
  let locked = true;
  try {
    // Just started and idle: 0.5-2 s after the agent said it started.
    const idleMs = 500 + Math.floor(Math.random() * 1500);
    await new Promise((r) => setTimeout(r, idleMs));
    const before = String(await agent.get('/metrics'));
    const pci = uniquePci();
    const entity = `gpu:${pci}`;
    const xid = `NVRM: Xid (PCI:${pci}): 79, pid=4242, name=stormonset, GPU has fallen off the bus.`;
    const perWriter = Math.floor(RECORDS / WRITERS);
    const hidePosition = Math.floor(Math.random() * perWriter);
    const devkmsg = '/proc/sys/kernel/printk_devkmsg';
    const devkmsgBefore = readFileSync(devkmsg, 'utf8').trim();
    writeFileSync(devkmsg, 'on\n');
    let results: WriterResult[];
    try {
      results = await Promise.all(
        Array.from({ length: WRITERS }, (_, i) => runWriter([i, RATE / WRITERS, perWriter, i === 0 ? hidePosition : -1, xid])),
      );
    } finally {
      writeFileSync(devkmsg, `${devkmsgBefore}\n`);
      locked = false;
      await lock.release();
    }
    const hiddenAt = results[0].hiddenAt!;
    let finding: Record<string, unknown> | undefined;
    try {
      finding = await agent.waitFor(
        (l) => l.event === 'finding' && l.entity === entity,
        Math.max(1, hiddenAt + FOUND_WITHIN_MS - Date.now()),
      );
    } catch {
      finding = undefined;
    }
    const after = String(await agent.get('/metrics'));
    const written = results.reduce((a, r) => a + r.written, 0);
    return {
      found: !!finding,
      lost: metric(after, 'vigil_kmsg_lost_records_total') - metric(before, 'vigil_kmsg_lost_records_total'),
      shed: metric(after, 'vigil_kmsg_shed_records_total') - metric(before, 'vigil_kmsg_shed_records_total'),
      rate: written / Math.max(...results.map((r) => r.seconds)),
      xidToFindingMs: finding ? Date.parse(String(finding.time)) - hiddenAt : null,
      hidePosition: hidePosition * WRITERS,
      idleMs,
    };
  } finally {
    if (locked) await lock.release();
    await agent.stop();
  }
}

export async function benchStormOnset(): Promise<Record<string, number>> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-storm-onset-'));
  const runs: StormOnsetRun[] = [];
  try {
    for (let i = 0; i < RUNS; i++) {
      const r = await stormOnsetRun(dir);
      runs.push(r);
      process.stderr.write(`  run ${i + 1}/${RUNS}: ${JSON.stringify(r)} (load ${os.loadavg()[0].toFixed(2)})\n`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const times = runs.flatMap((r) => (r.xidToFindingMs === null ? [] : [r.xidToFindingMs]));
  return {
    storm_onset_runs: runs.length,
    storm_onset_xid_found_runs: runs.filter((r) => r.found).length,
    storm_onset_records_lost: median(runs.map((r) => r.lost)),
    storm_onset_records_lost_max: Math.max(...runs.map((r) => r.lost)),
    storm_onset_records_shed: median(runs.map((r) => r.shed)),
    storm_onset_achieved_records_per_s: median(runs.map((r) => r.rate)),
    storm_onset_xid_to_finding_p50_ms: median(times),
    storm_onset_xid_to_finding_max_ms: times.length ? Math.max(...times) : NaN,
  };
}
