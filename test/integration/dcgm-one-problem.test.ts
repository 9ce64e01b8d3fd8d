/**
 * One fault, three ways, one problem: an Xid 79 on one GPU seen by DCGM (policy callback from the
 * fake DCGM's own thread), by NVML (an event from the fake NVML through the event worker) and by
 * the kernel log (the real /dev/kmsg), all through the one pipeline into the real engine, gives
 * exactly one active problem on AcceleratedHardwareReady. And a lost host engine makes that
 * condition Unknown, never False.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { DCGM_COND } from '../../native/fake-dcgm/build.ts';
import type { Finding, FindingSink } from '../../src/api/index.ts';
import { createEngine } from '../../src/app/index.ts';
import { loadRuleFiles } from '../../src/monitors/index.ts';
import { loadConfig } from '../../src/settings/index.ts';
import { GpuMonitor, KernelLogMonitor } from '../../src/monitors/index.ts';
import { allConditions, createPipeline, declaredConditions, kernelLogClassifierOptions } from '../../src/pipeline/index.ts';
import { KmsgReader } from '../../src/sources/index.ts';
import { kernelLogOnlyConfig, startAgent, uniquePci, writeKmsg, writeGpuConfig } from '../helpers/agent-process.ts';
import { FakeDcgmEnv, dcgmConfig } from './dcgm-helpers.ts';
import { fakeGpus } from '../../native/fake-nvml/build.ts';

async function until(what: string, pred: () => boolean, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The engine and pipeline as the agent wires them, on a default config. */
function live(env: FakeDcgmEnv) {
  const file = path.join(env.dir, 'vigil.yaml');
  writeFileSync(file, kernelLogOnlyConfig());
  const config = loadConfig(file);
  const rules = loadRuleFiles(config.kernelLog);
  const registry = new Registry();
  const engine = createEngine(config, { bootId: 'dcgm-test', conditions: allConditions(config, declaredConditions(rules)), registry });
  const seen: Finding[] = [];
  engine.on((e) => {
    if (e.kind === 'finding') seen.push(e.finding);
  });
  const accel = () => engine.health().conditions.find((c) => c.type === 'AcceleratedHardwareReady')!;
  return { config, rules, registry, engine, seen, accel, pipeline: createPipeline({ config, registry, engine }) };
}

function gpuMonitor(env: FakeDcgmEnv, registry: Registry, config: Record<string, unknown>): GpuMonitor {
  return new GpuMonitor({
    config: { libraryPath: env.libraryPath, watchdog: 2_000, eventWait: 100, fatalXids: [79], ...config },
    registry,
    sysRoot: env.sysRoot,
    ownTimer: false,
  });
}

test('an Xid 79 seen through DCGM, NVML and the kernel log is exactly one active problem', { timeout: 60_000 }, async (t) => {
  // A GPU on a PCI address no other test uses, so other tests' kernel-log faults cannot match it.
  const pci = uniquePci();
  const [gpu] = fakeGpus(1);
  const [dom, bus] = pci.split(':');
  const env = new FakeDcgmEnv([{ ...gpu, pci: `0000${dom.toUpperCase()}:${bus.toUpperCase()}:00.0` }]);
  const token = `dcgm${randomBytes(5).toString('hex')}`;
  const { config, rules, registry, seen, accel, pipeline } = live(env);
  const viaDcgm = gpuMonitor(env, registry, dcgmConfig(env, 'dcgm'));
  const viaNvml = gpuMonitor(env, new Registry(), { source: 'nvml' });
  const kernel = new KernelLogMonitor({
    reader: { path: '/dev/kmsg', lookbackMs: 0 },
    classifier: kernelLogClassifierOptions(config, rules),
    registry,
    // The ring is shared with every other test: only this test's record goes on.
    createReader: (o) => new KmsgReader({ ...o, onRecords: (recs) => o.onRecords?.(recs.filter((r) => r.message.includes(token))) }),
  });
  t.after(async () => {
    await Promise.all([viaDcgm.stop(), viaNvml.stop(), kernel.stop()]);
    env.cleanup();
  });
  const arrived: Finding[] = [];
  const tee: FindingSink = {
    finding: (f) => {
      arrived.push(f);
      pipeline.finding(f);
    },
    healthy: (h) => pipeline.healthy(h),
    source: (s) => pipeline.source(s),
  };
  await viaDcgm.start(tee);
  await viaNvml.start(tee);
  kernel.start(tee);
  assert.equal(viaDcgm.snapshot().push?.source, 'dcgm');
  assert.equal(viaNvml.snapshot().events.status, 'running');
  const entity = `gpu:${pci}`;

  env.violation(0, { condition: DCGM_COND.XID, a: 79 });
  env.event({ gpu: 0, type: 8, data: 79 });
  writeKmsg(`NVRM: Xid (PCI:${pci}): 79, pid=1, name=${token}, GPU has fallen off the bus.`, 4);
  // Every source's sighting has gone through the pipeline into the engine.
  await until('the Xid from all three sources', () =>
    ['dcgm', 'nvml', 'kmsg'].every((s) => arrived.some((f) => f.source === s && f.reason === 'NvidiaXID79Error' && f.entity === entity)),
  );
  assert.equal(seen.filter((f) => f.reason === 'NvidiaXID79Error').length, 1, 'the engine reported the fault once');
  const c = accel();
  assert.equal(c.status, 'False');
  assert.deepEqual(
    c.active.map((p) => [p.reason, p.entity]),
    [['NvidiaXID79Error', entity]],
  );
});

