/**
 * KmsgReader on the real /dev/kmsg (needs root): records written now come back, with their
 * level and facility; the read thread is used, wakes the main thread only when records arrive, stops at once and
 * never holds the process open; a restart from the saved cursor replays nothing. In mode 'auto'
 * an idle reader has no thread (poll(2) on a pool thread wakes the main thread), moves to the
 * thread under a flood without losing or repeating a record, and neither hangs stop() nor exit.
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
import { KmsgReader, type KmsgRecord } from '../../src/sources/index.ts';
import { errorMessage } from '../../src/util/index.ts';

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

test('records written to /dev/kmsg come back through the read thread', { skip }, async () => {
  const c = collector();
  const errors: Error[] = [];
  const r = new KmsgReader({ lookbackMs: 0, wait: 'thread', onRecords: (x) => c.onRecords(x), onError: (e) => errors.push(e) });
  r.start();
  try {
    assert.equal(r.waitMode, 'thread', `the read thread started (errors: ${errors.map((e) => e.message).join('; ')})`);
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

    // Quiet log: the read thread sleeps in poll(2); the main thread is woken only for new records.
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

test(
  'lookback 0 skips a record logged the moment before start, though the printk clock may stamp it later than start',
  { skip },
  async () => {
    const c = collector();
    writeKmsg(`${TAG} just before start`);
    const r = new KmsgReader({ lookbackMs: 0, onRecords: (x) => c.onRecords(x) });
    r.start();
    try {
      writeKmsg(`${TAG} after start`);
      await c.until(1);
      await new Promise((res) => setTimeout(res, 100));
      assert.deepEqual(
        c.mine.map((x) => x.message.slice(TAG.length + 1)),
        ['after start'],
      );
    } finally {
      await r.stop();
    }
  },
);

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

test('a running read thread that is never stopped does not keep the process from exiting', { skip }, () => {
  const script = [
    `import { KmsgReader } from ${JSON.stringify(path.join(ROOT, 'src/sources/kmsg/reader.ts'))};`,
    "const r = new KmsgReader({ lookbackMs: 0, wait: 'thread', onError: (e) => console.error(e.message) });",
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
  assert.equal(res.stdout.trim(), 'thread');
  // Startup of node + tsx dominates; a thread stuck in poll(2) would hang until the timeout.
  assert.ok(ms < 8_000, `exited after ${ms} ms`);
});

/** Holds the main thread for `ms` while the read thread goes on reading (its queue fills up). */
function blockMainThread(ms: number): void {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    /* busy: no message from the read thread is taken meanwhile */
  }
}

test('when the main thread falls behind, noise is shed and counted, and every line a rule can match arrives', { skip }, async () => {
  const c = collector();
  const limits = { highRecords: 8, highChars: 1 << 20, hardRecords: 100_000, hardChars: 64 << 20 };
  const r = new KmsgReader({ lookbackMs: 0, wait: 'thread', keep: [/NVRM: Xid/], limits, onRecords: (x) => c.onRecords(x) });
  r.start();
  try {
    assert.equal(r.waitMode, 'thread');
    const xids = [100, 200, 299].map(
      (i) => `${TAG} NVRM: Xid (PCI:0000:${(i % 256).toString(16).padStart(2, '0')}:00): 79, GPU has fallen off the bus.`,
    );
    // Written in one synchronous loop: the main thread takes nothing the thread posts until the end.
    for (let i = 0; i < 300; i++) {
      const x = [100, 200, 299].indexOf(i);
      writeKmsg(x >= 0 ? xids[x] : `${TAG} noise ${i}`, x >= 0 ? 4 : 6);
    }
    await until(() => c.mine.filter((m) => m.message.includes('NVRM: Xid')).length === 3, 15_000);
    await new Promise((res) => setTimeout(res, 300));
    const noise = c.mine.filter((m) => m.message.includes(' noise '));
    assert.deepEqual(
      c.mine.filter((m) => m.message.includes('NVRM: Xid')).map((m) => m.message),
      xids,
      'every line a rule can match is delivered, in order',
    );
    assert.ok(noise.length < 100, `most noise was shed (${noise.length} of 297 delivered)`);
    assert.ok(r.recordsShed >= 297 - noise.length, `shed ${r.recordsShed}, at least the ${297 - noise.length} noise records not delivered`);
    assert.equal(r.recordsLost, 0, 'nothing was lost in the kernel');
  } finally {
    await r.stop();
  }
});

