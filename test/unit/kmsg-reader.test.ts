/**
 * KmsgReader logic against a fake /dev/kmsg: resume from a cursor, lookback, ring overruns
 * (EPIPE), bounded batches, parse errors and metrics. The real device is in test/integration.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { KmsgReader, type KmsgIo, type KmsgReaderOptions, type KmsgRecord } from '../../src/sources/index.ts';
import { FakeKmsg } from '../helpers/fake-kmsg.ts';
import { useMockClock } from '../helpers/mock-clock.ts';

/** A ring of records that behaves like /dev/kmsg for one reader: EAGAIN at the end, EPIPE on overrun. */

const BOOT = 'b00t-1';
const UPTIME_MS = 3_600_000; // the node has been up an hour
const NOW = 1_700_000_000_000;

function reader(dev: FakeKmsg, extra: Partial<KmsgReaderOptions> = {}) {
  const got: KmsgRecord[] = [];
  const batches: number[] = [];
  const lost: number[] = [];
  const errors: Error[] = [];
  const r = new KmsgReader({
    io: dev,
    bootId: BOOT,
    uptimeMs: () => UPTIME_MS,
    now: () => NOW,
    wait: 'interval',
    intervalMs: 10,
    onRecords: (recs) => {
      got.push(...recs);
      batches.push(recs.length);
    },
    onLost: (n) => lost.push(n),
    onError: (e) => errors.push(e),
    ...extra,
  });
  return { r, got, batches, lost, errors };
}

const minutesAgoUs = (m: number) => (UPTIME_MS - m * 60_000) * 1000;
// Mocked setTimeout/setInterval (the reader's interval waiter and its back-off): a test moves time
// itself instead of sleeping, so a loaded machine cannot make a tick too short.
const { advance } = useMockClock();
/** Moves the mocked timers `ms` ahead, then lets the drains they started (setImmediate chains) finish. */
async function tick(ms = 30): Promise<void> {
  await advance(ms);
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
}

test('no cursor: only records within the lookback (default 5 min) are delivered', async () => {
  const dev = new FakeKmsg();
  dev.add('boot message', 1_000_000);
  dev.add('ten minutes ago', minutesAgoUs(10));
  dev.add('two minutes ago', minutesAgoUs(2));
  const { r, got } = reader(dev);
  r.start();
  await r.stop();
  assert.deepEqual(
    got.map((x) => x.message),
    ['two minutes ago'],
  );
  assert.deepEqual(r.cursor(), { bootId: BOOT, seq: 2 }, 'skipped records still move the cursor');
  assert.equal(r.recordsRead, 3);
  assert.equal(r.timeOf(got[0]), NOW - 120_000);
});

test('lookback 0: only records that arrive after start', async () => {
  const dev = new FakeKmsg();
  dev.add('old', minutesAgoUs(1));
  const { r, got } = reader(dev, { lookbackMs: 0 });
  r.start();
  dev.add('new', UPTIME_MS * 1000 + 5);
  await tick();
  await r.stop();
  assert.deepEqual(
    got.map((x) => x.message),
    ['new'],
  );
  assert.equal(r.timeOf(got[0]), NOW, 'a record logged while running is stamped with the time it was read');
});

test('lookback 0: a record already in the ring is skipped even when the printk clock runs ahead of the monotonic clock', async () => {
  const dev = new FakeKmsg();
  // Logged a moment before start, stamped 2 ms "later" than start by a printk clock that leads.
  dev.add('logged just before start', UPTIME_MS * 1000 + 2_000);
  const { r, got, lost } = reader(dev, { lookbackMs: 0 });
  r.start();
  dev.add('new', UPTIME_MS * 1000 + 2_500);
  await tick();
  await r.stop();
  assert.deepEqual(
    got.map((x) => x.message),
    ['new'],
  );
  assert.deepEqual(lost, [], 'skipping is not losing');
});

test('a cursor from this boot: nothing at or below it is replayed; the gap after it is lost', async () => {
  const dev = new FakeKmsg();
  for (let i = 0; i < 10; i++) dev.add(`m${i}`, 1_000_000 + i);
  dev.overwrite(6); // seq 0..5 gone while the agent was down
  const { r, got, lost } = reader(dev, { cursor: { bootId: BOOT, seq: 3 } });
  r.start();
  await r.stop();
  assert.deepEqual(
    got.map((x) => x.seq),
    [6, 7, 8, 9],
    'old records of this boot are read regardless of lookback',
  );
  assert.deepEqual(lost, [2], 'seq 4 and 5 were never read');
  assert.equal(r.recordsLost, 2);

  const again = reader(dev, { cursor: r.cursor() });
  again.r.start();
  await again.r.stop();
  assert.deepEqual(again.got, [], 'a restart with the saved cursor replays nothing');
});

