/**
 * The main thread's poll(2) waker (wait.ts PollWaiter, koffi's async call on a libuv pool thread)
 * on a real pipe and a real FIFO: it wakes for data and not without, tells a hang-up apart so the
 * reader backs off instead of spinning (there and on a regular file), and close() wakes a parked
 * poll at once. The real /dev/kmsg is in test/integration/kmsg-reader.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PollWaiter, type PollWake, KmsgReader, type KmsgRecord } from '../../src/sources/index.ts';

function fifo(t: { after(fn: () => void): void }): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-poll-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const p = path.join(dir, 'f');
  execFileSync('mkfifo', [p]);
  return p;
}

function waker(fd: number, safetyMs = 60_000) {
  const wakes: PollWake[] = [];
  const failures: Error[] = [];
  let next: ((w: PollWake) => void) | undefined;
  const w = new PollWaiter(
    fd,
    {
      onReady: (wake) => {
        wakes.push(wake);
        next?.(wake);
      },
      onFailed: (err) => failures.push(err),
    },
    safetyMs,
  );
  const woken = (ms: number) =>
    new Promise<PollWake | 'none'>((resolve) => {
      const timer = setTimeout(() => resolve('none'), ms);
      next = (wake) => {
        clearTimeout(timer);
        next = undefined;
        resolve(wake);
      };
    });
  return { w, wakes, failures, woken };
}

test('the poll waker sleeps while nothing is written, wakes for data, and tells a hang-up apart', async (t) => {
  const p = fifo(t);
  const rd = openSync(p, constants.O_RDONLY | constants.O_NONBLOCK);
  const wr = openSync(p, constants.O_WRONLY | constants.O_NONBLOCK);
  t.after(() => closeSync(rd));
  const { w, wakes, failures, woken } = waker(rd);
  t.after(() => w.close());
  // The first poll returns at once, so the wake path is compiled before a record takes it.
  let wake = woken(5_000);
  w.arm();
  assert.equal(await wake, 'timeout');
  wake = woken(300);
  w.arm();
  assert.equal(await wake, 'none', 'no wake without data');
  wake = woken(5_000);
  writeSync(wr, 'x');
  assert.equal(await wake, 'ready');
  closeSync(wr);
  // The byte is still unread: readable (with the hang-up) comes first.
  wake = woken(5_000);
  w.arm();
  assert.equal(await wake, 'ready');
  assert.deepEqual(wakes, ['timeout', 'ready', 'ready']);
  assert.deepEqual(failures, []);
});

test('a FIFO without writers reports a hang-up rather than data', async (t) => {
  const p = fifo(t);
  const rd = openSync(p, constants.O_RDONLY | constants.O_NONBLOCK);
  t.after(() => closeSync(rd));
  closeSync(openSync(p, constants.O_WRONLY | constants.O_NONBLOCK)); // a writer came and went
  const { w, woken } = waker(rd);
  t.after(() => w.close());
  const wake = woken(5_000);
  w.arm();
  assert.equal(await wake, 'hangup');
});

test('close() wakes a parked poll at once, and a closed waker calls back no more', async (t) => {
  const p = fifo(t);
  const rd = openSync(p, constants.O_RDONLY | constants.O_NONBLOCK);
  const wr = openSync(p, constants.O_WRONLY | constants.O_NONBLOCK);
  t.after(() => {
    closeSync(rd);
    closeSync(wr);
  });
  const { w, wakes, woken } = waker(rd);
  const first = woken(5_000);
  w.arm();
  assert.equal(await first, 'timeout', 'the first poll returns at once');
  w.arm();
  await new Promise((res) => setTimeout(res, 100));
  const t0 = Date.now();
  await w.close();
  assert.ok(Date.now() - t0 < 500, `close() took ${Date.now() - t0} ms (the poll's safety period is 60 s)`);
  writeSync(wr, 'x');
  w.arm();
  await new Promise((res) => setTimeout(res, 200));
  assert.deepEqual(wakes, ['timeout']);
});

test('the poll waker re-checks after its safety period even when nothing is written', async (t) => {
  const p = fifo(t);
  const rd = openSync(p, constants.O_RDONLY | constants.O_NONBLOCK);
  const wr = openSync(p, constants.O_WRONLY | constants.O_NONBLOCK);
  t.after(() => {
    closeSync(rd);
    closeSync(wr);
  });
  const { w, woken } = waker(rd, 200);
  t.after(() => w.close());
  const wake = woken(5_000);
  w.arm();
  assert.equal(await wake, 'timeout');
});

test('a reader on a FIFO whose writer has gone backs off instead of spinning on the hang-up', async (t) => {
  const p = fifo(t);
  const got: KmsgRecord[] = [];
  const errors: Error[] = [];
  const r = new KmsgReader({ path: p, lookbackMs: Infinity, onRecords: (x) => got.push(...x), onError: (e) => errors.push(e) });
  r.start();
  t.after(() => r.stop());
  assert.equal(r.waitMode, 'poll');
  const wr = openSync(p, constants.O_WRONLY | constants.O_NONBLOCK);
  writeSync(wr, '6,1,1000,-;vigil poll fifo record\n');
  closeSync(wr);
  const end = Date.now() + 5_000;
  while (!got.length && Date.now() < end) await new Promise((res) => setTimeout(res, 10));
  assert.deepEqual(
    got.map((g) => g.message),
    ['vigil poll fifo record'],
  );
  const wakeups = r.wakeups;
  await new Promise((res) => setTimeout(res, 1500));
  // Backing off 1 s per hang-up: about 2 wakes; spinning would be thousands.
  assert.ok(r.wakeups - wakeups <= 4, `woke ${r.wakeups - wakeups} times in 1.5 s on a hung-up FIFO`);
  assert.deepEqual(errors, []);
});

test('a reader on a regular file (always readable, end of file at once) backs off instead of spinning', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-poll-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const p = path.join(dir, 'log');
  writeFileSync(p, '6,1,1000,-;vigil poll file record\n');
  const got: KmsgRecord[] = [];
  const errors: Error[] = [];
  const r = new KmsgReader({ path: p, lookbackMs: Infinity, onRecords: (x) => got.push(...x), onError: (e) => errors.push(e) });
  r.start();
  t.after(() => r.stop());
  assert.equal(r.waitMode, 'poll');
  const wakeups = r.wakeups;
  await new Promise((res) => setTimeout(res, 1500));
  assert.ok(r.wakeups - wakeups <= 4, `woke ${r.wakeups - wakeups} times in 1.5 s on a regular file`);
  assert.deepEqual(
    got.map((g) => g.message),
    ['vigil poll file record'],
  );
  assert.deepEqual(errors, []);
});
