/**
 * `kubectl vigil status` with the real kubectl (built from k8s.io/kubernetes at the API server's
 * version) finding bin/kubectl-vigil on the PATH, against a real kube-apiserver whose Nodes carry
 * Vigil's conditions (written to nodes/status as the agent does).
 */
import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { startCluster, waitFor, type TestCluster } from '../helpers/cluster.ts';
import { KUBECTL, ROOT, ensureTools, ok, run } from './tools.ts';
import type { NodeStatus } from '../../src/cli/status-command.ts';

before(() => ensureTools());

const VIGIL_TYPES = ['KernelReady', 'NetworkingReady', 'StorageReady', 'ContainerRuntimeReady', 'AcceleratedHardwareReady'];
const ESC = '\x1b[';

function condition(type: string, status: string, reason: string, minutesAgo: number): k8s.V1NodeCondition {
  const t = new Date(Date.now() - minutesAgo * 60_000);
  return { type, status, reason, message: `${type} ${reason}`, lastHeartbeatTime: t, lastTransitionTime: t };
}

function healthy(except: Record<string, k8s.V1NodeCondition> = {}): k8s.V1NodeCondition[] {
  return VIGIL_TYPES.map((type) => except[type] ?? condition(type, 'True', `${type.replace(/Ready$/, '')}IsReady`, 60));
}

/** PATH with kubectl and the plugin (as `npm install -g` or krew would put it) first. */
function pluginPath(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-plugin-'));
  symlinkSync(path.join(ROOT, 'bin/kubectl-vigil'), path.join(dir, 'kubectl-vigil'));
  symlinkSync(KUBECTL, path.join(dir, 'kubectl'));
  return `${dir}:${process.env.PATH}`;
}

async function fleet(): Promise<TestCluster> {
  const cluster = await startCluster();
  await cluster.createNode('node-a', healthy());
  await cluster.createNode(
    'gpu-b',
    healthy({ AcceleratedHardwareReady: condition('AcceleratedHardwareReady', 'False', 'NvidiaXID79Error', 12) }),
  );
  await cluster.createNode('node-c', healthy({ KernelReady: condition('KernelReady', 'Unknown', 'KernelLogUnavailable', 3) }));
  await cluster.admin.core.patchNode(
    { name: 'gpu-b', body: { metadata: { labels: { pool: 'gpu' } } } },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
  );
  await cluster.admin.core.patchNode(
    { name: 'node-a', body: { spec: { taints: [{ key: 'karpenter.sh/disrupted', effect: 'NoSchedule' }] } } },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
  );
  await cluster.admin.core.patchNode(
    { name: 'node-c', body: { spec: { unschedulable: true } } },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
  );
  return cluster;
}

test('kubectl vigil status: real kubectl runs the plugin from the PATH and shows each node, its conditions, failing time, repair and quarantine', async (t) => {
  const cluster = await fleet();
  t.after(() => cluster.stop());
  const env = { PATH: pluginPath(), KUBECONFIG: cluster.adminKubeconfig, NO_COLOR: '' };

  await t.test('kubectl lists the plugin', () => {
    const out = ok(run('kubectl', ['plugin', 'list'], { env }), 'kubectl plugin list');
    assert.match(out, /kubectl-vigil\b/);
  });

  await t.test('a table, plain when piped: one row per node', () => {
    const out = ok(run('kubectl', ['vigil', 'status'], { env }), 'kubectl vigil status');
    assert.ok(!out.includes(ESC), 'no colour codes in a pipe');
    const [header, ...rows] = out.trimEnd().split('\n');
    assert.deepEqual(header.split(/\s{2,}/), ['NODE', ...VIGIL_TYPES, 'FAILING FOR', 'REPAIR', 'QUARANTINE']);
    assert.deepEqual(
      rows.map((r) => r.split(/\s{2,}/)),
      [
        ['gpu-b', 'True', 'True', 'True', 'True', 'False NvidiaXID79Error', '12m', 'pending', '-'],
        ['node-a', 'True', 'True', 'True', 'True', 'True', '-', '-', 'tainted karpenter.sh/disrupted'],
        ['node-c', 'Unknown KernelLogUnavailable', 'True', 'True', 'True', 'True', '3m', '-', 'cordoned'],
      ],
    );
  });

  await t.test('--json with --selector: only the matching node, with reasons and how long it has been failing', () => {
    const out = ok(
      run('kubectl', ['vigil', 'status', '--json', '--selector', 'pool=gpu', '--kubeconfig', cluster.adminKubeconfig], { env }),
      'json',
    );
    const rows = JSON.parse(out) as NodeStatus[];
    assert.deepEqual(
      rows.map((r) => r.node),
      ['gpu-b'],
    );
    const gpu = rows[0];
    assert.equal(gpu.repairPending, true);
    assert.equal(gpu.quarantined, false);
    assert.ok(gpu.failingForSeconds! >= 12 * 60 && gpu.failingForSeconds! < 14 * 60, String(gpu.failingForSeconds));
    const accel = gpu.conditions.find((c) => c.type === 'AcceleratedHardwareReady')!;
    assert.deepEqual([accel.status, accel.reason], ['False', 'NvidiaXID79Error']);
  });

  await t.test('colour on a terminal', () => {
    // `script` gives the plugin a pseudo-terminal, as an operator's shell would.
    const out = ok(run('script', ['-qec', 'kubectl vigil status', '/dev/null'], { env }), 'script');
    assert.ok(out.includes(`${ESC}31mFalse NvidiaXID79Error`), JSON.stringify(out.slice(0, 600)));
    assert.ok(out.includes(`${ESC}32mTrue`));
  });

  await t.test('--watch prints a new table when a condition changes', async () => {
    const child = spawn('kubectl', ['vigil', 'status', '--watch', '--interval', '1', '--selector', 'pool=gpu'], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    t.after(async () => {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    await waitFor('the first table', () => out.includes('False NvidiaXID79Error'), 30_000);
    await cluster.admin.core.patchNodeStatus(
      { name: 'gpu-b', body: { status: { conditions: [condition('AcceleratedHardwareReady', 'True', 'NvidiaGpuIsReady', 0)] } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
    );
    await waitFor('the table after the repair', () => /^gpu-b\s+True\s+True\s+True\s+True\s+True\s+-\s+-\s+-$/m.test(out), 30_000);
  });
});
