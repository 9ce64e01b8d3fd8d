/**
 * GPU counter baselines across a real agent restart (the agent process, its state file, the real
 * koffi binding into the fake NVML): a count that grew while the agent was down is reported after
 * the restart, and counts that did not grow are not raised again, however high they are.
 */
import { strict as assert } from 'node:assert';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { startAgent, type AgentProcess } from '../helpers/agent-process.ts';
import { FakeNvmlEnv } from './nvml-helpers.ts';

function writeConfig(env: FakeNvmlEnv): string {
  const file = path.join(env.dir, 'vigil.yaml');
  writeFileSync(
    file,
    [
      'kernelLog: {enabled: false}',
      'gpu:',
      `  libraryPath: ${env.libraryPath}`,
      '  watchdog: 2s',
      '  pollInterval: 10m', // only the poll at start: each run judges once
      '  events: false',
      'monitors:',
      `  hostRoot: ${env.dir}`,
      '  kernel: {enabled: false}',
      '  networking: {enabled: false}',
      '  storage: {enabled: false}',
      '  runtime: {enabled: false}',
      '',
    ].join('\n'),
  );
  return file;
}

/** The GPU monitor polls once inside start(), before the agent logs "started" (startAgent waits for it). */
function polledOnce(agent: AgentProcess): void {
  assert.ok(
    agent.lines.some((l) => l.msg === 'GPU inventory'),
    'the GPU monitor polled at start',
  );
}

/**
 * Stops the agent cleanly. Its SIGTERM handler is installed only after the diagnostics start, a
 * moment after "started" and "mode" are logged (a SIGTERM before then kills it unsaved), and
 * nothing is logged once it is; so wait for the mode line and then a few seconds.
 */
async function stopCleanly(agent: AgentProcess): Promise<number | null> {
  await agent.waitFor((l) => l.event === 'mode', 10_000);
  await new Promise((r) => setTimeout(r, 4_000));
  return agent.stop();
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

  const first = await startAgent(args, fakeEnv);
  try {
    polledOnce(first);
    assert.deepEqual(findings(first), [], 'lifetime totals raise nothing on a first start');
  } finally {
    assert.equal(await stopCleanly(first), 0);
  }
  const saved = JSON.parse(readFileSync(path.join(stateDir, 'state.json'), 'utf8')) as {
    gpu?: { bootId: string; gpus: Record<string, { ecc?: { value: number }; replay?: { value: number }; nvlink?: unknown }> };
  };
  const uuid = String(env.cfg.gpus[1].uuid);
  assert.equal(saved.gpu?.bootId, readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim());
  assert.equal(saved.gpu?.gpus[uuid]?.ecc?.value, 5);
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
    assert.equal(await stopCleanly(second), 0);
  }

  // A third start on the same counts: the DBE is known (untilReboot, restored), nothing new is raised.
  const third = await startAgent(args, fakeEnv);
  try {
    polledOnce(third);
    assert.deepEqual(findings(third), []);
  } finally {
    assert.equal(await stopCleanly(third), 0);
  }
});
