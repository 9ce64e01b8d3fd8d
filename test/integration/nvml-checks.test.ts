/**
 * Every poll check through the real koffi binding, against the fake NVML library.
 */
import { strict as assert } from 'node:assert';
import { after, test } from 'node:test';
import { FakeNvmlEnv, RecordingSink, fakeMonitor } from './nvml-helpers.ts';

const envs: FakeNvmlEnv[] = [];
after(() => envs.forEach((e) => e.cleanup()));

function setup(gpus: ConstructorParameters<typeof FakeNvmlEnv>[0], opts: ConstructorParameters<typeof FakeNvmlEnv>[1] = {}) {
  const env = new FakeNvmlEnv(gpus, opts);
  envs.push(env);
  return env;
}

const ENT = ['gpu:0000:18:00', 'gpu:0000:28:00', 'gpu:0000:38:00'];

test('inventory: index, UUID, name, normalised PCI, serial, driver; gpuByPci attributes kernel-log addresses', async () => {
  const env = setup(3);
  env.gpu(1, { name: 'NVIDIA H200', serial: null });
  const { monitor } = fakeMonitor(env, { events: false });
  try {
    await monitor.start(new RecordingSink());
    const inv = monitor.inventory();
    assert.equal(inv.length, 3);
    assert.deepEqual(inv[0], {
      index: 0,
      uuid: 'GPU-00000000-aaaa-bbbb-cccc-000000000000',
      name: 'NVIDIA H100 80GB HBM3',
      pci: '0000:18:00',
      busId: '00000000:18:00.0',
      serial: '1654321000000',
      driverVersion: '550.54.15',
    });
    assert.equal(inv[1].name, 'NVIDIA H200');
    assert.equal(inv[1].serial, null); // NOT_SUPPORTED on this board
    assert.equal(monitor.gpuByPci('PCI:0000:38:00')?.uuid, 'GPU-00000002-aaaa-bbbb-cccc-000000000002');
    assert.equal(monitor.gpuByPci('0000:28:00.0')?.index, 1);
    assert.equal(monitor.gpuByPci('0000:99:00'), undefined);
  } finally {
    await monitor.stop();
  }
});

