/**
 * End to end through the real agent process, the real koffi binding and the compiled fake NVML:
 * an Xid 48 event on GPU 2 turns AcceleratedHardwareReady False naming that GPU's UUID within a
 * second, and a hung NVML call does not delay a kernel-log finding.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { FakeNvmlEnv } from '../integration/nvml-helpers.ts';
import { startAgent, uniquePci, writeKmsg, writeGpuConfig } from '../helpers/agent-process.ts';
import type { NodeHealth } from '../../src/api/index.ts';
import { normalizePci } from '../../src/monitors/index.ts';

test('an NVML Xid 48 event on GPU 2 reaches /conditions with its UUID within a second, and a hung NVML call does not delay the kernel log', async (t) => {
  const env = new FakeNvmlEnv(4);
  t.after(() => env.cleanup());
  // The agent reads sysfs under the host root; the fake sysfs there lists the four GPUs.
  const hostRoot = env.dir;
  const stateDir = path.join(env.dir, 'state');
  mkdirSync(stateDir);
  const config = writeGpuConfig(hostRoot, env.libraryPath, ['watchdog: 2s', 'pollInterval: 1s'], { kernelLog: true });
  const agent = await startAgent(['--standalone', '--state-dir', stateDir, '--config', config], { FAKE_NVML_CONFIG: env.configPath });
  t.after(() => agent.stop());

  // Other tests share the real kernel log, so judge this GPU's entry, not the whole condition.
  const gpu2 = env.cfg.gpus[2];
  const entity = `gpu:${normalizePci(String(gpu2.pci))}`;
  const initial = (await agent.get('/conditions')) as NodeHealth;
  const accel0 = initial.conditions.find((c) => c.type === 'AcceleratedHardwareReady');
  assert.ok(accel0, 'GPUs found: the condition is managed');
  assert.ok(!accel0.active.some((p) => p.entity === entity));

  const sent = env.event({ gpu: 2, type: 8, data: 48 });
  let accel;
  for (;;) {
    const health = (await agent.get('/conditions')) as NodeHealth;
    accel = health.conditions.find((c) => c.type === 'AcceleratedHardwareReady');
    if (accel?.active.some((p) => p.entity === entity)) break;
    assert.ok(Date.now() - sent < 1000, 'AcceleratedHardwareReady did not turn False within one second');
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(Date.now() - sent < 1000);
  assert.equal(accel.status, 'False');
  const problem = accel.active.find((p) => p.entity === entity)!;
  assert.equal(problem.reason, 'NvidiaXID48Error');
  assert.equal(problem.attrs?.uuid, gpu2.uuid);
  assert.match(accel.message, new RegExp(String(gpu2.uuid)));

  // Now every NVML call hangs for 5 s; a kernel-log fault must still arrive at once.
  env.cfg.hang = { '*': 5000 };
  env.write();
  await new Promise((r) => setTimeout(r, 1500)); // a poll (every ~1 s) is now stuck in NVML
  const pci = uniquePci();
  const before = Date.now();
  writeKmsg(`NVRM: Xid (PCI:${pci}): 79, pid=1, name=probe, GPU has fallen off the bus.`);
  await agent.waitFor((l) => l.reason === 'NvidiaXID79Error' && l.entity === `gpu:${pci}`, 3000);
  assert.ok(Date.now() - before < 1000, 'the kernel-log finding waited on NVML');
  // And NVML really was hung: the watchdog reports it.
  await agent.waitFor((l) => l.reason === 'NvidiaNVMLTimeout', 10_000);
  env.cfg.hang = {};
  env.write();
});
