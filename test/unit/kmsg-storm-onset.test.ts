/**
 * A storm that meets the reader on the main thread (its onset, before the read thread is up) is
 * read ahead of the ring's wrap: above the shed mark, noise is counted as shed instead of held, so
 * reading never pauses for classification and a record that can raise a finding, wherever it falls
 * in the storm, is delivered. A fake /dev/kmsg with a bounded ring that a writer fills faster than
 * the records are delivered (the writer runs on each delivered batch, so the test is not timed);
 * the real device is measured by bench/storm-onset.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { KmsgReader, type KmsgRecord } from '../../src/sources/index.ts';
import { FakeKmsg } from '../helpers/fake-kmsg.ts';

const XID = (i: number) => `NVRM: Xid (PCI:0000:${(0x10 + i).toString(16)}:00): 79, pid=1, name=x, GPU has fallen off the bus.`;

/** 30,000 noise records, 200 per delivered batch (about three times the delivery rate), faults at `faultsAt`. */
async function storm(keep: RegExp[] | undefined, faultsAt: number[]) {
  const dev = new FakeKmsg({ capacity: 4096, openAt: 'end' });
  const TOTAL = 30_000;
  const delivered: KmsgRecord[] = [];
  let written = 0;
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  const r = new KmsgReader({
    io: dev,
    bootId: 'boot',
    uptimeMs: () => 3_600_000,
    now: () => 1_700_000_000_000,
    lookbackMs: 0,
    wait: 'interval',
    intervalMs: 1,
    ...(keep ? { keep } : {}),
    onRecords: (recs) => {
      delivered.push(...recs);
      for (let i = 0; i < 200 && written < TOTAL; i++, written++) {
        const f = faultsAt.indexOf(written);
        dev.add(f >= 0 ? XID(f) : `IPv6: ADDRCONF(NETDEV_CHANGE): veth${written}: link becomes ready`);
      }
    },
  });
  r.start();
  // The storm starts with one record; every delivery writes more.
  dev.add('cni0: port 1(veth1) entered forwarding state');
  const check = setInterval(() => {
    if (written >= TOTAL && r.recordsRead + r.recordsLost >= TOTAL + 1 && r.readAheadBytes === 0) done();
  }, 2);
  await finished;
  clearInterval(check);
  await r.stop();
  return { r, delivered, faults: delivered.filter((d) => d.message.includes('Xid')) };
}

test('a storm faster than delivery is read on: noise above the mark is shed, every fault is delivered, nothing lost', async () => {
  const faultsAt = [15_000, 3, 29_999, 20_001, 7_777];
  const { r, delivered, faults } = await storm([/\bXid\b/], faultsAt);
  assert.equal(faults.length, faultsAt.length, 'every fault delivered');
  assert.equal(r.recordsLost, 0, 'the ring never wrapped past the reader');
  assert.ok(r.recordsShed > 0, 'noise was shed');
  assert.equal(delivered.length + r.recordsShed, 30_001, 'each record either delivered or counted as shed');
  for (let i = 1; i < delivered.length; i++) assert.ok(delivered[i].seq > delivered[i - 1].seq, 'in kernel order');
});

test('without keep patterns nothing is shed: reading pauses at the bound and what the ring overwrites is counted as lost', async () => {
  const { r, delivered } = await storm(undefined, [15_000]);
  assert.equal(r.recordsShed, 0);
  assert.ok(r.recordsLost > 0, 'the ring wrapped while reading waited');
  assert.equal(delivered.length + r.recordsLost, 30_001, 'each record delivered or counted as lost');
});