test('poll checks: faults become findings, fixes become healthy signals', async () => {
  const env = setup(3);
  // GPU 2 is pre-Ampere: page retirement instead of row remapping.
  env.gpu(2, { remappedRows: null, retiredPages: { sbe: 0, dbe: 0, pending: 0 } });
  let t = 1_000_000;
  const { monitor } = fakeMonitor(env, { events: false }, () => t);
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    assert.deepEqual(sink.reasons(), [], 'a healthy node reports nothing');
    for (const e of ENT) {
      for (const r of [
        'NvidiaPCIeLinkDegraded',
        'NvidiaThermalError',
        'NvidiaClockSlowdown',
        'NvidiaPowerError',
        'NvidiaInfoROMCorrupted',
      ]) {
        assert.equal(sink.healthyFor(r, e).length, 1, `${r} healthy on ${e}`);
      }
    }
    assert.equal(sink.healthyFor('NvidiaPageRetirement', ENT[2]).length, 1);
    assert.equal(sink.healthyFor('NvidiaDeviceCountMismatch', '').length, 1);
    assert.equal(sink.healthyFor('NvidiaDriverNotLoaded', '').length, 1);
    // untilReboot reasons never get healthy signals.
    assert.equal(sink.healthyFor('NvidiaRowRemapFailure').length, 0);

    env.gpu(0, {
      remappedRows: { corr: 2, unc: 1, pending: 1, failure: 1 },
      eccUncorrectedVolatile: 2,
      pcie: { replay: 1_000, width: 8 },
      inforomValid: false,
      recoveryAction: 2,
    });
    env.gpu(1, {
      clocksEventReasons: 0x1 | 0x8 | 0x40 | 0x80,
      temperature: 91,
      nvlink: { links: 18, inactive: [3], errors: [[5, 0, 0, 0]] },
    });
    env.gpu(2, { retiredPages: { sbe: 1, dbe: 0, pending: 1 } });
    t += 300_000;
    sink.clear();
    await monitor.pollOnce();
    const got = (e: string) =>
      sink.findings
        .filter((f) => f.entity === e)
        .map((f) => f.reason)
        .sort();
    assert.deepEqual(got(ENT[0]), [
      'NvidiaDoubleBitError',
      'NvidiaInfoROMCorrupted',
      'NvidiaPCIeError',
      'NvidiaPCIeLinkDegraded',
      'NvidiaRecoveryActionRequired',
      'NvidiaRowRemapFailure',
      'NvidiaRowRemapPending',
    ]);
    // Clock events need two consecutive polls by default; the temperature counts at once.
    assert.deepEqual(got(ENT[1]), ['NvidiaNVLinkError', 'NvidiaNVLinkErrorCounters', 'NvidiaThermalError']);
    assert.deepEqual(got(ENT[2]), ['NvidiaPageRetirement']);
    const remap = sink.findings.find((f) => f.reason === 'NvidiaRowRemapFailure')!;
    assert.deepEqual(
      { uuid: remap.attrs?.uuid, index: remap.attrs?.index, pci: remap.attrs?.pci },
      { uuid: 'GPU-00000000-aaaa-bbbb-cccc-000000000000', index: 0, pci: '0000:18:00' },
    );
    assert.equal(remap.source, 'nvml');
    // No healthy signal for a reason that fails on the same GPU from another check.
    assert.equal(sink.healthyFor('NvidiaThermalError', ENT[1]).length, 0);

    t += 300_000;
    sink.clear();
    await monitor.pollOnce();
    assert.ok(got(ENT[1]).includes('NvidiaClockSlowdown'));
    assert.ok(got(ENT[1]).includes('NvidiaPowerError'));
    assert.match(sink.findings.find((f) => f.reason === 'NvidiaClockSlowdown')!.message, /2 consecutive polls/);

    // Repair what can be repaired; whenHealthy reasons get their healthy signal.
    env.gpu(0, { pcie: { replay: 1_000, width: 16 }, inforomValid: true, recoveryAction: 0, remappedRows: { corr: 2, unc: 1 } });
    env.gpu(1, { clocksEventReasons: 0x1, temperature: 45, nvlink: { links: 18, inactive: [3], errors: [[5, 0, 0, 0]] } });
    env.gpu(2, { retiredPages: { sbe: 1, dbe: 0, pending: 0 } });
    t += 300_000;
    sink.clear();
    await monitor.pollOnce();
    assert.deepEqual(
      sink.findings.filter((f) => f.reason !== 'NvidiaNVLinkError').map((f) => f.reason),
      [],
    );
    for (const r of ['NvidiaPCIeLinkDegraded', 'NvidiaInfoROMCorrupted', 'NvidiaPCIeError'])
      assert.equal(sink.healthyFor(r, ENT[0]).length, 1, r);
    for (const r of ['NvidiaThermalError', 'NvidiaClockSlowdown', 'NvidiaPowerError', 'NvidiaNVLinkErrorCounters'])
      assert.equal(sink.healthyFor(r, ENT[1]).length, 1, r);
    assert.equal(sink.healthyFor('NvidiaPageRetirement', ENT[2]).length, 1);
    // The link that is still down stays reported (the counters on the live links are fine).
    assert.deepEqual(
      sink.findings.map((f) => f.entity),
      [ENT[1]],
    );
  } finally {
    await monitor.stop();
  }
});