test('at its hard bound the read thread stops reading and resumes once the main thread catches up', { skip }, async () => {
  const c = collector();
  const limits = { highRecords: 8, highChars: 1 << 20, hardRecords: 16, hardChars: 64 << 20 };
  // No keep patterns: nothing may be shed, so the bound can only hold by not reading.
  const batches: number[] = [];
  const r = new KmsgReader({
    lookbackMs: 0,
    wait: 'thread',
    limits,
    onRecords: (x) => {
      const mine = x.filter((m) => m.message.includes(TAG)).length;
      if (mine) batches.push(mine);
      c.onRecords(x);
    },
  });
  r.start();
  try {
    for (let i = 0; i < 100; i++) writeKmsg(`${TAG} bounded ${i}`, 6);
    blockMainThread(200);
    await c.until(100);
    // Unbounded, the thread would have posted all 100 before the main thread took any: the first
    // delivery would be a full batch of 64.
    assert.ok(batches[0] <= 16, `the first delivery held ${batches[0]} records (bound 16)`);
    assert.deepEqual(
      c.mine.map((m) => m.message.slice(TAG.length + 1)),
      Array.from({ length: 100 }, (_, i) => `bounded ${i}`),
    );
    assert.equal(r.recordsShed, 0);
    assert.equal(r.recordsLost, 0);
  } finally {
    await r.stop();
  }
});

async function until(ok: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`not reached within ${ms} ms`);
    await new Promise((res) => setTimeout(res, 20));
  }
}

test(
  'in auto mode an idle reader has no read thread, is not woken while the log is quiet, and delivers a new record',
  { skip },
  async () => {
    const c = collector();
    const errors: Error[] = [];
    const r = new KmsgReader({ lookbackMs: 0, onRecords: (x) => c.onRecords(x), onError: (e) => errors.push(e) });
    r.start();
    try {
      assert.equal(r.waitMode, 'poll', `reading on the main thread, woken by poll(2) (errors: ${errors.map((e) => e.message).join('; ')})`);
      // The first poll returns at once (its wake compiles the path); from then on only records wake it.
      for (let i = 0; i < 200 && r.wakeups < 1; i++) await new Promise((res) => setTimeout(res, 10));
      assert.ok(r.wakeups >= 1, 'the first poll returned at once');
      // Other tests may write to the shared log meanwhile: only a wake-up without a record is idle work.
      const wakeups = r.wakeups;
      const read = r.recordsRead;
      await new Promise((res) => setTimeout(res, 2000));
      assert.ok(r.wakeups - wakeups <= r.recordsRead - read, `woke ${r.wakeups - wakeups} times for ${r.recordsRead - read} records`);
      writeKmsg(`${TAG} idle poll record`, 4);
      await c.until(1);
      assert.deepEqual(
        c.mine.map((m) => m.message.slice(TAG.length + 1)),
        ['idle poll record'],
      );
      assert.equal(r.waitMode, 'poll', 'one record is no load: still no thread');
      assert.deepEqual(errors, []);
    } finally {
      await r.stop();
    }
  },
);

