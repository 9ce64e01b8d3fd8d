/**
 * GPU counter baselines across a real agent restart (the agent process, its state file, the real
 * koffi binding into the fake NVML): a count that grew while the agent was down is reported after
 * the restart, and counts that did not grow are not raised again, however high they are.
 */
import { strict as assert } from 'node:assert';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { startAgent, type AgentProcess, writeGpuConfig } from '../helpers/agent-process.ts';
import { FakeNvmlEnv } from './nvml-helpers.ts';

function writeConfig(env: FakeNvmlEnv): string {
  // Only the poll at start: each run judges once.
  return writeGpuConfig(env.dir, env.libraryPath, ['watchdog: 2s', 'pollInterval: 10m', 'events: false']);
}

/** The GPU monitor polls once inside start(), before the agent logs "started" (startAgent waits for it). */
function polledOnce(agent: AgentProcess): void {
  assert.ok(
    agent.lines.some((l) => l.msg === 'GPU inventory'),
    'the GPU monitor polled at start',
  );
}

interface Saved {
  engine?: { problems?: { reason: string }[] };
  gpu?: { bootId: string; gpus: Record<string, { ecc?: { value: number }; replay?: { value: number }; nvlink?: unknown }> };
}

/**
 * Stops the agent once its state file holds what the test needs (the agent saves after each poll).
 * Waiting on the file, not on a log line, keeps the test independent of when the agent installs
 * its SIGTERM handler (a moment after it logs "started").
 */
async function stopWhenSaved(agent: AgentProcess, stateDir: string, pred: (s: Saved) => boolean): Promise<Saved> {
  const end = Date.now() + 30_000;
  for (;;) {
    let s: Saved = {};
    try {
      s = JSON.parse(readFileSync(path.join(stateDir, 'state.json'), 'utf8')) as Saved;
    } catch {
      // not written yet
    }
    if (pred(s)) {
      await agent.waitFor((l) => l.event === 'mode', 10_000);
      await new Promise((r) => setTimeout(r, 2_000));
      await agent.stop();
      return s;
    }
    if (Date.now() > end) {
      await agent.stop();
      assert.fail(`the state file never held what was expected: ${JSON.stringify(s).slice(0, 500)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

const findings = (agent: AgentProcess) => agent.lines.filter((l) => l.event === 'finding').map((l) => l.reason);

test('after a restart, counters are judged from the persisted baseline: old counts stay quiet, growth while down is reported', async (t) => {
  const env = new FakeNvmlEnv(2);
  t.after(() => env.cleanup());
  // A healthy GPU with a long history: high lifetime counts everywhere.
  const crc = Array.from({ length: 18 }, () => [3, 1, 2_000_000, 50_000, 0]);
  env.gpu(1, { eccUncorrectedVolatile: 5, eccCorrectedVolatile: 700, pcie: { replay: 90_000 }, nvlink: { links: 18, errors: crc } });
  const stateDir = path.join(env.dir, 'state');
  mkdirSync(stateDir);
  const config = writeConfig(env);
  const args = ['--standalone', '--state-dir', stateDir, '--config', config];
  const fakeEnv = { FAKE_NVML_CONFIG: env.configPath };

  const uuid = String(env.cfg.gpus[1].uuid);
  const first = await startAgent(args, fakeEnv);
  let saved: Saved;
  try {
    polledOnce(first);
    assert.deepEqual(findings(first), [], 'lifetime totals raise nothing on a first start');
  } finally {
    saved = await stopWhenSaved(first, stateDir, (st) => st.gpu?.gpus[uuid]?.ecc?.value === 5);
  }
  assert.equal(saved.gpu?.bootId, readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim());
  assert.equal(saved.gpu?.gpus[uuid]?.replay?.value, 90_000);
  assert.ok(saved.gpu?.gpus[uuid]?.nvlink);

  // While the agent is down: one new double-bit error on GPU 1. Nothing else changes.
  env.gpu(1, { eccUncorrectedVolatile: 6 });
  const second = await startAgent(args, fakeEnv);
  try {
    const f = await second.waitFor((l) => l.event === 'finding' && l.reason === 'NvidiaDoubleBitError', 20_000);
    assert.equal(f.entity, 'gpu:0000:28:00');
    assert.match(String(f.msg), /grew from 5 to 6/);
    polledOnce(second);
    assert.deepEqual(findings(second), ['NvidiaDoubleBitError'], 'NVLink CRC, PCIe replay and SBE totals are not raised again');
    const health = (await second.get('/conditions')) as { conditions: { type: string; status: string }[] };
    assert.equal(health.conditions.find((c) => c.type === 'AcceleratedHardwareReady')?.status, 'False');
  } finally {
    await stopWhenSaved(
      second,
      stateDir,
      (st) => st.gpu?.gpus[uuid]?.ecc?.value === 6 && !!st.engine?.problems?.some((p) => p.reason === 'NvidiaDoubleBitError'),
    );
  }

  // A third start on the same counts: the DBE is known (untilReboot, restored), nothing new is raised.
  const third = await startAgent(args, fakeEnv);
  try {
    polledOnce(third);
    assert.deepEqual(findings(third), []);
  } finally {
    await third.stop();
  }
});

test('an agent whose NVML init fails after a driver upgrade reports AcceleratedHardwareReady Unknown naming the cause, never False', async (t) => {
  const env = new FakeNvmlEnv(2);
  env.cfg.rc = { nvmlInit_v2: 18 }; // LIB_RM_VERSION_MISMATCH: the library is newer than the loaded module
  env.write();
  const stateDir = path.join(env.dir, 'state');
  mkdirSync(stateDir);
  const agent = await startAgent(['--standalone', '--state-dir', stateDir, '--config', writeConfig(env)], {
    FAKE_NVML_CONFIG: env.configPath,
  });
  t.after(async () => {
    await agent.stop();
    env.cleanup();
  });
  const health = (await agent.get('/conditions')) as { conditions: { type: string; status: string; reason: string; message: string }[] };
  const accel = health.conditions.find((c) => c.type === 'AcceleratedHardwareReady');
  assert.equal(accel?.status, 'Unknown');
  assert.equal(accel?.reason, 'NvidiaMonitoringUnavailable');
  assert.match(accel?.message ?? '', /LIB_RM_VERSION_MISMATCH/);
  assert.equal((await agent.fetch('/healthz')).status, 503);
  assert.deepEqual(findings(agent), []);
});
