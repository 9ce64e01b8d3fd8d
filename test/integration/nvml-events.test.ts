/**
 * NVML events (push) through the real binding and the event worker, against the fake library.
 */
import { strict as assert } from 'node:assert';
import { after, test } from 'node:test';
import { FakeNvmlEnv, RecordingSink, fakeMonitor, slow } from './nvml-helpers.ts';
import type { GpuMonitor } from '../../src/monitors/index.ts';

const envs: FakeNvmlEnv[] = [];
after(() => envs.forEach((e) => e.cleanup()));

async function until(what: string, pred: () => boolean, timeoutMs = 3_000): Promise<void> {
  const end = Date.now() + slow(timeoutMs);
  while (!pred()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const running = (m: GpuMonitor) => () => m.snapshot().events.status === 'running';

test('an Xid 48 on GPU 2 reaches the sink within 100 ms, attributed like the kernel-log rules', async () => {
  const env = new FakeNvmlEnv(4);
  envs.push(env);
  const { monitor } = fakeMonitor(env);
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    // start() returns once events are registered, so nothing sent from here on is missed.
    assert.equal(monitor.snapshot().events.status, 'running');
    const sentAt = env.event({ gpu: 2, type: 8, data: 48 });
    const f = await sink.waitFor((x) => x.reason === 'NvidiaXID48Error', 1_000);
    const latency = f.receivedAt - sentAt;
    // 100 ms natively; under emulation (VIGIL_TEST_SLOWDOWN, scripts/test-arm64.sh) the bound stretches like every wait here.
    assert.ok(latency < slow(100), `Xid delivered after ${latency} ms`);
    assert.equal(f.entity, 'gpu:0000:38:00');
    assert.equal(f.source, 'nvml');
    assert.deepEqual(f.attrs, { index: 2, uuid: 'GPU-00000002-aaaa-bbbb-cccc-000000000002', pci: '0000:38:00', xid: 48 });
    assert.match(f.message, /GPU-00000002-aaaa-bbbb-cccc-000000000002/);
  } finally {
    await monitor.stop();
  }
});

test('event kinds: Xid warning vs fatal (configurable), double-bit ECC, recovery action; unregistered types ignored', async () => {
  const env = new FakeNvmlEnv(2);
  envs.push(env);
  const { monitor } = fakeMonitor(env, { fatalXids: [13, 48] });
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    assert.deepEqual(sink.reasons(), []);
    env.gpu(1, { recoveryAction: 1 }); // read by the event worker when the event arrives
    env.event({ gpu: 0, type: 8, data: 31 });
    env.event({ gpu: 0, type: 8, data: 13 });
    env.event({ gpu: 1, type: 1 }); // single-bit ECC: Info
    env.event({ gpu: 1, type: 2 });
    env.event({ gpu: 1, type: 0x8000 });
    await sink.waitFor((f) => f.reason === 'NvidiaRecoveryActionRequired');
    assert.deepEqual(sink.reasons(), [
      'NvidiaXID31Warning',
      'NvidiaXID13Error',
      'NvidiaSingleBitEccError',
      'NvidiaDoubleBitError',
      'NvidiaRecoveryActionRequired',
    ]);
    assert.equal(sink.findings[4].attrs?.recoveryAction, 1);
    assert.equal(sink.findings[3].entity, 'gpu:0000:28:00');
  } finally {
    await monitor.stop();
  }
});

test('events register only what each GPU supports', async () => {
  const env = new FakeNvmlEnv(2);
  envs.push(env);
  env.gpu(1, { supportedEvents: 0x8 }); // Xid only
  const { monitor } = fakeMonitor(env);
  try {
    await monitor.start(new RecordingSink());
    const devs = monitor.snapshot().events.devices;
    assert.deepEqual(
      devs.map((d) => [d.index, d.mask, d.rc]),
      [
        [0, 0xcc0b, 0], // SBE, DBE, Xid, DRAM retirement event and failure, GPU unavailable, recovery action
        [1, 0x8, 0],
      ],
    );
  } finally {
    await monitor.stop();
  }
});

