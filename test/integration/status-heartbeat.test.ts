/**
 * A dead agent no longer looks healthy (issue #22 point 12): a real `vigil run` writes its Node's
 * conditions to a real kube-apiserver with a 3 s heartbeat; `vigil status` shows the heartbeat's
 * age and, once the agent is killed, marks the node STALE while its conditions still say True.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { kernelLogOnlyConfig, kubeAgentArgs, startAgent } from '../helpers/agent-process.ts';
import { conditionsOf, startCluster, waitFor, type TestCluster } from '../helpers/cluster.ts';
import type { NodeStatus } from '../../src/cli/index.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

let cluster: TestCluster;
let dir: string;
before(async () => {
  cluster = await startCluster();
  dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-status-beat-'));
});
after(async () => {
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function status(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [path.join(ROOT, 'bin/vigil.js'), 'status', '--kubeconfig', cluster.adminKubeconfig, ...args], {
      cwd: ROOT,
      env: { ...process.env, NO_COLOR: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

async function row(node: string, heartbeatInterval: string): Promise<NodeStatus> {
  const r = await status(['--json', '--heartbeat-interval', heartbeatInterval]);
  assert.equal(r.code, 0, r.stderr);
  const found = (JSON.parse(r.stdout) as NodeStatus[]).find((n) => n.node === node);
  assert.ok(found, `${node} listed`);
  return found;
}

test(
  'vigil status: a live agent heartbeating every 3 s shows a fresh heartbeat; killed, its node is marked STALE after twice the interval while its conditions still say True',
  { timeout: 120_000 },
  async () => {
    const node = 'beat-dead';
    await cluster.createNode(node);
    const config = path.join(dir, 'vigil.yaml');
    writeFileSync(config, kernelLogOnlyConfig(['kubernetes:', '  mode: "on"', '  heartbeat: 3s', '  coalesce: 100ms']));
    const agent = await startAgent(kubeAgentArgs(cluster.vigilKubeconfig, node, path.join(dir, 'state'), config));
    try {
      await waitFor(
        'KernelReady on the Node',
        async () => conditionsOf(await cluster.readNode(node)).get('KernelReady')?.status === 'True',
        30_000,
      );
      // Two heartbeats later: the agent keeps the heartbeat fresh.
      await new Promise((r) => setTimeout(r, 7_000));
      const live = await row(node, '3s');
      assert.equal(live.stale, false, JSON.stringify(live));
      assert.ok(live.heartbeatAgeSeconds !== null && live.heartbeatAgeSeconds <= 5, String(live.heartbeatAgeSeconds));
      assert.equal(live.conditions.find((c) => c.type === 'KernelReady')?.status, 'True');
    } finally {
      // Killed, as a crash or a node that lost its agent: nothing is written on the way out.
      agent.child.kill('SIGKILL');
      await agent.stop();
    }
    const killedAt = Date.now();
    const dead = await waitFor(
      'the node marked STALE',
      async () => {
        const r = await row(node, '3s');
        return r.stale ? r : undefined;
      },
      30_000,
    );
    assert.ok(Date.now() - killedAt >= 3_000, 'not STALE before a heartbeat was missed');
    assert.ok(dead.heartbeatAgeSeconds! > 6, String(dead.heartbeatAgeSeconds));
    assert.equal(dead.conditions.find((c) => c.type === 'KernelReady')?.status, 'True', 'the dead agent left True behind');
    const table = await status(['--heartbeat-interval', '3s']);
    assert.equal(table.code, 0, table.stderr);
    const [header, ...rows] = table.stdout.trimEnd().split('\n');
    assert.equal(header.split(/\s{2,}/)[1], 'HEARTBEAT');
    const line = rows.find((l) => l.startsWith(`${node} `));
    assert.match(line ?? '', new RegExp(`^${node}\\s+\\d+s STALE\\s+True\\b`));
    // With the default interval (5m) the same node is not STALE yet: the flag must match the agents' kubernetes.heartbeat.
    assert.equal((await row(node, '5m')).stale, false);
  },
);
