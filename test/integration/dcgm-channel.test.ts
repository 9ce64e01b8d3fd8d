/**
 * The DCGM push channel through the real koffi binding into the fake DCGM library, whose own
 * thread calls the policy callback: each policy kind becomes the catalog finding NVML and the
 * kernel log give; auto falls back to NVML when DCGM is absent or refuses; a lost host engine is
 * Unknown (a source down), never a finding, and reconnects.
 */
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { DCGM_COND } from '../../native/fake-dcgm/build.ts';
import { runGpuCommand, type GpuCommandReport } from '../../src/cli/index.ts';
import { nvmlThreadsLeft } from '../../src/sources/index.ts';
import { FakeDcgmEnv, dcgmConfig } from './dcgm-helpers.ts';
import { RecordingSink, fakeMonitor, slow } from './nvml-helpers.ts';

async function until(what: string, pred: () => boolean, timeoutMs = 5_000): Promise<void> {
  const end = Date.now() + slow(timeoutMs);
  while (!pred()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('each DCGM policy kind becomes the same catalog reason on the GPU entity NVML uses', async (t) => {
  const env = new FakeDcgmEnv(2);
  const { monitor } = fakeMonitor(env, { ...dcgmConfig(env, 'dcgm'), fatalXids: [79] });
  t.after(async () => {
    await monitor.stop();
    env.cleanup();
  });
  const sink = new RecordingSink();
  await monitor.start(sink);
  const snap = monitor.snapshot();
  assert.equal(snap.push?.source, 'dcgm');
  assert.equal(snap.push?.dcgm?.state, 'running');
  assert.equal(snap.events.status, 'off', 'NVML events are not subscribed while DCGM pushes');
  const entity = `gpu:${monitor.inventory()[1].pci}`;
  env.violation(1, { condition: DCGM_COND.XID, a: 79 });
  env.violation(1, { condition: DCGM_COND.XID, a: 31 });
  env.violation(1, { condition: DCGM_COND.DBE, a: 2 });
  env.violation(1, { condition: DCGM_COND.PCI, a: 120 });
  env.violation(1, { condition: DCGM_COND.MAX_PAGES_RETIRED, a: 10, b: 55 });
  env.violation(1, { condition: DCGM_COND.THERMAL, a: 97 });
  env.violation(1, { condition: DCGM_COND.POWER, a: 720 });
  env.violation(1, { condition: DCGM_COND.NVLINK, a: 60, b: 7 });
  await sink.waitFor((f) => f.reason === 'NvidiaNVLinkErrorCounters');
  assert.deepEqual(
    sink.findings.map((f) => [f.reason, f.entity, f.source]),
    [
      ['NvidiaXID79Error', entity, 'dcgm'],
      ['NvidiaXID31Warning', entity, 'dcgm'],
      ['NvidiaDoubleBitError', entity, 'dcgm'],
      ['NvidiaPCIeError', entity, 'dcgm'],
      ['NvidiaPageRetirement', entity, 'dcgm'],
      ['NvidiaThermalError', entity, 'dcgm'],
      ['NvidiaPowerError', entity, 'dcgm'],
      ['NvidiaNVLinkErrorCounters', entity, 'dcgm'],
    ],
  );
  const [xid] = sink.findings;
  assert.equal(xid.attrs?.index, 1, 'matched to NVML GPU 1 by PCI address, not by DCGM gpuId');
  assert.equal(xid.attrs?.dcgmGpuId, env.dcgmId(1));
  assert.equal(xid.attrs?.uuid, env.cfg.gpus[1].uuid);
  assert.match(sink.findings[4].message, /65 retired pages \(10 SBE, 55 DBE\)/);
  assert.deepEqual(
    sink.sources.filter((x) => x.component === 'gpu.dcgm' && !x.up),
    [],
    'a connected DCGM never reports itself blind',
  );
  // The DCGM worker thread exits on stop (koffi's callback would otherwise keep it alive, and the
  // process could not exit without _exit()).
  await monitor.stop();
  await until('the DCGM worker to exit', () => nvmlThreadsLeft() === 0);
});

for (const [name, patch] of [
  ['the DCGM library is absent', { libraryPath: '/nonexistent/libdcgm.so.4' }],
  ['the host engine refuses the connection', {}],
] as const) {
  test(`auto falls back to NVML events when ${name}, and says so`, async (t) => {
    const env = new FakeDcgmEnv(2);
    if (!('libraryPath' in patch)) {
      env.dcgm.rc = { dcgmConnect_v2: -21 };
      env.writeDcgm();
    }
    const { monitor, logs } = fakeMonitor(env, dcgmConfig(env, 'auto', patch));
    t.after(async () => {
      await monitor.stop();
      env.cleanup();
    });
    const sink = new RecordingSink();
    await monitor.start(sink);
    const snap = monitor.snapshot();
    assert.equal(snap.push?.source, 'nvml');
    assert.match(snap.push?.why ?? '', 'libraryPath' in patch ? /cannot load the DCGM library/ : /CONNECTION_NOT_VALID/);
    assert.equal(snap.events.status, 'running');
    assert.ok(logs.some((l) => l.msg === 'GPU push channel chosen' && l.obj.push === 'nvml'));
    assert.deepEqual(
      sink.sources.filter((s) => s.component === 'gpu.dcgm'),
      [],
      'a DCGM that auto did not choose never makes the GPU Unknown',
    );
    env.event({ gpu: 0, type: 8, data: 48 });
    const f = await sink.waitFor((x) => x.reason === 'NvidiaXID48Error');
    assert.equal(f.source, 'nvml');
  });
}

for (const mode of ['hostengine', 'embedded'] as const) {
  test(`auto chooses DCGM when its library loads and the engine answers (${mode})`, async (t) => {
    const env = new FakeDcgmEnv(1);
    if (mode === 'embedded') {
      env.dcgm.rc = { dcgmConnect_v2: -21 }; // no host engine: only dcgmStartEmbedded works
      env.writeDcgm();
    }
    const { monitor } = fakeMonitor(env, dcgmConfig(env, 'auto', { mode }));
    t.after(async () => {
      await monitor.stop();
      env.cleanup();
    });
    const sink = new RecordingSink();
    await monitor.start(sink);
    assert.equal(monitor.snapshot().push?.source, 'dcgm');
    env.violation(0, { condition: DCGM_COND.DBE, a: 1 });
    assert.equal((await sink.waitFor((f) => f.reason === 'NvidiaDoubleBitError')).source, 'dcgm');
  });
}

test('a lost host-engine connection is a source down (DcgmHostEngineUnavailable), not a GPU fault; it reconnects', async (t) => {
  const env = new FakeDcgmEnv(2);
  const { monitor, logs } = fakeMonitor(env, dcgmConfig(env, 'dcgm'));
  t.after(async () => {
    await monitor.stop();
    env.cleanup();
  });
  const sink = new RecordingSink();
  await monitor.start(sink);
  env.dcgm.lost = true;
  env.writeDcgm();
  await until('the source to go down', () => sink.sources.some((s) => !s.up));
  const down = sink.sources.find((s) => !s.up)!;
  assert.equal(down.component, 'gpu.dcgm');
  assert.deepEqual(down.conditions, ['AcceleratedHardwareReady']);
  assert.equal(down.reason, 'DcgmHostEngineUnavailable');
  assert.match(down.message ?? '', /CONNECTION_NOT_VALID \(-21\)/);
  assert.equal(monitor.snapshot().push?.dcgm?.state, 'lost');
  assert.deepEqual(sink.findings, [], 'no GPU finding for a monitoring failure');
  assert.ok(logs.some((l) => l.msg === 'DCGM host engine connection lost'));
  // The engine comes back: the channel reconnects (1 s backoff) and violations flow again.
  env.dcgm.lost = false;
  env.writeDcgm();
  await until('the source to come back', () => sink.sources.at(-1)?.up === true, 10_000);
  env.violation(0, { condition: DCGM_COND.XID, a: 79 });
  await sink.waitFor((f) => f.reason === 'NvidiaXID79Error');
});

test('vigil gpu says which push channel is in use, for people and in --json', async (t) => {
  const env = new FakeDcgmEnv(1);
  t.after(() => env.cleanup());
  const run = async (json: boolean, source: 'dcgm' | 'auto', dcgm: Record<string, unknown> = {}) => {
    let out = '';
    await runGpuCommand({
      json,
      library: env.libraryPath,
      sysRoot: env.sysRoot,
      write: (s) => (out += s),
      config: { watchdog: slow(2_000), ...dcgmConfig(env, source, dcgm) },
    });
    return out;
  };
  assert.match(await run(false, 'dcgm'), /^Push channel: DCGM \(gpu\.source dcgm: DCGM, policy callbacks registered\)$/m);
  const report = JSON.parse(await run(true, 'auto', { libraryPath: '/nonexistent/libdcgm.so.4' })) as GpuCommandReport;
  assert.equal(report.push?.source, 'nvml');
  assert.match(report.push?.why ?? '', /^gpu\.source auto: DCGM unusable \(cannot load the DCGM library/);
});
