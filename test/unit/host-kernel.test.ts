import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  kernelChecks,
  kernelConfigSchema,
  type KernelSyscalls,
  countKernelWarnings,
  STA_UNSYNC,
  type TimexSample,
} from '../../src/monitors/index.ts';
import { parseProcStat } from '../../src/sources/index.ts';
import { check, cleared, ctx, found, fx } from './host-helpers.ts';

const cfg = kernelConfigSchema.parse({});
const fakeSys = (timex?: TimexSample, klog: (string | undefined)[] = []): KernelSyscalls => ({
  timex: () => Promise.resolve(timex),
  klog: () => Promise.resolve(klog.shift()),
});

test('limits: PID and file-handle headroom', async () => {
  const c = check(kernelChecks(cfg, fakeSys()), 'kernel.limits');
  const ok = await c.run(ctx(fx('healthy')));
  assert.deepEqual(found(ok), []);
  assert.deepEqual(cleared(ok), ['ApproachingKernelPidMax', 'ApproachingMaxOpenFiles']);
  const bad = await c.run(ctx(fx('faulty')));
  assert.deepEqual(found(bad), ['ApproachingKernelPidMax', 'ApproachingMaxOpenFiles']);
  assert.equal(bad.findings[0].attrs?.limit, 1_000_000, 'the lower of pid_max and threads-max');
  assert.equal((await c.run(ctx(fx('empty')))).status, 'skipped');
});

test('zombies: reported after two consecutive polls at or above the threshold', async () => {
  const c = check(kernelChecks(cfg, fakeSys()), 'kernel.zombies');
  assert.deepEqual(cleared(await c.run(ctx(fx('healthy')))), ['ExcessiveZombieProcesses']);
  const first = await c.run(ctx(fx('faulty')));
  assert.deepEqual([found(first), cleared(first)], [[], []], 'one poll is pending, neither bad nor healthy');
  const second = await c.run(ctx(fx('faulty')));
  assert.deepEqual(found(second), ['ExcessiveZombieProcesses']);
  assert.equal(second.findings[0].attrs?.zombies, 25);
  assert.deepEqual(cleared(await c.run(ctx(fx('healthy')))), ['ExcessiveZombieProcesses']);
});

test('clock: STA_UNSYNC from adjtimex', async () => {
  const unsynced = check(kernelChecks(cfg, fakeSys({ status: STA_UNSYNC | 0x1, state: 5, maxErrorUs: 16_000_000 })), 'kernel.clock');
  assert.deepEqual(found(await unsynced.run(ctx('/'))), ['ClockUnsynchronized']);
  const synced = check(kernelChecks(cfg, fakeSys({ status: 0x2001, state: 0, maxErrorUs: 1000 })), 'kernel.clock');
  assert.deepEqual(cleared(await synced.run(ctx('/'))), ['ClockUnsynchronized']);
  const none = check(kernelChecks(cfg, fakeSys(undefined)), 'kernel.clock');
  assert.equal((await none.run(ctx('/'))).status, 'skipped');
});

test('warnings: rate of /sys/kernel/warn_count; first poll is a baseline', async () => {
  const c = check(kernelChecks(cfg, fakeSys()), 'kernel.warnings');
  const base = await c.run(ctx(fx('healthy')));
  assert.deepEqual([found(base), cleared(base)], [[], []]);
  assert.deepEqual(cleared(await c.run(ctx(fx('healthy-later')))), ['RepeatedKernelWarnings']); // +1 < 3
  const bad = await c.run(ctx(fx('faulty'))); // +7
  assert.deepEqual(found(bad), ['RepeatedKernelWarnings']);
  assert.equal(bad.findings[0].attrs?.warnings, 7);
  assert.equal(bad.findings[0].source, 'sysfs');
});

const ring = (lines: string[]) => lines.join('\n') + '\n';
const W = (ts: string) => `<4>[${ts}] WARNING: CPU: 3 PID: 1234 at drivers/foo/bar.c:42 baz+0x10/0x20`;

test('warnings: kernel log fallback counts WARNING lines newer than the last poll', async () => {
  const first = ring(['<6>[    1.000000] hello', W('    2.000000'), '<6>[    3.000000] later']);
  const second = ring([
    first.trim(),
    W('    4.000000'),
    '<4>[    4.100000] ------------[ cut here ]------------',
    W('    5.000000'),
    W('    6.000000'),
  ]);
  const c = check(kernelChecks(cfg, fakeSys(undefined, [first, second, second])), 'kernel.warnings');
  const root = fx('empty'); // no /sys/kernel/warn_count, as on Linux < 6.2
  assert.deepEqual(found(await c.run(ctx(root))), []);
  const bad = await c.run(ctx(root));
  assert.deepEqual(found(bad), ['RepeatedKernelWarnings']);
  assert.equal(bad.findings[0].attrs?.warnings, 3);
  assert.equal(bad.findings[0].source, 'kmsg');
  assert.deepEqual(cleared(await c.run(ctx(root))), ['RepeatedKernelWarnings'], 'nothing new');
  assert.equal((await c.run(ctx(root))).status, 'skipped', 'no kernel log access');
});

test('countKernelWarnings with and without timestamps', () => {
  assert.deepEqual(countKernelWarnings(ring([W('10.5'), W('11.5'), '<6>[   12.000000] x']), 10.5), { count: 1, total: 2, lastTs: 12 });
  assert.deepEqual(countKernelWarnings(ring(['<4>WARNING: CPU: 0 PID: 1 at x', '<6>other', 'WARNING: at y']), 0), { count: 0, total: 2 });
});

test('/proc/<pid>/stat parsing survives odd process names', () => {
  const line = '42 (my (odd) proc) D 1 ' + /* fields 5..52 */ Array.from({ length: 48 }, (_, i) => (i === 37 ? '777' : '0')).join(' ');
  assert.deepEqual(parseProcStat(42, line), { pid: 42, comm: 'my (odd) proc', state: 'D', blkioTicks: 777 });
});
