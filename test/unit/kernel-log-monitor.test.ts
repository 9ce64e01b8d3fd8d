import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Finding, FindingSink, HealthySignal } from '../../src/api/index.ts';
import { KernelLogMonitor, loadNpdConfig } from '../../src/monitors/index.ts';
import { recordsDevice as device, type KmsgCursor } from '../../src/sources/index.ts';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'kmsg');
const NOW = 1_700_000_000_000;
const UPTIME_MS = 600_000;

function sink() {
  const findings: Finding[] = [];
  const healthy: HealthySignal[] = [];
  const out: FindingSink = { finding: (f) => findings.push(f), healthy: (h) => healthy.push(h), source: () => {} };
  return { out, findings, healthy };
}

const records = [
  `4,10,${(UPTIME_MS - 60_000) * 1000},-;NVRM: Xid (PCI:0000:b3:00): 48, pid=1, name=python, DBE\n`,
  `12,11,${(UPTIME_MS - 1_000) * 1000},-;watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [user-space-injected:1]\n`,
  `6,12,${(UPTIME_MS - 500) * 1000},-;EXT4-fs (sda1): Remounting filesystem read-only\n`,
];

test('records become findings stamped with the record time; the cursor is reported per batch', async () => {
  const cursors: KmsgCursor[] = [];
  const m = new KernelLogMonitor({
    reader: { io: device(records), bootId: 'boot-a', uptimeMs: () => UPTIME_MS, now: () => NOW, wait: 'interval' },
    now: () => NOW,
    onCursor: (c) => cursors.push(c),
  });
  const { out, findings } = sink();
  m.start(out);
  await m.stop();
  assert.deepEqual(
    findings.map((f) => f.reason),
    ['NvidiaXID48Error', 'SoftLockup', 'FilesystemReadOnly'],
  );
  assert.equal(findings[0].at, NOW - 60_000, 'a record from a minute ago is a finding from a minute ago');
  assert.equal(findings[0].entity, 'gpu:0000:b3:00');
  assert.deepEqual(cursors, [{ bootId: 'boot-a', seq: 12 }]);
  assert.deepEqual(m.cursor(), { bootId: 'boot-a', seq: 12 }, 'the cursor survives stop() for the final save');
  assert.equal(m.name, 'kernel-log');
});

test('kernelOnly ignores records written from user space (facility > 0)', async () => {
  const m = new KernelLogMonitor({
    reader: { io: device(records), bootId: 'boot-a', uptimeMs: () => UPTIME_MS, now: () => NOW, wait: 'interval' },
    kernelOnly: true,
  });
  const { out, findings } = sink();
  m.start(out);
  await m.stop();
  assert.deepEqual(
    findings.map((f) => f.reason),
    ['NvidiaXID48Error', 'FilesystemReadOnly'],
  );
});

test('the initial cursor is passed on; NPD condition types are exposed for the engine', async () => {
  const npd = [
    loadNpdConfig(path.join(FIXTURES, 'npd-kernel-monitor.json')),
    loadNpdConfig(path.join(FIXTURES, 'npd-readonly-monitor.json')),
  ];
  const m = new KernelLogMonitor({
    cursor: { bootId: 'boot-a', seq: 11 },
    reader: { io: device(records), bootId: 'boot-a', uptimeMs: () => UPTIME_MS, now: () => NOW, wait: 'interval' },
    classifier: { npd },
  });
  assert.deepEqual(m.cursor(), { bootId: 'boot-a', seq: 11 });
  assert.deepEqual(
    m.npdConditions.map((c) => c.type),
    ['KernelDeadlock', 'XfsShutdown', 'CperHardwareErrorFatal', 'ReadonlyFilesystem'],
  );
  const { out, findings } = sink();
  m.start(out);
  await m.stop();
  assert.deepEqual(
    findings.map((f) => f.reason),
    ['FilesystemReadOnly', 'FilesystemIsReadOnly'],
    'seq 10 and 11 are not replayed',
  );
});

test('start() throws when the device cannot be opened', () => {
  const m = new KernelLogMonitor({
    reader: {
      io: {
        open: () => {
          throw new Error('EACCES: /dev/kmsg');
        },
        read: () => 0,
        close: () => {},
      },
      bootId: 'b',
      uptimeMs: () => 1,
    },
  });
  assert.throws(() => m.start(sink().out), /EACCES/);
  assert.equal(m.cursor(), undefined);
});
