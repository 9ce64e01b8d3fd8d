import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { lookupReason } from '../../src/catalog/index.ts';
import {
  checkClockEvents,
  checkDeviceCount,
  checkEccUncorrected,
  checkInforom,
  checkNvLinkErrors,
  checkNvLinkState,
  checkPcieReplay,
  checkPcieWidth,
  checkRecoveryAction,
  checkRetiredPages,
  checkRowRemap,
  checkTemperature,
  evaluateGpu,
  eventFindings,
  gpuGone,
  initialCheckState,
  nvmlTimeout,
  pcieReplayLimit,
  type CheckResult,
  gpuConfigSchema,
  type GpuInfo,
} from '../../src/monitors/index.ts';
import type { GpuSample, NvmlEvent } from '../../src/sources/index.ts';

const cfg = gpuConfigSchema.parse({});
const gpu: GpuInfo = {
  index: 2,
  uuid: 'GPU-2222',
  name: 'H100',
  pci: '0000:b3:00',
  busId: '00000000:B3:00.0',
  serial: 'x',
  driverVersion: '550',
};
const ctx = { gpu, now: 1_000_000, cfg };

function sample(patch: Partial<GpuSample> = {}): GpuSample {
  return {
    remappedRows: { corr: 0, unc: 0, pending: false, failure: false },
    retiredPages: null,
    eccUncorrectedVolatile: 0,
    pcie: { replay: 0, gen: 5, maxGen: 5, width: 16, maxWidth: 16 },
    clocksEventReasons: 0,
    temperature: { current: 40, slowdown: 87, shutdown: 92 },
    nvlink: {
      active: [true, true, true, true],
      counters: [
        [0, 0, 0, 0],
        [0, 0, 0, 0],
        [0, 0, 0, 0],
        [0, 0, 0, 0],
      ],
    },
    recoveryAction: 0,
    inforom: 'valid',
    errors: [],
    missing: [],
    ...patch,
  };
}

function assertFinding(r: CheckResult, reason: string) {
  assert.equal(r.status, 'fail', r.message);
  assert.equal(r.reason, reason);
  assert.ok(r.finding);
  assert.equal(r.finding.reason, reason);
  assert.equal(r.finding.entity, 'gpu:0000:b3:00');
  assert.equal(r.finding.source, 'nvml');
  assert.equal(r.finding.attrs?.uuid, 'GPU-2222');
  assert.equal(r.finding.attrs?.index, 2);
  assert.equal(r.finding.attrs?.pci, '0000:b3:00');
  assert.ok(lookupReason(reason), `${reason} is in the catalog`);
}

test('row remapping: failure is Fatal, pending is Warning, unsupported skips', () => {
  const [fail, pend] = checkRowRemap(ctx, sample({ remappedRows: { corr: 1, unc: 3, pending: true, failure: true } }));
  assertFinding(fail, 'NvidiaRowRemapFailure');
  assertFinding(pend, 'NvidiaRowRemapPending');
  assert.equal(lookupReason('NvidiaRowRemapFailure')?.severity, 'Fatal');
  assert.deepEqual(
    checkRowRemap(ctx, sample()).map((r) => r.status),
    ['ok', 'ok'],
  );
  assert.deepEqual(
    checkRowRemap(ctx, sample({ remappedRows: null })).map((r) => r.status),
    ['skip', 'skip'],
  );
  const missing = checkRowRemap(ctx, sample({ remappedRows: null, missing: ['nvmlDeviceGetRemappedRows'] }));
  assert.match(missing[0].message, /lacks nvmlDeviceGetRemappedRows/);
});

test('retired pages (pre-Ampere): pending or at the limit', () => {
  const pre = { remappedRows: null };
  assertFinding(checkRetiredPages(ctx, sample({ ...pre, retiredPages: { sbe: 1, dbe: 0, pending: true } })), 'NvidiaPageRetirement');
  assertFinding(checkRetiredPages(ctx, sample({ ...pre, retiredPages: { sbe: 40, dbe: 20, pending: false } })), 'NvidiaPageRetirement');
  assert.equal(checkRetiredPages(ctx, sample({ ...pre, retiredPages: { sbe: 40, dbe: 19, pending: false } })).status, 'ok');
  assert.match(checkRetiredPages(ctx, sample()).message, /row remapping/);
  assert.equal(checkRetiredPages(ctx, sample()).status, 'skip');
});

