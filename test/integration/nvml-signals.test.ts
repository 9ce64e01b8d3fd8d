/**
 * The NVML signals beyond Xids, through the real koffi binding into the fake library: NVSwitch
 * fabric state (nvmlDeviceGetGpuFabricInfoV, and the older unversioned call), whether the fabric
 * manager runs, single-bit ECC and DRAM retirement events, ECC mode and corrected counts.
 */
import { strict as assert } from 'node:assert';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { lookupReason } from '../../src/catalog/index.ts';
import { FakeNvmlEnv, RecordingSink, fakeMonitor } from './nvml-helpers.ts';

const envs: FakeNvmlEnv[] = [];
after(() => envs.forEach((e) => e.cleanup()));

function setup(...args: ConstructorParameters<typeof FakeNvmlEnv>) {
  const env = new FakeNvmlEnv(...args);
  envs.push(env);
  return env;
}

/** A fake /proc (under the monitor's host root, the parent of its sysfs) with one process. */
function fakeProc(env: FakeNvmlEnv, pid: number, comm: string): void {
  const d = join(env.dir, 'proc', String(pid));
  mkdirSync(d, { recursive: true });
  writeFileSync(join(d, 'stat'), `${pid} (${comm}) S 1 ${pid} ${pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n`);
}

const COMPLETED = { state: 3, status: 0, cliqueId: 7, clusterUuid: 'cluster-0000001', healthMask: 0 };

test('NVSwitch fabric: registration not completed, a failed status or a bad health mask is NvidiaFabricError; completed is healthy', async () => {
  const env = setup(2); // the fixture sysfs has one NVSwitch (0000:05:00.0)
  fakeProc(env, 4100, 'nv-fabricmanage');
  env.gpu(0, { fabric: COMPLETED });
  env.gpu(1, { fabric: { ...COMPLETED, state: 2 } }); // IN_PROGRESS
  const { monitor } = fakeMonitor(env, { events: false });
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    assert.deepEqual(sink.reasons(), ['NvidiaFabricError']);
    assert.equal(sink.findings[0].entity, 'gpu:0000:28:00');
    assert.match(sink.findings[0].message, /fabric registration is IN_PROGRESS, not COMPLETED/);
    assert.equal(lookupReason('NvidiaFabricError')?.severity, 'Fatal');
    assert.equal(sink.healthyFor('NvidiaFabricError', 'gpu:0000:18:00').length, 1);
    assert.deepEqual(monitor.snapshot().samples[0].fabric, { ...COMPLETED, clusterUuid: '636c75737465722d3030303030303100' });
    const fm = monitor.snapshot().checks.find((c) => c.check === 'fabricManager')!;
    assert.equal(fm.status, 'ok');
    assert.match(fm.message, /nv-fabricmanager runs \(pid 4100\)/);

    sink.clear();
    env.gpu(1, { fabric: { ...COMPLETED, status: 999 } });
    await monitor.pollOnce();
    assert.match(sink.findings[0]?.message ?? '', /completed with status UNKNOWN/);
    sink.clear();
    env.gpu(1, { fabric: { ...COMPLETED, healthMask: 1 << 4 } }); // route unhealthy = TRUE
    await monitor.pollOnce();
    assert.match(sink.findings[0]?.message ?? '', /fabric health: route unhealthy \(mask 0x10\)/);
    sink.clear();
    env.gpu(1, { fabric: { ...COMPLETED, healthMask: (2 << 4) | (2 << 0) } }); // FALSE values: healthy
    await monitor.pollOnce();
    assert.deepEqual(sink.reasons(), []);
    assert.equal(sink.healthyFor('NvidiaFabricError', 'gpu:0000:28:00').length, 1);
  } finally {
    await monitor.stop();
  }
});

test('an older driver without nvmlDeviceGetGpuFabricInfoV is read through the unversioned call', async () => {
  const env = setup(1, { omit: ['nvmlDeviceGetGpuFabricInfoV'] });
  env.gpu(0, { fabric: { ...COMPLETED, state: 1 } });
  const { monitor } = fakeMonitor(env, { events: false });
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    assert.deepEqual(monitor.snapshot().samples[0].fabric, {
      state: 1,
      status: 0,
      cliqueId: 7,
      clusterUuid: '636c75737465722d3030303030303100',
      healthMask: null,
    });
    assert.match(sink.findings.find((f) => f.reason === 'NvidiaFabricError')?.message ?? '', /NOT_STARTED/);
  } finally {
    await monitor.stop();
  }
});

test('NVSwitches on the bus and GPUs in the fabric but no nv-fabricmanager: FabricManagerNotRunning; PCIe GPUs never ask for one', async () => {
  const env = setup(2);
  env.gpu(0, { fabric: COMPLETED });
  env.gpu(1, { fabric: COMPLETED });
  fakeProc(env, 1, 'systemd');
  const { monitor } = fakeMonitor(env, { events: false });
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    assert.deepEqual(sink.reasons(), ['FabricManagerNotRunning']);
    assert.equal(sink.findings[0].entity, '');
    assert.match(sink.findings[0].message, /1 NVSwitch on the PCI bus and 2 GPUs in the fabric, but no nv-fabricmanager process runs/);
    fakeProc(env, 4200, 'nv-fabricmanage');
    sink.clear();
    await monitor.pollOnce();
    assert.deepEqual(sink.reasons(), []);
    assert.equal(sink.healthyFor('FabricManagerNotRunning', '').length, 1);
  } finally {
    await monitor.stop();
  }
  // The same node with PCIe GPUs (no fabric): the check skips, whatever /proc holds.
  const pcie = setup(2);
  fakeProc(pcie, 1, 'systemd');
  const m2 = fakeMonitor(pcie, { events: false }).monitor;
  const sink2 = new RecordingSink();
  try {
    await m2.start(sink2);
    assert.deepEqual(sink2.reasons(), []);
    const fm = m2.snapshot().checks.find((c) => c.check === 'fabricManager')!;
    assert.equal(fm.status, 'skip');
    assert.match(fm.message, /no GPU reports an NVSwitch fabric/);
  } finally {
    await m2.stop();
  }
});

test('single-bit ECC and DRAM retirement events are subscribed and reported (Info, Warning); ECC mode and counts are read', async () => {
  const env = setup(2);
  env.gpu(1, { eccCorrectedVolatile: 3, eccMode: { current: 1, pending: 0 } });
  const { monitor } = fakeMonitor(env);
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    const mask = monitor.snapshot().events.devices[1].mask;
    assert.equal(mask & 0x401, 0x401, 'SBE and DRAM retirement events registered');
    assert.deepEqual(monitor.snapshot().samples[1].eccMode, { current: true, pending: false });
    assert.equal(monitor.snapshot().samples[1].eccCorrectedVolatile, 3);
    env.event({ gpu: 1, type: 0x1 });
    env.event({ gpu: 1, type: 0x400 });
    await sink.waitFor((f) => f.reason === 'NvidiaRowRemapPending');
    assert.deepEqual(sink.reasons(), ['NvidiaSingleBitEccError', 'NvidiaRowRemapPending']);
    assert.ok(sink.findings.every((f) => f.entity === 'gpu:0000:28:00'));
    assert.equal(lookupReason('NvidiaSingleBitEccError')?.severity, 'Info');
  } finally {
    await monitor.stop();
  }
});