test('in auto mode a flood moves reading to the read thread, and every record arrives once, in order', { skip }, async () => {
  const c = collector();
  const errors: Error[] = [];
  const FIRST = 600;
  const SECOND = 300;
  const line = (i: number) =>
    i % 50 === 7
      ? `${TAG} flood ${i} NVRM: Xid (PCI:0000:${(i % 256).toString(16).padStart(2, '0')}:00): 79, GPU has fallen off the bus.`
      : `${TAG} flood ${i}`;
  /** How many of the first flood had been delivered when the thread had taken over. */
  let takenOverAt: number | undefined;
  const r = new KmsgReader({
    lookbackMs: 0,
    keep: [/NVRM: Xid/],
    onError: (e) => errors.push(e),
    onRecords: (x) => {
      c.onRecords(x);
      if (takenOverAt !== undefined || !c.mine.length) return;
      // Slow classification: the first flood waits in the main thread's backlog while the thread boots.
      if (r.waitMode !== 'thread') return blockMainThread(50);
      // The thread reads from here on; its records must follow the backlog's, none twice.
      takenOverAt = c.mine.length;
      for (let i = FIRST; i < FIRST + SECOND; i++) writeKmsg(line(i), 6);
    },
  });
  r.start();
  try {
    assert.equal(r.waitMode, 'poll');
    // One synchronous loop: the reader wakes to all of it at once, far above its load mark.
    for (let i = 0; i < FIRST; i++) writeKmsg(line(i), 6);
    await until(() => takenOverAt !== undefined, 30_000);
    assert.ok(takenOverAt! < FIRST, `the thread took over with ${FIRST - takenOverAt!} records of the first flood in the main backlog`);
    await c.until(FIRST + SECOND, 30_000);
    await new Promise((res) => setTimeout(res, 200));
    assert.equal(r.waitMode, 'thread');
    const got = c.mine.map((m) => m.message.slice(TAG.length + 1));
    const want = Array.from({ length: FIRST + SECOND }, (_, i) => line(i).slice(TAG.length + 1));
    assert.deepEqual(
      got.filter((m) => m.includes('NVRM: Xid')),
      want.filter((m) => m.includes('NVRM: Xid')),
      'every line a rule can match, in order, none twice',
    );
    assert.deepEqual(got, want, 'every record, in order, none twice');
    assert.equal(r.recordsLost, 0, 'nothing was lost in the kernel (another test flooding the ring can break this: rerun)');
    assert.deepEqual(errors, []);
  } finally {
    await r.stop();
  }
});

/** Runs a script in a child process; its exit status, output and how long it took. */
function runChild(lines: string[]): { status: number | null; stdout: string; stderr: string; ms: number } {
  const script = [`import { KmsgReader } from ${JSON.stringify(path.join(ROOT, 'src/sources/kmsg/reader.ts'))};`, ...lines].join('\n');
  const t = Date.now();
  const res = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 20_000,
  });
  return { status: res.status, stdout: res.stdout, stderr: res.stderr, ms: Date.now() - t };
}

// A safety period of 60 s: had stop() or exit not woken the parked poll, the child would outlive its 20 s timeout.
test('in auto mode stop() wakes the parked poll at once and the process then exits', { skip }, () => {
  const res = runChild([
    'const r = new KmsgReader({ lookbackMs: 0, safetyMs: 60_000, onError: (e) => console.error(e.message) });',
    'r.start();',
    'setTimeout(async () => { const mode = r.waitMode; const t = Date.now(); await r.stop(); console.log(mode, Date.now() - t); }, 300);',
  ]);
  assert.equal(res.status, 0, res.stderr);
  const [mode, stopMs] = res.stdout.trim().split(' ');
  assert.equal(mode, 'poll');
  assert.ok(Number(stopMs) < 500, `stop() took ${stopMs} ms`);
  assert.ok(res.ms < 10_000, `exited after ${res.ms} ms`);
});

test('in auto mode process.exit() does not wait for the parked poll', { skip }, () => {
  const res = runChild([
    'const r = new KmsgReader({ lookbackMs: 0, safetyMs: 60_000, onError: (e) => console.error(e.message) });',
    'r.start();',
    'setTimeout(() => { console.log(r.waitMode); process.exit(0); }, 300);',
  ]);
  assert.equal(res.status, 0, res.stderr);
  assert.equal(res.stdout.trim(), 'poll');
  assert.ok(res.ms < 10_000, `exited after ${res.ms} ms`);
});

test('in auto mode a reader that is never stopped lets the process exit after one safety period', { skip }, () => {
  const res = runChild([
    'const r = new KmsgReader({ lookbackMs: 0, safetyMs: 1000, onError: (e) => console.error(e.message) });',
    'r.start();',
    'setTimeout(() => console.log(r.waitMode), 300);',
  ]);
  assert.equal(res.status, 0, `${res.stderr} (a null status: still running after ${res.ms} ms)`);
  assert.equal(res.stdout.trim(), 'poll');
  assert.ok(res.ms < 12_000, `exited after ${res.ms} ms`);
});
