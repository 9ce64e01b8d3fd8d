/**
 * NVML calls that block (the event wait) or hang (a sick GPU) must never stall the main thread,
 * and a hung call must be reported, abandoned and survived.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { FakeNvmlEnv, RecordingSink, fakeMonitor } from './nvml-helpers.ts';

const envs: FakeNvmlEnv[] = [];
after(() => envs.forEach((e) => e.cleanup()));

function setup(n: number) {
  const env = new FakeNvmlEnv(n);
  envs.push(env);
  return env;
}

async function loopDelayDuring(ms: number, work: () => Promise<void>): Promise<{ p99: number; max: number }> {
  const h = monitorEventLoopDelay({ resolution: 5 });
  h.enable();
  const end = Date.now() + ms;
  await work();
  while (Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  h.disable();
  return { p99: h.percentile(99) / 1e6, max: h.max / 1e6 };
}

test('the blocking event wait runs off the main thread: event-loop delay stays low', async () => {
  const env = setup(4);
  // 400 ms waits: on the main thread, each would show up as a 400 ms stall.
  const { monitor, registry } = fakeMonitor(env, { eventWait: 400 });
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    const delay = await loopDelayDuring(1_500, async () => {
      await monitor.pollOnce();
      env.event({ gpu: 1, type: 8, data: 48 });
      await monitor.pollOnce();
    });
    const waits = Number(
      /vigil_nvml_call_duration_seconds_count\{function="nvmlEventSetWait_v2"\} (\d+)/.exec(await registry.metrics())?.[1] ?? 0,
    );
    assert.ok(waits >= 2, `the worker was waiting meanwhile (${waits} waits)`);
    assert.ok(sink.reasons().includes('NvidiaXID48Error'));
    assert.ok(delay.p99 < 100, `event-loop delay p99 ${delay.p99.toFixed(1)} ms (max ${delay.max.toFixed(1)} ms)`);
  } finally {
    await monitor.stop();
  }
});

test('a hung poll call trips the watchdog: reported, abandoned, the other GPUs still checked', async () => {
  const env = setup(3);
  // A hang far longer than start() takes even on a loaded machine, so returning first proves it did not wait.
  env.gpu(1, { hang: { nvmlDeviceGetTemperature: 12_000 } });
  const { monitor, registry } = fakeMonitor(env, { events: false, watchdog: 300 });
  const sink = new RecordingSink();
  try {
    const t0 = Date.now();
    let delay = { p99: 0, max: 0 };
    delay = await loopDelayDuring(0, () => monitor.start(sink));
    const took = Date.now() - t0;
    assert.ok(took < 9_000, `start() returned after ${took} ms despite a 12 s hang`);
    assert.ok(delay.p99 < 100, `event-loop delay p99 ${delay.p99.toFixed(1)} ms while NVML hung`);
    const f = await sink.waitFor((x) => x.reason === 'NvidiaNVMLTimeout', 100);
    assert.equal(f.entity, 'gpu:0000:28:00');
    assert.equal(f.attrs?.function, 'nvmlDeviceGetTemperature');
    assert.match(f.message, /nvmlDeviceGetTemperature on GPU 1 .* did not return within \d+ ms/);
    // The retry skipped GPU 1, so GPUs 0 and 2 were checked in the same poll.
    const checked = new Set(
      monitor
        .snapshot()
        .checks.filter((c) => c.check === 'temperature')
        .map((c) => c.gpu),
    );
    assert.deepEqual([...checked].sort(), [0, 2]);
    assert.match(await registry.getSingleMetricAsString('vigil_nvml_timeouts_total'), /function="nvmlDeviceGetTemperature"} 1/);

    // While the call is still stuck, polls skip GPU 1 instead of hanging on it again.
    sink.clear();
    await monitor.pollOnce();
    assert.ok(sink.findings.some((x) => x.reason === 'NvidiaNVMLTimeout' && /skipped until the call returns/.test(x.message)));
    assert.match(await registry.getSingleMetricAsString('vigil_nvml_timeouts_total'), /function="nvmlDeviceGetTemperature"} 1/);

    // Once the stuck call returns and the GPU behaves, it is checked again.
    env.gpu(1, { hang: {} });
    const end = Date.now() + 20_000;
    while (monitor.stuckNvmlThreads > 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    sink.clear();
    await monitor.pollOnce();
    assert.deepEqual(sink.reasons(), []);
    assert.equal(sink.healthyFor('NvidiaThermalError', 'gpu:0000:28:00').length, 1);
  } finally {
    await monitor.stop();
  }
});

test('a hang before any GPU is known is reported node-wide, and stuck threads are capped', async () => {
  const env = setup(2);
  env.cfg.hang = { nvmlDeviceGetCount_v2: 6_000 }; // outlasts the test, so both threads stay stuck
  env.write();
  const { monitor, logs } = fakeMonitor(env, { events: false, watchdog: 200, maxStuckWorkers: 2 });
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    await monitor.pollOnce();
    const spawned = logs.filter((l) => /abandoning/.test(l.msg)).length;
    assert.equal(spawned, 2);
    sink.clear();
    const t0 = Date.now();
    await monitor.pollOnce(); // two threads still stuck: no third
    assert.ok(Date.now() - t0 < 100);
    assert.equal(logs.filter((l) => /abandoning/.test(l.msg)).length, 2);
    const f = sink.findings[0];
    assert.equal(f.reason, 'NvidiaNVMLTimeout');
    assert.equal(f.entity, '');
    assert.match(f.message, /nvmlDeviceGetCount_v2 did not return .* 2 worker threads are still stuck/);
  } finally {
    await monitor.stop();
  }
});

test('a hung event wait is reported and the event worker replaced', async () => {
  const env = setup(2);
  const { monitor } = fakeMonitor(env, { eventWait: 100, watchdog: 300 });
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    env.cfg.hang = { nvmlEventSetWait_v2: 1_500 };
    env.write();
    // Generous bounds: a replacement worker thread loads its module afresh, slow on a loaded machine.
    const f = await sink.waitFor((x) => x.reason === 'NvidiaNVMLTimeout', 10_000);
    assert.equal(f.attrs?.function, 'nvmlEventSetWait_v2');
    assert.match(f.message, /event worker was replaced/);
    delete env.cfg.hang;
    env.write();
    const end = Date.now() + 20_000;
    while (monitor.snapshot().events.status !== 'running' && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    env.event({ gpu: 0, type: 8, data: 119 });
    await sink.waitFor((x) => x.reason === 'NvidiaXID119Error', 10_000);
  } finally {
    await monitor.stop();
  }
});

test('with a call stuck, stop() returns and exitNow() ends the process without waiting for it', () => {
  const env = setup(1);
  // Far longer than starting a tsx child takes on a loaded machine: exiting first proves it did not wait.
  env.gpu(0, { hang: { nvmlDeviceGetTemperature: 90_000 } });
  const script = `
    import { FakeNvmlEnv, RecordingSink, fakeMonitor } from ${JSON.stringify(fileURLToPath(new URL('./nvml-helpers.ts', import.meta.url)))};
    import { exitNow } from ${JSON.stringify(fileURLToPath(new URL('../../src/sources/nvml/client.ts', import.meta.url)))};
    const env = Object.assign(Object.create(FakeNvmlEnv.prototype), { libraryPath: ${JSON.stringify(env.libraryPath)}, sysRoot: ${JSON.stringify(env.sysRoot)} });
    const { monitor } = fakeMonitor(env, { watchdog: 200 });
    const sink = new RecordingSink();
    await monitor.start(sink);
    await sink.waitFor((f) => f.reason === 'NvidiaNVMLTimeout');
    const t = Date.now();
    await monitor.stop();
    console.log('stopped in', Date.now() - t, 'ms; stuck threads', monitor.stuckNvmlThreads);
    if (monitor.stuckNvmlThreads > 0) exitNow(0);
  `;
  const t0 = Date.now();
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    env: { ...process.env, FAKE_NVML_CONFIG: env.configPath },
    encoding: 'utf8',
    timeout: 80_000,
  });
  const took = Date.now() - t0;
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /stopped in \d+ ms; stuck threads [1-9]/);
  assert.ok(took < 60_000, `process exited after ${took} ms with a 90 s call stuck`);
});