test('a cursor from an earlier boot: the whole ring is new (or newBootLookbackMs)', async () => {
  const dev = new FakeKmsg();
  dev.add('RmInitAdapter failed at boot', 30_000_000);
  dev.add('recent', minutesAgoUs(1));
  const all = reader(dev, { cursor: { bootId: 'old-boot', seq: 999 } });
  all.r.start();
  await all.r.stop();
  assert.deepEqual(
    all.got.map((x) => x.seq),
    [0, 1],
  );
  const limited = reader(dev, { cursor: { bootId: 'old-boot', seq: 999 }, newBootLookbackMs: 5 * 60_000 });
  limited.r.start();
  await limited.r.stop();
  assert.deepEqual(
    limited.got.map((x) => x.seq),
    [1],
  );
});

test('EPIPE while running: the overwritten records are counted and reading goes on', async () => {
  const dev = new FakeKmsg();
  const reg = new Registry();
  const { r, got, lost } = reader(dev, { registry: reg, lookbackMs: Infinity });
  r.start();
  for (let i = 0; i < 5; i++) dev.add(`a${i}`, 1_000 + i);
  await tick();
  for (let i = 0; i < 10; i++) dev.add(`b${i}`, 2_000 + i);
  dev.overwrite(12); // the reader fell behind: b0..b6 gone
  await tick();
  await r.stop();
  assert.deepEqual(
    got.map((x) => x.message),
    ['a0', 'a1', 'a2', 'a3', 'a4', 'b7', 'b8', 'b9'],
  );
  assert.deepEqual(lost, [7]);
  const text = await reg.metrics();
  assert.match(text, /vigil_kmsg_lost_records_total 7/);
  assert.match(text, /vigil_kmsg_records_total 8/);
});

test('draining is bounded: a full ring arrives in several batches', async () => {
  const dev = new FakeKmsg();
  for (let i = 0; i < 1300; i++) dev.add(`r${i}`, 1_000 + i);
  const { r, got, batches } = reader(dev, { batchSize: 500, lookbackMs: Infinity });
  r.start();
  assert.deepEqual(batches, [500], 'only the first batch is delivered synchronously');
  await tick();
  await r.stop();
  assert.deepEqual(batches, [500, 500, 300]);
  assert.equal(got.length, 1300);
});

test('unparseable records are counted, not delivered; two readers can share a registry', async () => {
  const dev = new FakeKmsg();
  dev.addRaw('garbage without a header\n');
  dev.add('fine', 1_000);
  const reg = new Registry();
  const { r, got } = reader(dev, { registry: reg, lookbackMs: Infinity });
  r.start();
  await r.stop();
  assert.equal(r.parseErrors, 1);
  assert.deepEqual(
    got.map((x) => x.message),
    ['fine'],
  );
  assert.doesNotThrow(() => reader(new FakeKmsg(), { registry: reg }));
  assert.match(await reg.metrics(), /vigil_kmsg_parse_errors_total 1/);
});

test('errors from the device and from the consumer are reported, not thrown', async () => {
  const dev = new FakeKmsg();
  dev.add('x', 1);
  let reads = 0;
  const boom: KmsgIo = {
    open: () => 1,
    read: () => {
      reads++;
      throw Object.assign(new Error('EIO'), { code: 'EIO' });
    },
    close: () => {},
  };
  const a = reader(dev, { io: boom });
  a.r.start();
  await tick(200);
  await a.r.stop();
  assert.match(a.errors[0].message, /EIO/);
  assert.equal(reads, 1, 'a failing device is retried after a back-off, not in a loop');
  const b = reader(dev, {
    lookbackMs: Infinity,
    onRecords: () => {
      throw new Error('consumer bug');
    },
  });
  b.r.start();
  await b.r.stop();
  assert.match(b.errors[0].message, /consumer bug/);
  assert.throws(
    () =>
      new KmsgReader({
        io: {
          ...boom,
          open: () => {
            throw new Error('ENOENT');
          },
        },
        bootId: BOOT,
        uptimeMs: () => 1,
      }).start(),
    /ENOENT/,
  );
});

test('with lookback 0, a record written while a large ring is still being drained is delivered', async () => {
  const dev = new FakeKmsg();
  for (let i = 0; i < 1500; i++) dev.add(`old ${i}`, (UPTIME_MS - 60_000) * 1000);
  const { r, got } = reader(dev, { lookbackMs: 0, batchSize: 512 });
  r.start();
  // The first batch has been read; the rest of the ring is still pending when this arrives.
  dev.add('new while draining', UPTIME_MS * 1000 + 5);
  await tick(50);
  await r.stop();
  assert.deepEqual(
    got.map((x) => x.message),
    ['new while draining'],
  );
});