test('device count below expected is Fatal; expected from sysfs or configuration', async () => {
  const env = setup(3);
  env.cfg.count = 2; // the driver attached only two of three
  env.write();
  const { monitor } = fakeMonitor(env, { events: false });
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    const f = await sink.waitFor((x) => x.reason === 'NvidiaDeviceCountMismatch', 100);
    assert.equal(f.entity, '');
    assert.match(f.message, /NVML sees 2 GPUs but 3 are expected \(3 NVIDIA PCI functions in sysfs\)/);
  } finally {
    await monitor.stop();
  }
  const configured = fakeMonitor(env, { events: false, expectedCount: 2 }).monitor;
  const sink2 = new RecordingSink();
  try {
    await configured.start(sink2);
    assert.deepEqual(sink2.reasons(), []);
    assert.equal(sink2.healthyFor('NvidiaDeviceCountMismatch', '').length, 1);
  } finally {
    await configured.stop();
  }
});

test('GPU_IS_LOST and RESET_REQUIRED from any call: reported per GPU, NVML re-initialised once', async () => {
  const env = setup(3);
  const { monitor, registry, logs } = fakeMonitor(env, { events: false });
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    env.gpu(1, { rc: { '*': 15 } });
    env.gpu(2, { rc: { nvmlDeviceGetTemperature: 16 } });
    await monitor.pollOnce();
    const lost = await sink.waitFor((f) => f.reason === 'NvidiaGPULost', 100);
    assert.equal(lost.entity, ENT[1]);
    assert.equal(lost.attrs?.uuid, 'GPU-00000001-aaaa-bbbb-cccc-000000000001'); // remembered from the last inventory
    assert.match(lost.message, /GPU_IS_LOST/);
    const reset = sink.findings.find((f) => f.reason === 'NvidiaGPUResetRequired')!;
    assert.equal(reset.entity, ENT[2]);
    assert.match(reset.message, /nvmlDeviceGetTemperature returned RESET_REQUIRED/);
    // GPU 0 is still checked.
    assert.ok(sink.healthyFor('NvidiaThermalError', ENT[0]).length >= 2);
    assert.ok(logs.some((l) => /re-initialising NVML/.test(l.msg)));
    const metrics = await registry.getSingleMetricAsString('vigil_nvml_worker_restarts_total');
    assert.match(metrics, /role="poll",why="gpu-lost"} 1/);
    sink.clear();
    await monitor.pollOnce(); // still lost: reported again, no second re-init
    assert.ok(sink.reasons().includes('NvidiaGPULost'));
    assert.match(await registry.getSingleMetricAsString('vigil_nvml_worker_restarts_total'), /role="poll",why="gpu-lost"} 1/);
  } finally {
    await monitor.stop();
  }
});

test('metrics: call durations and errors by code on the registry passed in', async () => {
  const env = setup(2);
  env.gpu(0, { rc: { nvmlDeviceValidateInforom: 999 } });
  // An older driver without the NVLink link-count field: links are probed instead.
  env.gpu(1, { nvlink: { links: 4, linkCountField: null } });
  const { monitor, registry } = fakeMonitor(env, { events: false });
  try {
    await monitor.start(new RecordingSink());
    assert.match(monitor.snapshot().checks.find((c) => c.check === 'nvlinkState' && c.gpu === 1)!.message, /4 of 4 NVLink links active/);
    assert.match(monitor.snapshot().checks.find((c) => c.check === 'nvlinkState' && c.gpu === 0)!.message, /18 of 18 NVLink links active/);
    const text = await registry.metrics();
    // Only the probing GPU asked past its last link.
    assert.match(text, /vigil_nvml_call_errors_total\{function="nvmlDeviceGetNvLinkState",code="INVALID_ARGUMENT"\} 1\n/);
    assert.match(text, /vigil_nvml_call_duration_seconds_count\{function="nvmlDeviceGetTemperature"\} 2/);
    assert.match(text, /vigil_nvml_call_errors_total\{function="nvmlDeviceValidateInforom",code="UNKNOWN"\} 1/);
    assert.match(text, /vigil_gpu_count\{source="nvml"\} 2/);
    assert.match(text, /vigil_gpu_poll_duration_seconds_count 1/);
  } finally {
    await monitor.stop();
  }
});
