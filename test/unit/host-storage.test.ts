import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { storageChecks, storageConfigSchema, type StatfsFn, mountFor, parseDiskstats, parseMountinfo } from '../../src/monitors/index.ts';
import { check, cleared, ctx, found, fx } from './host-helpers.ts';

const cfg = storageConfigSchema.parse({});
/** statfs stand-in: `used` fraction of blocks and inodes. */
const fakeStatfs =
  (used: number, inodes = used): StatfsFn =>
  () =>
    Promise.resolve({
      blocks: 1000,
      bfree: 1000 - used * 1000,
      bavail: 1000 - used * 1000,
      files: 100,
      ffree: 100 - inodes * 100,
    });

test('filesystems: healthy mounts clear read-only and usage reasons, per mount', async () => {
  const c = check(storageChecks(cfg, { statfs: fakeStatfs(0.5) }), 'storage.filesystems');
  const r = await c.run(ctx(fx('healthy')));
  assert.deepEqual(found(r), []);
  assert.deepEqual(cleared(r), [
    'DiskUsageHigh mount:/',
    'DiskUsageHigh mount:/var/lib/kubelet',
    'FilesystemReadOnly mount:/',
    'FilesystemReadOnly mount:/var/lib/kubelet',
    'InodeUsageHigh mount:/',
    'InodeUsageHigh mount:/var/lib/kubelet',
  ]);
});

test('filesystems: read-only kubelet mount, full disk and inodes', async () => {
  const c = check(storageChecks(cfg, { statfs: fakeStatfs(0.95, 0.9) }), 'storage.filesystems');
  const r = await c.run(ctx(fx('faulty')));
  assert.deepEqual(found(r), [
    'DiskUsageHigh mount:/',
    'DiskUsageHigh mount:/var/lib/kubelet',
    'FilesystemReadOnly mount:/var/lib/kubelet',
    'InodeUsageHigh mount:/',
    'InodeUsageHigh mount:/var/lib/kubelet',
  ]);
  const ro = r.findings.find((f) => f.reason === 'FilesystemReadOnly')!;
  assert.equal(ro.attrs?.device, '/dev/nvme1n1');
  assert.equal(r.findings.find((f) => f.entity === 'mount:/')!.attrs?.paths, '/,/var/lib/containerd', 'paths on one mount are grouped');
});

test('filesystems: a hung statfs leaves the read-only verdict', async () => {
  const hung: StatfsFn = () => Promise.reject(new Error('statfs timed out'));
  const r = await check(storageChecks(cfg, { statfs: hung }), 'storage.filesystems').run(ctx(fx('faulty')));
  assert.deepEqual(found(r), ['FilesystemReadOnly mount:/var/lib/kubelet']);
});

test('filesystems: falls back to our own mountinfo, whose mount points carry the host root', async (t) => {
  const root = mkdtempSync(path.join(tmpdir(), 'vigil-host-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(path.join(root, 'proc/self'), { recursive: true });
  mkdirSync(path.join(root, 'var/lib/kubelet'), { recursive: true });
  writeFileSync(
    path.join(root, 'proc/self/mountinfo'),
    `1 0 0:1 / / rw - overlay overlay rw\n2 1 259:1 / ${root} rw - xfs /dev/nvme0n1p1 rw\n3 2 259:3 / ${root}/var/lib/kubelet ro,relatime - xfs /dev/nvme1n1 ro\n`,
  );
  const r = await check(storageChecks(cfg, { statfs: fakeStatfs(0.1) }), 'storage.filesystems').run(ctx(root));
  assert.deepEqual(found(r), ['FilesystemReadOnly mount:/var/lib/kubelet']);
  assert.ok(cleared(r).includes('FilesystemReadOnly mount:/'));
});

test('mountinfo parsing and longest-prefix lookup', () => {
  const m = parseMountinfo(
    '36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n1 0 8:1 / / ro - ext4 /dev/sda1 rw\n',
  );
  assert.deepEqual(m, [
    { mountPoint: '/mnt/with space', fsType: 'ext3', source: '/dev/root', readOnly: false },
    { mountPoint: '/', fsType: 'ext4', source: '/dev/sda1', readOnly: true },
  ]);
  assert.equal(mountFor('/mnt/with space/x', m)?.mountPoint, '/mnt/with space');
  assert.equal(mountFor('/mnt/with spacex', m)?.mountPoint, '/');
});

test('diskstats: average latency per I/O over the window, whole disks only', async () => {
  const c = check(storageChecks(cfg), 'storage.diskstats');
  assert.deepEqual(found(await c.run(ctx(fx('healthy')))), [], 'baseline');
  const ok = await c.run(ctx(fx('healthy-later'))); // +1000 I/Os, +1000 ms
  assert.deepEqual([found(ok), cleared(ok)], [[], ['DiskIOLatencyHigh blockdev:nvme0n1']], 'loop0 excluded, partitions not in /sys/block');
  const c2 = check(storageChecks(cfg), 'storage.diskstats');
  await c2.run(ctx(fx('healthy')));
  const bad = await c2.run(ctx(fx('faulty'))); // +1000 I/Os, +798000 ms
  assert.deepEqual(found(bad), ['DiskIOLatencyHigh blockdev:nvme0n1']);
  assert.equal(bad.findings[0].attrs?.avgMs, 798);
  const few = check(storageChecks(storageConfigSchema.parse({ ioLatencyMinIos: 5000 })), 'storage.diskstats');
  await few.run(ctx(fx('healthy')));
  assert.deepEqual(found(await few.run(ctx(fx('faulty')))), [], 'too few I/Os to judge');
  assert.equal(parseDiskstats(' 8 0 sda 1 2 3 4 5 6 7 8 9 10 11').get('sda')?.ios, 6);
});

test('iodelay: block-I/O delay per process over the window, kernel workers excluded', async () => {
  const c = check(storageChecks(cfg), 'storage.iodelay');
  assert.deepEqual(found(await c.run(ctx(fx('healthy')))), [], 'baseline');
  assert.deepEqual(found(await c.run(ctx(fx('healthy-later')))), [], 'postgres +2 s is under 10 s; new pid 600 is a baseline');
  const c2 = check(storageChecks(cfg), 'storage.iodelay');
  await c2.run(ctx(fx('healthy')));
  const bad = await c2.run(ctx(fx('faulty')));
  assert.deepEqual(found(bad), ['IODelays proc:my (odd) proc', 'IODelays proc:postgres']);
  assert.equal(bad.findings.find((f) => f.entity === 'proc:postgres')!.attrs?.delayMs, 50_000);
  const one = check(storageChecks(storageConfigSchema.parse({ ioDelayMaxFindings: 1 })), 'storage.iodelay');
  await one.run(ctx(fx('healthy')));
  assert.deepEqual(found(await one.run(ctx(fx('faulty')))), ['IODelays proc:postgres'], 'worst first');
});

test('iodelay: skipped while kernel.task_delayacct is 0', async (t) => {
  const root = mkdtempSync(path.join(tmpdir(), 'vigil-host-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(path.join(root, 'proc/sys/kernel'), { recursive: true });
  writeFileSync(path.join(root, 'proc/sys/kernel/task_delayacct'), '0\n');
  assert.equal((await check(storageChecks(cfg), 'storage.iodelay').run(ctx(root))).status, 'skipped');
});
