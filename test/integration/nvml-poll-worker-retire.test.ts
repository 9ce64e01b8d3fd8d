/**
 * Between polls (minutes apart) the NVML poll worker's thread is ended while the event worker holds
 * NVML initialised: an idle GPU agent keeps one worker thread, not two. Events keep arriving while
 * the poll worker is gone, and the next poll starts a fresh one. Against the fake library.
 */
import { strict as assert } from 'node:assert';
import { after, test } from 'node:test';
import { Registry } from 'prom-client';
import { GpuMonitor, type GpuConfigInput } from '../../src/monitors/index.ts';
import { FakeNvmlEnv, RecordingSink } from './nvml-helpers.ts';

const envs: FakeNvmlEnv[] = [];
after(() => envs.forEach((e) => e.cleanup()));

async function until(what: string, pred: () => boolean, timeoutMs = 5_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function monitorFor(env: FakeNvmlEnv, config: GpuConfigInput = {}) {
  const logs: string[] = [];
  const monitor = new GpuMonitor({
    config: { libraryPath: env.libraryPath, watchdog: 2_000, eventWait: 100, ...config },
    registry: new Registry(),
    sysRoot: env.sysRoot,
    ownTimer: false,
    log: (_obj, msg) => logs.push(msg),
    pollWorkerIdleMs: 50,
  });
  return { monitor, logs };
}

test('with events on, the idle poll worker is retired; an Xid still arrives and the next poll runs on a fresh worker', async () => {
  const env = new FakeNvmlEnv(2);
  envs.push(env);
  const { monitor, logs } = monitorFor(env);
  const sink = new RecordingSink();
  try {
    await monitor.start(sink);
    assert.equal(monitor.snapshot().events.status, 'running');
    await until('the poll worker to retire', () => !monitor.pollWorker().running);
    assert.equal(monitor.pollWorker().retired, 1);
    env.event({ gpu: 1, type: 8, data: 79 });
    const f = await sink.waitFor((x) => x.reason.startsWith('NvidiaXID79'), 2_000);
    assert.equal(f.source, 'nvml');
    // The next poll: a fresh worker initialises NVML again (a reference count) and sees a new fault.
    const before = monitor.snapshot().lastPollAt;
    env.gpu(0, { pcie: { width: 4 } });
    await monitor.pollOnce();
    assert.ok(monitor.snapshot().lastPollAt !== before, 'the poll completed');
    assert.ok(
      monitor.snapshot().checks.some((c) => c.gpu === 0 && c.check === 'pcieLinkWidth' && c.status === 'fail'),
      'the fresh worker read the GPUs',
    );
    await until('the second poll worker to retire', () => monitor.pollWorker().retired === 2);
    assert.ok(!logs.some((m) => /abandon|hung/i.test(m)), `no worker was abandoned: ${logs.join(' | ')}`);
  } finally {
    await monitor.stop();
  }
});

test('with events off the poll worker stays (NVML would otherwise be set up afresh on every poll)', async () => {
  const env = new FakeNvmlEnv(2);
  envs.push(env);
  const { monitor } = monitorFor(env, { events: false });
  try {
    await monitor.start(new RecordingSink());
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(monitor.pollWorker(), { running: true, retired: 0 });
  } finally {
    await monitor.stop();
  }
});