test(
  'a lost DCGM host engine makes AcceleratedHardwareReady Unknown (DcgmHostEngineUnavailable), never False',
  { timeout: 60_000 },
  async (t) => {
    const env = new FakeDcgmEnv(2);
    const { registry, accel, pipeline } = live(env);
    const monitor = gpuMonitor(env, registry, dcgmConfig(env, 'dcgm'));
    t.after(async () => {
      await monitor.stop();
      env.cleanup();
    });
    await monitor.start(pipeline);
    await monitor.pollOnce(); // NVML polls: the GPUs are healthy
    assert.equal(accel().status, 'True');
    env.dcgm.lost = true;
    env.writeDcgm();
    await until('the condition to go Unknown', () => accel().status === 'Unknown');
    const c = accel();
    assert.equal(c.reason, 'DcgmHostEngineUnavailable');
    assert.match(c.message, /CONNECTION_NOT_VALID/);
    assert.deepEqual(c.active, []);
    // NVML still polls and sees healthy GPUs, which must not hide that DCGM is blind.
    await monitor.pollOnce();
    assert.equal(accel().status, 'Unknown');
    env.dcgm.lost = false;
    env.writeDcgm();
    await until('the condition to come back', () => accel().status === 'True');
  },
);

test(
  'the agent says on /healthz that DCGM pushes, and a lost host engine fails /healthz with Unknown, not False',
  { timeout: 120_000 },
  async (t) => {
    const env = new FakeDcgmEnv(2);
    const file = writeGpuConfig(env.dir, env.libraryPath, [
      'source: dcgm',
      `dcgm: {libraryPath: ${env.dcgmLibrary}, probeInterval: 100ms}`,
    ]);
    const agent = await startAgent(['--standalone', '--state-dir', path.join(env.dir, 'state'), '--config', file], {
      FAKE_NVML_CONFIG: env.configPath,
      FAKE_DCGM_CONFIG: env.dcgmScript,
    });
    t.after(async () => {
      await agent.stop();
      env.cleanup();
    });
    type Healthz = { components: Record<string, { state: string; message: string }> };
    const ok = await agent.fetch('/healthz');
    assert.equal(ok.status, 200);
    assert.match((ok.body as Healthz).components.gpu?.message ?? '', /push: DCGM \(running\)/);
    env.dcgm.lost = true;
    env.writeDcgm();
    await agent.waitFor((l) => l.msg === 'DCGM host engine connection lost', 20_000);
    type Conditions = { conditions: { type: string; status: string; reason: string }[] };
    const end = Date.now() + 10_000;
    let accel: Conditions['conditions'][number] | undefined;
    while (Date.now() < end) {
      accel = ((await agent.get('/conditions')) as Conditions).conditions.find((c) => c.type === 'AcceleratedHardwareReady');
      if (accel?.status === 'Unknown') break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(accel?.status, 'Unknown');
    assert.equal(accel?.reason, 'DcgmHostEngineUnavailable');
    const down = await agent.fetch('/healthz');
    assert.equal(down.status, 503);
    assert.match(JSON.stringify(down.body), /gpu\.dcgm/);
  },
);
