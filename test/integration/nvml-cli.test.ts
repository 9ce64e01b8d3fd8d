/**
 * `vigil gpu` (runGpuCommand) against the fake library.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { runGpuCommand, type GpuCommandReport } from '../../src/cli/index.ts';
import { FakeNvmlEnv } from './nvml-helpers.ts';

const envs: FakeNvmlEnv[] = [];
after(() => envs.forEach((e) => e.cleanup()));

async function run(
  env: FakeNvmlEnv,
  json: boolean,
  library = env.libraryPath,
  sysRoot = env.sysRoot,
): Promise<{ code: number; out: string }> {
  let out = '';
  const code = await runGpuCommand({ json, library, sysRoot, write: (t) => (out += t), config: { watchdog: 2_000 } });
  return { code, out };
}

test('--json: inventory, raw samples and every check, exit 0 when healthy', async () => {
  const env = new FakeNvmlEnv(2);
  envs.push(env);
  const { code, out } = await run(env, true);
  assert.equal(code, 0);
  const r = JSON.parse(out) as GpuCommandReport;
  assert.equal(r.exitCode, 0);
  assert.equal(r.state, 'running');
  assert.equal(r.driverVersion, '550.54.15');
  assert.equal(r.nvmlCount, 2);
  assert.equal(r.expectedCount, 2);
  assert.deepEqual(
    r.gpus.map((g) => [g.index, g.uuid, g.pci]),
    [
      [0, 'GPU-00000000-aaaa-bbbb-cccc-000000000000', '0000:18:00'],
      [1, 'GPU-00000001-aaaa-bbbb-cccc-000000000001', '0000:28:00'],
    ],
  );
  assert.equal(r.samples[0].temperature.current, 40);
  assert.equal(r.samples[1].pcie.maxWidth, 16);
  // 16 NVML checks and the GPU's sysfs AER counters (none in this fixture: skipped).
  assert.equal(r.checks.filter((c) => c.gpu === 0).length, 17);
  assert.equal(r.summary.fail, 0);
  assert.equal(r.events.status, 'off');
});

test('human output and exit 1 when a check fails', async () => {
  const env = new FakeNvmlEnv(2);
  envs.push(env);
  env.gpu(1, { remappedRows: { pending: 1 }, pcie: { width: 4 } });
  const { code, out } = await run(env, false);
  assert.equal(code, 1);
  assert.match(out, /NVIDIA GPUs on the PCI bus: 2/);
  assert.match(out, /Driver version: 550\.54\.15/);
  assert.match(out, /GPU 1 GPU-00000001-aaaa-bbbb-cccc-000000000001 \(0000:28:00\):/);
  assert.match(out, /FAIL {2}rowRemapPending +a memory row remap is pending/);
  assert.match(out, /FAIL {2}pcieLinkWidth +PCIe link runs at x4, below its maximum x16/);
  assert.match(out, /Summary: \d+ ok, 2 failing, \d+ skipped/);
});

test('exit 2 when NVML is unusable, 3 when there is no NVIDIA GPU', async () => {
  const env = new FakeNvmlEnv(1);
  envs.push(env);
  const missing = await run(env, true, join(env.dir, 'nope.so'));
  assert.equal(missing.code, 2);
  const r = JSON.parse(missing.out) as GpuCommandReport;
  assert.equal(r.nvmlUsable, false);
  assert.deepEqual(r.findings, [], 'a library that cannot be loaded is blindness, not a GPU fault');
  const none = await run(env, false, env.libraryPath, join(env.dir, 'no-sys'));
  assert.equal(none.code, 3);
  assert.match(none.out, /No NVIDIA display or 3D controller found/);
});
