/**
 * Partial and absent NVML: symbols missing from an older driver, no library, no driver, no GPU.
 */
import { strict as assert } from 'node:assert';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { Registry } from 'prom-client';
import { GpuMonitor } from '../../src/monitors/index.ts';
import { FakeNvmlEnv, RecordingSink, fakeMonitor } from './nvml-helpers.ts';

const envs: FakeNvmlEnv[] = [];
after(() => envs.forEach((e) => e.cleanup()));

function setup(...args: ConstructorParameters<typeof FakeNvmlEnv>) {
  const env = new FakeNvmlEnv(...args);
  envs.push(env);
  return env;
}

test('symbols missing from an older driver degrade only their checks', async () => {
  const omit = [
    'nvmlDeviceGetRemappedRows',
    'nvmlDeviceGetCurrentClocksEventReasons',
    'nvmlDeviceValidateInforom',
    'nvmlDeviceGetFieldValues',
  ];
  const env = setup(2, { omit });
  env.gpu(0, { clocksEventReasons: 0x8 });
  const { monitor } = fakeMonitor(env, { events: false, thresholds: { clockEventPolls: 1 } });
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    const snap = monitor.snapshot();
    assert.deepEqual(snap.missingSymbols.sort(), [...omit].sort());
    assert.equal(snap.gpus.length, 2);
    const check = (name: string, gpu = 0) => snap.checks.find((c) => c.check === name && c.gpu === gpu)!;
    assert.equal(check('rowRemapFailure').status, 'skip');
    assert.match(check('rowRemapFailure').message, /lacks nvmlDeviceGetRemappedRows \(older driver\)/);
    assert.match(check('inforom').message, /lacks nvmlDeviceValidateInforom/);
    assert.match(check('recoveryAction').message, /lacks nvmlDeviceGetFieldValues/);
    // Clock reasons fall back to the pre-R535 symbol.
    assert.equal(check('clockHwSlowdown').status, 'fail');
    assert.deepEqual(sink.reasons(), ['NvidiaClockSlowdown']);
    // Everything else still runs.
    assert.equal(check('temperature', 1).status, 'ok');
    assert.equal(check('nvlinkState', 1).status, 'ok');
  } finally {
    await monitor.stop();
  }
});

test('without the event symbols, polls still run and events are not retried', async () => {
  const env = setup(1, { omit: ['nvmlEventSetWait_v2'] });
  const { monitor, logs } = fakeMonitor(env);
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    const ev = monitor.snapshot().events;
    assert.equal(ev.status, 'failed');
    assert.match(ev.detail ?? '', /nvmlEventSetWait_v2/);
    assert.ok(logs.some((l) => /relying on polls/.test(l.msg)));
    assert.ok(sink.healthyFor('NvidiaThermalError').length > 0);
  } finally {
    await monitor.stop();
  }
});

test('GPUs present but no NVML library: the source reports itself blind (Unknown), not a GPU fault', async () => {
  const env = setup(2);
  const { monitor } = fakeMonitor(env, { libraryPath: join(env.dir, 'missing', 'libnvidia-ml.so.1') });
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    assert.deepEqual(sink.reasons(), [], 'no Fatal finding: a missing library must not get a node replaced');
    assert.equal(sink.sources.length, 1);
    const s = sink.sources[0];
    assert.equal(s.up, false);
    assert.equal(s.reason, 'NvidiaMonitoringUnavailable');
    assert.deepEqual(s.conditions, ['AcceleratedHardwareReady']);
    assert.match(
      s.message ?? '',
      /^2 NVIDIA GPUs are on the PCI bus but NVML cannot be loaded: cannot load .*missing\/libnvidia-ml\.so\.1/,
    );
    assert.equal(monitor.snapshot().nvmlUsable, false);
    assert.equal(monitor.snapshot().events.status, 'off');
  } finally {
    await monitor.stop();
  }
});

test('NVML init failing after a driver upgrade is Unknown naming the cause, never a GPU fault; loaded again, it sees', async () => {
  const env = setup(2);
  env.cfg.rc = { nvmlInit_v2: 9 };
  env.write();
  const { monitor } = fakeMonitor(env);
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    assert.deepEqual(sink.reasons(), [], 'DRIVER_NOT_LOADED: no finding, so AcceleratedHardwareReady never goes False');
    assert.deepEqual(
      sink.sources.map((r) => [r.up, r.reason, r.conditions]),
      [[false, 'NvidiaMonitoringUnavailable', ['AcceleratedHardwareReady']]],
    );
    assert.match(sink.sources[0].message ?? '', /^2 NVIDIA GPUs are on the PCI bus but NVML cannot be initialised: .*DRIVER_NOT_LOADED/);
    assert.equal(monitor.snapshot().nvmlUsable, false);
    // The driver was upgraded without a reboot: still Unknown, and the reason now names the mismatch.
    env.cfg.rc = { nvmlInit_v2: 18 };
    env.write();
    await monitor.pollOnce();
    assert.deepEqual(sink.reasons(), []);
    assert.equal(sink.sources.length, 2);
    assert.equal(sink.sources[1].up, false);
    assert.match(sink.sources[1].message ?? '', /LIB_RM_VERSION_MISMATCH.*upgraded without a reboot/);
    assert.match(monitor.snapshot().nvmlUnusableReason ?? '', /LIB_RM_VERSION_MISMATCH/);
    // The same failure again says nothing new.
    await monitor.pollOnce();
    assert.equal(sink.sources.length, 2);
    delete env.cfg.rc;
    env.write();
    await monitor.pollOnce();
    assert.deepEqual(sink.reasons(), []);
    assert.deepEqual(
      sink.sources.map((r) => r.up),
      [false, false, true],
    );
    assert.equal(sink.healthyFor('NvidiaDriverNotLoaded', '').length, 1);
    assert.equal(monitor.inventory().length, 2);
    const end = Date.now() + 3_000;
    while (monitor.snapshot().events.status !== 'running' && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    env.event({ gpu: 1, type: 8, data: 48 });
    await sink.waitFor((f) => f.reason === 'NvidiaXID48Error');
  } finally {
    await monitor.stop();
  }
});

