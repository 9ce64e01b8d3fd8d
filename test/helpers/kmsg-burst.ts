/**
 * A burst of distinct kernel faults written to the real /dev/kmsg as fast as one process can, and
 * a /healthz poller to watch an agent while it digests them. Shared by the burst test and bench.
 */
import { spawn } from 'node:child_process';
import http from 'node:http';

/**
 * Line i of a burst: a block-device I/O error (Warning) or, with `fatal` on odd lines, an XFS
 * shutdown (Fatal, StorageReady), each on its own device named after the token, so every line is
 * a distinct problem and no other writer's line can collide with one. Tests leave `fatal` off: a
 * test file running beside them would see StorageReady go False.
 */
export function burstLine(token: string, i: number, fatal = false): { message: string; entity: string; reason: string } {
  if (!fatal || i % 2 === 0) {
    const dev = `vb${token}d${i}`;
    return {
      message: `blk_update_request: I/O error, dev ${dev}, sector ${1000 + i}`,
      entity: `blockdev:${dev}`,
      reason: 'BlockDeviceIOError',
    };
  }
  const dev = `vb${token}f${i}`;
  return { message: `XFS (${dev}): Log I/O Error Detected. Shutting down filesystem`, entity: `blockdev:${dev}`, reason: 'XFSShutdown' };
}

// Runs in a separate process so the writer's tight loop cannot delay the /healthz poller.
// One open per record: user writes are rate-limited per open file (printk_devkmsg=ratelimit).
const WRITER = `
const fs = require('node:fs');
const lines = JSON.parse(fs.readFileSync(0, 'utf8'));
const t0 = process.hrtime.bigint();
for (const l of lines) {
  const fd = fs.openSync('/dev/kmsg', 'w');
  try { fs.writeSync(fd, l); } finally { fs.closeSync(fd); }
}
process.stdout.write(String(Number(process.hrtime.bigint() - t0) / 1e6));
`;

/**
 * Writes n distinct fault records; resolves with how long the writes took. Level 4 (warning), as
 * levels below the console log level (4 here) are also printed on the serial console, which
 * takes about a millisecond a line and would pace the burst.
 */
export async function writeBurst(token: string, n: number, fatal = false): Promise<{ writeMs: number }> {
  const lines = Array.from({ length: n }, (_, i) => `<4>${burstLine(token, i, fatal).message}\n`);
  // The lines go through stdin: one argument may hold at most 128 KiB.
  const child = spawn(process.execPath, ['-e', WRITER], { stdio: ['pipe', 'pipe', 'pipe'] });
  child.stdin.end(JSON.stringify(lines));
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (err += d));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`kmsg burst writer exited with ${code}: ${err}`);
  return { writeMs: Number(out) };
}

export interface HealthzSamples {
  /** Milliseconds from request to full response, one per answered request. */
  latencies: number[];
  /** When each answer arrived (Date.now()), in the order of `latencies`. */
  answeredAt: number[];
  /** HTTP status codes seen, with counts. */
  statuses: Record<number, number>;
  /** Requests that got no answer within the timeout, or failed. */
  failures: string[];
}

/** Asks /healthz back to back (one request at a time, `gapMs` apart) until stopped. */
export function pollHealthz(port: number, opts: { gapMs?: number; timeoutMs?: number } = {}): { stop(): Promise<HealthzSamples> } {
  const s: HealthzSamples = { latencies: [], answeredAt: [], statuses: {}, failures: [] };
  let running = true;
  const loop = (async () => {
    while (running) {
      const t0 = process.hrtime.bigint();
      try {
        const status = await getStatus(port, '/healthz', opts.timeoutMs ?? 30_000);
        s.latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
        s.answeredAt.push(Date.now());
        s.statuses[status] = (s.statuses[status] ?? 0) + 1;
      } catch (e) {
        s.failures.push(e instanceof Error ? e.message : String(e));
      }
      await new Promise((r) => setTimeout(r, opts.gapMs ?? 5));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return s;
    },
  };
}

/** One GET on a fresh connection (no keep-alive, so every sample includes accepting it). */
function getStatus(port: number, pathname: string, timeoutMs: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: pathname, agent: false, timeout: timeoutMs }, (res) => {
      res.resume();
      res.once('end', () => resolve(res.statusCode ?? 0));
      res.once('error', reject);
    });
    req.once('timeout', () => req.destroy(new Error(`GET ${pathname}: no answer within ${timeoutMs} ms`)));
    req.once('error', reject);
  });
}

/** The value at percentile p (0-100) of the samples (nearest rank). */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}