test('uncorrectable ECC: growth since the last poll', () => {
  assert.equal(checkEccUncorrected(ctx, sample({ eccUncorrectedVolatile: 3 }), null).status, 'skip');
  assertFinding(checkEccUncorrected(ctx, sample({ eccUncorrectedVolatile: 4 }), 3), 'NvidiaDoubleBitError');
  assert.equal(checkEccUncorrected(ctx, sample({ eccUncorrectedVolatile: 3 }), 3).status, 'ok');
  assert.equal(checkEccUncorrected(ctx, sample({ eccUncorrectedVolatile: 0 }), 3).status, 'ok'); // driver reload reset it
  assert.equal(checkEccUncorrected(ctx, sample({ eccUncorrectedVolatile: null }), 3).status, 'skip');
});

test('PCIe replay rate is judged against the per-generation limit over at least a minute', () => {
  assert.equal(pcieReplayLimit(cfg, 4, 16), 16);
  assert.equal(pcieReplayLimit(cfg, 5, 16), 31);
  assert.equal(pcieReplayLimit(cfg, 3, 16), 8);
  assert.equal(pcieReplayLimit(cfg, 5, 8), 16);
  const base = checkPcieReplay(ctx, sample({ pcie: { replay: 100, gen: 5, maxGen: 5, width: 16, maxWidth: 16 } }), null);
  assert.equal(base.result.status, 'skip');
  // 30 s later: too soon, the baseline stays.
  const soon = checkPcieReplay(
    { ...ctx, now: ctx.now + 30_000 },
    sample({ pcie: { replay: 200, gen: 5, maxGen: 5, width: 16, maxWidth: 16 } }),
    base.next,
  );
  assert.equal(soon.result.status, 'skip');
  assert.deepEqual(soon.next, base.next);
  // 5 minutes, +150: 30/min, under Gen5 x16's 31.
  const ok = checkPcieReplay(
    { ...ctx, now: ctx.now + 300_000 },
    sample({ pcie: { replay: 250, gen: 1, maxGen: 5, width: 16, maxWidth: 16 } }),
    base.next,
  );
  assert.equal(ok.result.status, 'ok', ok.result.message);
  // 5 minutes, +200: 40/min.
  const bad = checkPcieReplay(
    { ...ctx, now: ctx.now + 300_000 },
    sample({ pcie: { replay: 300, gen: 5, maxGen: 5, width: 16, maxWidth: 16 } }),
    base.next,
  );
  assertFinding(bad.result, 'NvidiaPCIeError');
  assert.match(bad.result.message, /40\.0\/min, limit 31\/min for Gen5 x16/);
});

test('PCIe link width below maximum; generation drops are ignored', () => {
  assertFinding(checkPcieWidth(ctx, sample({ pcie: { replay: 0, gen: 5, maxGen: 5, width: 8, maxWidth: 16 } })), 'NvidiaPCIeLinkDegraded');
  assert.equal(checkPcieWidth(ctx, sample({ pcie: { replay: 0, gen: 1, maxGen: 5, width: 16, maxWidth: 16 } })).status, 'ok');
  assert.equal(checkPcieWidth(ctx, sample({ pcie: { replay: 0, gen: null, maxGen: null, width: null, maxWidth: null } })).status, 'skip');
});

test('clock events: HW slowdown, HW thermal and power brake only, sustained over consecutive polls', () => {
  let streak = initialCheckState().clockStreak;
  // Idle, app clocks, SW power cap and SW thermal are normal operation.
  const normal = checkClockEvents(ctx, sample({ clocksEventReasons: 0x1 | 0x2 | 0x4 | 0x20 }), streak);
  assert.deepEqual(
    normal.results.map((r) => r.status),
    ['ok', 'ok', 'ok'],
  );
  const first = checkClockEvents(ctx, sample({ clocksEventReasons: 0x8 | 0x40 | 0x80 }), streak);
  assert.deepEqual(
    first.results.map((r) => r.status),
    ['skip', 'skip', 'skip'],
  );
  streak = first.next;
  const second = checkClockEvents(ctx, sample({ clocksEventReasons: 0x8 | 0x40 | 0x80 }), streak);
  assertFinding(second.results[0], 'NvidiaClockSlowdown');
  assertFinding(second.results[1], 'NvidiaThermalError');
  assertFinding(second.results[2], 'NvidiaPowerError');
  const cleared = checkClockEvents(ctx, sample({ clocksEventReasons: 0 }), second.next);
  assert.deepEqual(cleared.next, { slowdown: 0, thermal: 0, power: 0 });
  const once = checkClockEvents(
    { ...ctx, cfg: gpuConfigSchema.parse({ thresholds: { clockEventPolls: 1 } }) },
    sample({ clocksEventReasons: 0x8 }),
    initialCheckState().clockStreak,
  );
  assert.equal(once.results[0].status, 'fail');
});

