import { strict as assert } from 'node:assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { gpuConfigSchema, GpuInventory, detectNvidiaPciFunctions, entityOf, normalizePci } from '../../src/monitors/index.ts';
import { nvmlReturnName, NvmlError } from '../../src/sources/index.ts';
import { makeSysfs } from '../integration/nvml-helpers.ts';

test('normalizePci gives the kernel-log Xid form for every common spelling', () => {
  for (const s of ['PCI:0000:B3:00', '0000:b3:00', '00000000:B3:00.0', '0000:B3:00.0', 'pci:0000:b3:00.0', ' 0000:b3:00 ']) {
    assert.equal(normalizePci(s), '0000:b3:00', s);
  }
  assert.equal(normalizePci('0001:03:00'), '0001:03:00');
  assert.equal(normalizePci('00000001:03:00.0'), '0001:03:00');
  assert.equal(normalizePci('0:3:0'), '0000:03:00');
  assert.equal(normalizePci('GPU-1234'), null);
  assert.equal(normalizePci(''), null);
});

test('detectNvidiaPciFunctions counts NVIDIA display/3D controllers only', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vigil-sys-'));
  try {
    makeSysfs(dir, 3);
    const found = await detectNvidiaPciFunctions(dir);
    assert.deepEqual(
      found.map((f) => f.pci),
      ['0000:18:00', '0000:28:00', '0000:38:00'],
    );
    assert.equal(found[0].address, '0000:18:00.0');
    assert.equal(found[0].class, '0x030200');
    assert.equal(found[0].device, '0x2330');
    assert.deepEqual(await detectNvidiaPciFunctions(join(dir, 'nowhere')), []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('GpuInventory looks GPUs up by any PCI spelling, UUID and index', () => {
  const inv = GpuInventory.fromPoll(
    [
      {
        index: 0,
        handleRc: 0,
        identity: { index: 0, uuid: 'GPU-a', name: 'H100', busId: '00000000:18:00.0', serial: 's0' },
        gone: null,
        sample: null,
        skipped: false,
      },
      { index: 1, handleRc: 15, identity: null, gone: { fn: 'nvmlDeviceGetHandleByIndex_v2', rc: 15 }, sample: null, skipped: false },
    ],
    '550.54.15',
  );
  assert.equal(inv.byPci('PCI:0000:18:00')?.uuid, 'GPU-a');
  assert.equal(inv.byPci('0000:18:00.0')?.index, 0);
  assert.equal(inv.byUuid('GPU-a')?.pci, '0000:18:00');
  assert.equal(inv.byIndex(0)?.driverVersion, '550.54.15');
  assert.equal(inv.byPci('0000:99:00'), undefined);
  // A GPU NVML cannot name keeps an index entity, or what an earlier inventory knew.
  assert.equal(entityOf(inv.byIndex(1)!), 'gpu:nvml-index-1');
  const before = new GpuInventory([
    { index: 1, uuid: 'GPU-b', name: null, pci: '0000:28:00', busId: null, serial: null, driverVersion: null },
  ]);
  const after = GpuInventory.fromPoll([{ index: 1, handleRc: 15, identity: null, gone: null, sample: null, skipped: false }], null, before);
  assert.equal(entityOf(after.byIndex(1)!), 'gpu:0000:28:00');
  assert.ok(after.sameAs(before));
  assert.ok(!inv.sameAs(before));
});

test('gpuConfigSchema has a default for every option and takes duration strings', () => {
  const d = gpuConfigSchema.parse({});
  assert.equal(d.libraryPath, 'libnvidia-ml.so.1');
  assert.equal(d.pollInterval, 300_000);
  assert.equal(d.watchdog, 10_000);
  assert.equal(d.expectedCount, null);
  assert.deepEqual(d.fatalXids, [46, 48, 54, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155, 156, 158]);
  assert.equal(d.thresholds.clockEventPolls, 2);
  assert.equal(d.thresholds.pcieReplayPerLanePerMinute['5'], 1.9375);
  const c = gpuConfigSchema.parse({
    pollInterval: '1m',
    watchdog: '3s',
    eventWait: '200ms',
    expectedCount: 8,
    thresholds: { clockEventPolls: 1 },
  });
  assert.equal(c.pollInterval, 60_000);
  assert.equal(c.watchdog, 3_000);
  assert.equal(c.eventWait, 200);
  assert.equal(c.expectedCount, 8);
  assert.equal(c.thresholds.clockEventPolls, 1);
  assert.equal(c.thresholds.retiredPagesLimit, 60);
  assert.throws(() => gpuConfigSchema.parse({ pollInterval: 'soon' }));
  assert.throws(() => gpuConfigSchema.parse({ eventWait: 60_000 }));
  assert.throws(() => gpuConfigSchema.parse({ fatalXids: ['48'] }));
});

test('every NVML return code has a name', () => {
  assert.equal(nvmlReturnName(15), 'GPU_IS_LOST');
  assert.equal(nvmlReturnName(16), 'RESET_REQUIRED');
  assert.equal(nvmlReturnName(999), 'UNKNOWN');
  assert.equal(nvmlReturnName(-1), 'MISSING_SYMBOL');
  assert.equal(nvmlReturnName(77), 'CODE_77');
  for (let rc = 0; rc <= 30; rc++) assert.doesNotMatch(nvmlReturnName(rc), /^CODE_/);
  const e = new NvmlError('nvmlInit_v2', 9);
  assert.equal(e.message, 'nvmlInit_v2 returned NVML_ERROR_DRIVER_NOT_LOADED (9)');
  assert.equal(e.codeName, 'DRIVER_NOT_LOADED');
});