test('a wait that returns GPU_IS_LOST reports that GPU and re-registers events', async () => {
  const env = new FakeNvmlEnv(3);
  envs.push(env);
  const { monitor, registry } = fakeMonitor(env);
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    env.gpu(1, { rc: { '*': 15 } });
    env.event({ gpu: 1, rc: 15 });
    const lost = await sink.waitFor((f) => f.reason === 'NvidiaGPULost');
    assert.equal(lost.entity, 'gpu:0000:28:00');
    assert.match(lost.message, /nvmlEventSetWait_v2 returned GPU_IS_LOST/);
    await until('events re-registered', running(monitor));
    assert.match(await registry.getSingleMetricAsString('vigil_nvml_worker_restarts_total'), /role="events"/);
    // The other GPUs still deliver.
    env.event({ gpu: 2, type: 8, data: 79 });
    const xid = await sink.waitFor((f) => f.reason === 'NvidiaXID79Error');
    assert.equal(xid.attrs?.uuid, 'GPU-00000002-aaaa-bbbb-cccc-000000000002');
  } finally {
    await monitor.stop();
  }
});

test('a GPU added after start is picked up (inventory change re-registers events)', async () => {
  const env = new FakeNvmlEnv(3);
  envs.push(env);
  env.cfg.count = 2;
  env.write();
  const { monitor, logs } = fakeMonitor(env, { expectedCount: 2 });
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    assert.equal(monitor.inventory().length, 2);
    delete env.cfg.count;
    env.write();
    await monitor.pollOnce();
    assert.equal(monitor.inventory().length, 3);
    assert.ok(logs.some((l) => l.msg === 'GPU inventory changed'));
    await until('events re-registered for 3 GPUs', () => running(monitor)() && monitor.snapshot().events.devices.length === 3);
    env.event({ gpu: 2, type: 8, data: 94 });
    assert.equal((await sink.waitFor((f) => f.reason === 'NvidiaXID94Warning')).entity, 'gpu:0000:38:00');
  } finally {
    await monitor.stop();
  }
});

test('clock events are not subscribed even where the GPU supports them (a busy H200 sent about 40 a second)', async () => {
  const env = new FakeNvmlEnv(1);
  envs.push(env);
  // What a real H200 on driver 580 reported as supported: the fake's default plus clock changes.
  env.gpu(0, { supportedEvents: 0xcc1b });
  const { monitor } = fakeMonitor(env);
  try {
    await monitor.start(new RecordingSink());
    assert.equal(monitor.snapshot().events.devices[0]?.mask, 0xcc0b);
  } finally {
    await monitor.stop();
  }
});

test('retirement events poll early at most once per eventPollMinInterval, and that poll reads the GPU', async () => {
  const env = new FakeNvmlEnv(1);
  envs.push(env);
  const { monitor, registry } = fakeMonitor(env, { eventPollMinInterval: slow(1_000), thresholds: { clockEventPolls: 1 } });
  const sink = new RecordingSink();
  const polls = async () => Number(/vigil_gpu_poll_duration_seconds_count (\d+)/.exec(await registry.metrics())?.[1] ?? NaN);
  try {
    await monitor.start(sink);
    const afterStart = await polls();
    // Something only a poll reads (a HW slowdown) shows up after the first event, long before a regular poll.
    env.gpu(0, { clocksEventReasons: 0x8 });
    env.event({ gpu: 0, type: 0x400 });
    await sink.waitFor((f) => f.reason === 'NvidiaClockSlowdown', 1_000);
    const firstPollAt = Date.now();
    // 50 more events within 500 ms cost one more poll, not 50.
    for (let i = 0; i < 50; i++) {
      env.event({ gpu: 0, type: 0x400 });
      await new Promise((r) => setTimeout(r, 10));
    }
    // The trailing poll runs 1 s after the first; give it half a second to finish (both times VIGIL_TEST_SLOWDOWN).
    await new Promise((r) => setTimeout(r, firstPollAt + slow(1_500) - Date.now()));
    assert.equal(await polls(), afterStart + 2);
    await new Promise((r) => setTimeout(r, slow(1_200)));
    assert.equal(await polls(), afterStart + 2, 'no poll without a new event');
  } finally {
    await monitor.stop();
  }
});
