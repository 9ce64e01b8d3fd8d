/**
 * KmsgReader on the real /dev/kmsg (needs root): records written now come back, with their
 * level and facility; the poll worker is used, wakes only when records arrive, stops at once and
 * never holds the process open; a restart from the saved cursor replays nothing.
 *
 * Writes are `<3>vigil-test-<random> ...\n`: the trailing newline matters (without it the kernel
 * holds the record back as a possible continuation until the next one arrives), and the file is
 * reopened for every write because /dev/kmsg rate-limits each open file to 10 writes per 5 s.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { accessSync, closeSync, constants, openSync, writeSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { KmsgReader } from '../../src/sources/kmsg/reader.ts';
import type { KmsgRecord } from '../../src/sources/kmsg/parse.ts';
import { errorMessage } from '../../src/util/errors.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

function usable(): string | false {
  try {
    accessSync('/dev/kmsg', constants.R_OK | constants.W_OK);
    return false;
  } catch (err) {
    return `/dev/kmsg is not readable and writable here (${errorMessage(err)})`;
  }
}

const skip = usable();
const TAG = `vigil-test-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

function writeKmsg(text: string, level = 3): void {
  const fd = openSync('/dev/kmsg', 'w');
  try {
    writeSync(fd, `<${level}>${text}\n`);
  } finally {
    closeSync(fd);
  }
}

/** Collects this test's records (other tests may write to the same log). */
function collector() {
  const mine: KmsgRecord[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  return {
    mine,
    onRecords(recs: KmsgRecord[]) {
      for (const r of recs) if (r.message.includes(TAG)) mine.push(r);
      for (const w of waiters) if (mine.length >= w.n) w.resolve();
    },
    until(n: number, ms = 15_000): Promise<void> {
      if (mine.length >= n) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`only ${mine.length} of ${n} records after ${ms} ms`)), ms);
        waiters.push({
          n,
          resolve: () => {
            clearTimeout(t);
            resolve();
          },
        });
      });
    },
  };
}

test('records written to /dev/kmsg come back through the poll worker', { skip }, async () => {
  const c = collector();
  const errors: Error[] = [];
  const r = new KmsgReader({ lookbackMs: 0, onRecords: (x) => c.onRecords(x), onError: (e) => errors.push(e) });
  r.start();
  try {
    assert.equal(r.waitMode, 'poll', `the poll worker started (errors: ${errors.map((e) => e.message).join('; ')})`);
    const t0 = process.hrtime.bigint();
    writeKmsg(`${TAG} first record`);
    await c.until(1);
    const latencyMs = Number(process.hrtime.bigint() - t0) / 1e6;
    assert.ok(latencyMs < 1000, `delivered after ${latencyMs.toFixed(1)} ms`);
    writeKmsg(`${TAG} second record`, 4);
    writeKmsg(`${TAG} third record NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus.`);
    await c.until(3);
    assert.deepEqual(
      c.mine.map((x) => x.message.slice(TAG.length + 1)),
      ['first record', 'second record', 'third record NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus.'],
    );
    assert.deepEqual(
      c.mine.map((x) => [x.level, x.facility]),
      [
        [3, 1],
        [4, 1],
        [3, 1],
      ],
      'user-space writes have facility 1',
    );
    assert.ok(c.mine[0].seq < c.mine[1].seq && c.mine[1].seq < c.mine[2].seq);
    assert.ok(Math.abs(r.timeOf(c.mine[0]) - Date.now()) < 5_000, 'record time is close to now');

    // Quiet log: the worker sleeps in poll(2); the main thread is woken only for new records.
    const wakeups = r.wakeups;
    const read = r.recordsRead;
    await new Promise((res) => setTimeout(res, 1500));
    assert.ok(r.wakeups - wakeups <= r.recordsRead - read, `woke ${r.wakeups - wakeups} times for ${r.recordsRead - read} records`);
    assert.deepEqual(errors, []);
  } finally {
    const t = Date.now();
    await r.stop();
    assert.ok(Date.now() - t < 500, `stop() took ${Date.now() - t} ms`);
  }
});

test('a restart from the saved cursor delivers only what came after it', { skip }, async (t) => {
  const a = collector();
  const first = new KmsgReader({ lookbackMs: 0, onRecords: (x) => a.onRecords(x) });
  first.start();
  t.after(() => first.stop()); // a second stop() is a no-op
  writeKmsg(`${TAG} before restart`);
  await a.until(1);
  await first.stop();
  const saved = first.cursor();
  writeKmsg(`${TAG} while stopped`);
  const b = collector();
  const second = new KmsgReader({ cursor: saved, onRecords: (x) => b.onRecords(x) });
  second.start();
  try {
    writeKmsg(`${TAG} after restart`);
    await b.until(2);
    await new Promise((res) => setTimeout(res, 100));
    assert.deepEqual(
      b.mine.map((x) => x.message.slice(TAG.length + 1)),
      ['while stopped', 'after restart'],
    );
    assert.equal(second.recordsLost, 0);
  } finally {
    await second.stop();
  }
});

test('a running reader that is never stopped does not keep the process from exiting', { skip }, () => {
  const script = [
    `import { KmsgReader } from ${JSON.stringify(path.join(ROOT, 'src/sources/kmsg/reader.ts'))};`,
    'const r = new KmsgReader({ lookbackMs: 0, onError: (e) => console.error(e.message) });',
    'r.start();',
    'setTimeout(() => console.log(r.waitMode), 300);',
  ].join('\n');
  const t = Date.now();
  const res = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 15_000,
  });
  const ms = Date.now() - t;
  assert.equal(res.status, 0, res.stderr);
  assert.equal(res.stdout.trim(), 'poll');
  // Startup of node + tsx dominates; a worker stuck in poll(2) would hang until the timeout.
  assert.ok(ms < 8_000, `exited after ${ms} ms`);
});