test("temperature against the GPU's own thresholds", () => {
  assert.equal(checkTemperature(ctx, sample()).status, 'ok');
  const slow = checkTemperature(ctx, sample({ temperature: { current: 87, slowdown: 87, shutdown: 92 } }));
  assertFinding(slow, 'NvidiaThermalError');
  assert.match(slow.message, /slowdown threshold 87/);
  const hot = checkTemperature(ctx, sample({ temperature: { current: 90, slowdown: 95, shutdown: 92 } }));
  assertFinding(hot, 'NvidiaThermalError');
  assert.match(hot.message, /within 2 °C of the GPU's shutdown threshold 92/);
  assert.equal(checkTemperature(ctx, sample({ temperature: { current: 50, slowdown: null, shutdown: null } })).status, 'skip');
});

test('NVLink: a link that was active going inactive is Fatal; links coming up join the baseline', () => {
  const first = checkNvLinkState(ctx, sample(), []);
  assert.equal(first.result.status, 'ok');
  assert.deepEqual(first.next, [0, 1, 2, 3]);
  const down = checkNvLinkState(ctx, sample({ nvlink: { active: [true, false, true, false], counters: [] } }), first.next);
  assertFinding(down.result, 'NvidiaNVLinkError');
  assert.match(down.result.message, /links 1, 3 went inactive \(2 of 4 active\)/);
  const expectCfg = gpuConfigSchema.parse({ thresholds: { nvlinkExpectedActive: 4 } });
  const fewer = checkNvLinkState({ ...ctx, cfg: expectCfg }, sample({ nvlink: { active: [true, true, false, false], counters: [] } }), []);
  assertFinding(fewer.result, 'NvidiaNVLinkError');
  assert.equal(checkNvLinkState(ctx, sample({ nvlink: null }), []).result.status, 'skip');
});

test('NVLink error counters: replay/recovery growth, CRC rate', () => {
  const s0 = sample();
  const base = checkNvLinkErrors(ctx, s0, null);
  assert.equal(base.result.status, 'skip');
  const grew = checkNvLinkErrors(
    { ...ctx, now: ctx.now + 60_000 },
    sample({ nvlink: { active: [true, true, true, true], counters: [[1, 0, 0, 0], [0, 0, 5, 0], [0, 0, 0, 0], null] } }),
    base.next,
  );
  assertFinding(grew.result, 'NvidiaNVLinkErrorCounters');
  const crcOnly = checkNvLinkErrors(
    { ...ctx, now: ctx.now + 60_000 },
    sample({
      nvlink: {
        active: [true, true, true, true],
        counters: [
          [0, 0, 50, 0],
          [0, 0, 0, 0],
          [0, 0, 0, 0],
          [0, 0, 0, 0],
        ],
      },
    }),
    base.next,
  );
  assert.equal(crcOnly.result.status, 'ok'); // < 100/s
  const crcStorm = checkNvLinkErrors(
    { ...ctx, now: ctx.now + 10_000 },
    sample({
      nvlink: {
        active: [true, true, true, true],
        counters: [
          [0, 0, 2_000, 0],
          [0, 0, 0, 0],
          [0, 0, 0, 0],
          [0, 0, 0, 0],
        ],
      },
    }),
    base.next,
  );
  assert.equal(crcStorm.result.status, 'fail');
});

test('recovery action and InfoROM', () => {
  for (const a of [1, 2, 4]) assertFinding(checkRecoveryAction(ctx, sample({ recoveryAction: a })), 'NvidiaRecoveryActionRequired');
  assert.equal(checkRecoveryAction(ctx, sample({ recoveryAction: 0 })).status, 'ok');
  assert.equal(checkRecoveryAction(ctx, sample({ recoveryAction: 3 })).status, 'ok');
  assert.equal(checkRecoveryAction(ctx, sample({ recoveryAction: null })).status, 'skip');
  assertFinding(checkInforom(ctx, sample({ inforom: 'corrupted' })), 'NvidiaInfoROMCorrupted');
  assert.equal(
    checkInforom(ctx, sample({ inforom: null, errors: [{ fn: 'nvmlDeviceValidateInforom', rc: 999 }] })).message.includes('UNKNOWN'),
    true,
  );
});

test('evaluateGpu runs every check and carries state forward', () => {
  const { results, state } = evaluateGpu(gpu, sample({ eccUncorrectedVolatile: 2 }), initialCheckState(), cfg, ctx.now);
  assert.deepEqual(
    results.map((r) => r.check),
    [
      'rowRemapFailure',
      'rowRemapPending',
      'retiredPages',
      'eccUncorrected',
      'eccCorrected',
      'pcieReplay',
      'pcieLinkWidth',
      'clockHwSlowdown',
      'clockHwThermal',
      'clockHwPowerBrake',
      'temperature',
      'nvlinkState',
      'nvlinkErrors',
      'fabric',
      'recoveryAction',
      'inforom',
    ],
  );
  assert.equal(state.ecc, 2);
  const next = evaluateGpu(gpu, sample({ eccUncorrectedVolatile: 3 }), state, cfg, ctx.now + 1000);
  assert.equal(next.results.find((r) => r.check === 'eccUncorrected')?.status, 'fail');
});

test('device count, timeouts and lost GPUs', () => {
  const c = checkDeviceCount(7, 8, '8 NVIDIA PCI functions in sysfs', 5);
  assert.equal(c.status, 'fail');
  assert.equal(c.finding?.reason, 'NvidiaDeviceCountMismatch');
  assert.equal(c.finding?.entity, '');
  assert.equal(checkDeviceCount(8, 8, 'configured', 5).status, 'ok');
  const t = nvmlTimeout('nvmlDeviceGetTemperature', 10_000, gpu, 5);
  assert.equal(t.finding?.reason, 'NvidiaNVMLTimeout');
  assert.equal(t.finding?.entity, 'gpu:0000:b3:00');
  assert.equal(lookupReason('NvidiaNVMLTimeout')?.severity, 'Warning');
  assert.equal(gpuGone(gpu, 'nvmlDeviceGetUUID', 15, 5).finding?.reason, 'NvidiaGPULost');
  assert.equal(gpuGone(gpu, 'nvmlDeviceGetUUID', 16, 5).finding?.reason, 'NvidiaGPUResetRequired');
});

test('Xid events use the fatal-Xid table and the kernel-log entity', () => {
  const ev = (eventType: number, eventData = 0, extra: Partial<NvmlEvent> = {}): NvmlEvent => ({
    index: 2,
    uuid: 'GPU-2222',
    busId: '00000000:B3:00.0',
    eventType,
    eventData,
    gpuInstanceId: 0xffffffff,
    computeInstanceId: 0xffffffff,
    recoveryAction: null,
    at: 7,
    ...extra,
  });
  const [f48] = eventFindings(ev(8, 48), gpu, cfg);
  assert.equal(f48.reason, 'NvidiaXID48Error');
  assert.equal(f48.entity, 'gpu:0000:b3:00');
  assert.deepEqual(f48.attrs, { index: 2, uuid: 'GPU-2222', pci: '0000:b3:00', xid: 48 });
  assert.match(f48.message, /GPU-2222/);
  assert.equal(lookupReason(f48.reason)?.severity, 'Fatal');
  assert.equal(eventFindings(ev(8, 13), gpu, cfg)[0].reason, 'NvidiaXID13Warning');
  assert.equal(eventFindings(ev(8, 63), gpu, cfg)[0].reason, 'NvidiaXID63Warning');
  assert.equal(eventFindings(ev(8, 13), gpu, gpuConfigSchema.parse({ fatalXids: [13] }))[0].reason, 'NvidiaXID13Error');
  assert.match(eventFindings(ev(8, 999), gpu, cfg)[0].message, /unknown Xid/);
  assert.equal(eventFindings(ev(2), gpu, cfg)[0].reason, 'NvidiaDoubleBitError');
  assert.equal(eventFindings(ev(0x800), gpu, cfg)[0].reason, 'NvidiaRowRemapFailure');
  assert.equal(eventFindings(ev(0x4000), gpu, cfg)[0].reason, 'NvidiaGPULost');
  assert.equal(eventFindings(ev(0x8000, 0, { recoveryAction: 2 }), gpu, cfg)[0].reason, 'NvidiaRecoveryActionRequired');
  assert.deepEqual(eventFindings(ev(0x8000, 0, { recoveryAction: 0 }), gpu, cfg), []);
  // Single-bit ECC and pending retirement/remap events: Info and Warning, never Fatal.
  assert.deepEqual(
    eventFindings(ev(0x1), gpu, cfg).map((f) => [f.reason, lookupReason(f.reason)?.severity]),
    [['NvidiaSingleBitEccError', 'Info']],
  );
  assert.deepEqual(
    eventFindings(ev(0x400), gpu, cfg).map((f) => [f.reason, lookupReason(f.reason)?.severity]),
    [['NvidiaRowRemapPending', 'Warning']],
  );
  assert.deepEqual(eventFindings(ev(0x10), gpu, cfg), [], 'a clock event only makes the monitor re-read the clock-event reasons');
  const mig = eventFindings(ev(8, 31, { gpuInstanceId: 1, computeInstanceId: 0 }), gpu, cfg)[0];
  assert.equal(mig.attrs?.gpuInstance, 1);
});
