/**
 * The kernel-log reader's read-ahead is bounded in bytes as well as records, so a storm of long
 * lines cannot grow the agent's memory; what the ring overwrites while the reader waits at the
 * bound is counted as lost, never silently skipped. A fake /dev/kmsg (one record per read, EAGAIN
 * at the end, EPIPE after an overrun); the real device is in test/integration.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { KmsgReader } from '../../src/sources/index.ts';
import { FakeKmsg } from '../helpers/fake-kmsg.ts';

/** The fake device with n records of `chars` characters each at a time. */
class LongLineKmsg extends FakeKmsg {
  addLines(n: number, chars: number): void {
    for (let i = 0; i < n; i++) this.add(`storm line ${this.next} ${'x'.repeat(chars)}`);
  }
}

test('a storm of 8 KiB lines is read ahead at most about 4 MiB at a time, and every line is still delivered', async () => {
  const dev = new LongLineKmsg();
  dev.addLines(2000, 8000);
  let delivered = 0;
  let peak = 0;
  const r = new KmsgReader({
    io: dev,
    bootId: 'boot',
    uptimeMs: () => 3_600_000,
    now: () => 1_700_000_000_000,
    lookbackMs: Infinity,
    wait: 'interval',
    intervalMs: 5,
    onRecords: (recs) => {
      delivered += recs.length;
      peak = Math.max(peak, r.readAheadBytes);
    },
  });
  r.start();
  // The first drain stopped at the byte bound, far below the 8192-record bound.
  assert.ok(r.recordsRead < 300, `read ahead ${r.recordsRead} records of 16 KB in memory`);
  while (delivered < 2000) await new Promise((res) => setTimeout(res, 5));
  await r.stop();
  assert.ok(peak <= 4.1 * 2 ** 20, `peak read-ahead ${peak} bytes`);
  assert.equal(r.recordsLost, 0);
  assert.equal(r.readAheadBytes, 0);
});

test('records the kernel overwrites while the reader waits at its bound are counted as lost', async () => {
  const dev = new LongLineKmsg();
  dev.addLines(1000, 8000);
  const lost: number[] = [];
  let delivered = 0;
  const r = new KmsgReader({
    io: dev,
    bootId: 'boot',
    uptimeMs: () => 3_600_000,
    now: () => 1_700_000_000_000,
    lookbackMs: Infinity,
    wait: 'interval',
    intervalMs: 5,
    onRecords: (recs) => (delivered += recs.length),
    onLost: (n) => lost.push(n),
  });
  r.start();
  const readAhead = r.recordsRead;
  assert.ok(readAhead < 1000, 'paused at the bound');
  // The ring moves on past what the reader had not read yet.
  dev.overwrite(600);
  dev.addLines(100, 10);
  while (delivered + lost.reduce((a, n) => a + n, 0) < 1100) await new Promise((res) => setTimeout(res, 5));
  await r.stop();
  assert.equal(
    lost.reduce((a, n) => a + n, 0),
    600 - readAhead,
    'every overwritten record not yet read is counted',
  );
  assert.equal(delivered, 1100 - (600 - readAhead));
});