test('a PCIe GPU (NVLink state NOT_SUPPORTED) never raises NVLink-down, however often it is polled', async () => {
  const env = setup(2);
  env.gpu(1, { nvlink: null, fabric: null }); // PCIe card: nvmlDeviceGetNvLinkState answers NOT_SUPPORTED
  const { monitor } = fakeMonitor(env, { events: false });
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    for (let i = 0; i < 3; i++) await monitor.pollOnce();
    const checks = monitor.snapshot().checks.filter((c) => c.gpu === 1 && c.check.startsWith('nvlink'));
    assert.deepEqual(
      checks.map((c) => [c.check, c.status]),
      [
        ['nvlinkState', 'skip'],
        ['nvlinkErrors', 'skip'],
      ],
    );
    assert.match(checks[0].message, /no NVLink/);
    assert.deepEqual(sink.reasons(), []);
    // The NVLink GPU next to it is still judged: a link going down there is reported.
    env.gpu(0, { nvlink: { links: 18, inactive: [5] } });
    await monitor.pollOnce();
    assert.deepEqual(sink.reasons(), ['NvidiaNVLinkError']);
    assert.equal(sink.findings[0].entity, 'gpu:0000:18:00');
  } finally {
    await monitor.stop();
  }
});

test('an old NVLink CRC, ECC and PCIe replay count on a healthy GPU is not a fault; only an increase is', async () => {
  const env = setup(1);
  const crc = Array.from({ length: 18 }, () => [0, 0, 5_000_000, 40_000, 0]);
  env.gpu(0, {
    nvlink: { links: 18, errors: crc },
    eccUncorrectedVolatile: 12,
    eccCorrectedVolatile: 9_000,
    pcie: { replay: 250_000 },
  });
  let now = 1_700_000_000_000;
  const { monitor } = fakeMonitor(env, { events: false }, () => now);
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    now += 120_000;
    await monitor.pollOnce();
    now += 120_000;
    await monitor.pollOnce();
    assert.deepEqual(sink.reasons(), [], 'lifetime totals alone raise nothing');
    const status = (check: string) => monitor.snapshot().checks.find((c) => c.check === check)?.status;
    assert.deepEqual(['nvlinkErrors', 'eccUncorrected', 'eccCorrected', 'pcieReplay'].map(status), ['ok', 'ok', 'ok', 'ok']);
    crc[3][2] += 1;
    env.gpu(0, { nvlink: { links: 18, errors: crc }, eccCorrectedVolatile: 9_001 });
    now += 120_000;
    await monitor.pollOnce();
    assert.deepEqual(sink.reasons(), ['NvidiaSingleBitEccError'], 'one new CRC error in 2 min is below 100/s; a new SBE is Info');
    crc[3][0] += 1; // a replay error: counted from the baseline, reported
    env.gpu(0, { nvlink: { links: 18, errors: crc } });
    now += 120_000;
    await monitor.pollOnce();
    assert.ok(sink.reasons().includes('NvidiaNVLinkErrorCounters'));
  } finally {
    await monitor.stop();
  }
});

test('no NVIDIA GPU on the PCI bus: the monitor stays off and says nothing', async () => {
  const env = setup(2, { pciFunctions: 0 });
  const { monitor } = fakeMonitor(env);
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    await monitor.pollOnce();
    assert.equal(monitor.snapshot().state, 'off');
    assert.deepEqual(sink.findings, []);
    assert.deepEqual(sink.healthySignals, []);
    assert.equal(monitor.stuckNvmlThreads, 0);
  } finally {
    await monitor.stop();
  }
  const empty = join(env.dir, 'empty-sys');
  mkdirSync(empty);
  const disabled = new GpuMonitor({
    config: { enabled: false, libraryPath: env.libraryPath },
    registry: new Registry(),
    sysRoot: env.sysRoot,
    ownTimer: false,
  });
  await disabled.start(new RecordingSink());
  assert.equal(disabled.snapshot().state, 'off');
  await disabled.stop();
});

test('the fallback timer polls on its own, with jitter, and stop() cancels it', async () => {
  const env = setup(1);
  const registry = new Registry();
  const monitor = new GpuMonitor({
    config: { libraryPath: env.libraryPath, events: false, pollInterval: 1_000, pollJitter: 0.2 },
    registry,
    sysRoot: env.sysRoot,
  });
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    assert.equal(monitor.pollIntervalMs, 1_000);
    const first = sink.healthyFor('NvidiaThermalError').length;
    await new Promise((r) => setTimeout(r, 2_500));
    assert.ok(sink.healthyFor('NvidiaThermalError').length >= first + 1);
  } finally {
    await monitor.stop();
  }
});
