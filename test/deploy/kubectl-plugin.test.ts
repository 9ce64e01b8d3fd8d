/**
 * `kubectl vigil status` with the real kubectl (built from k8s.io/kubernetes at the API server's
 * version) finding bin/kubectl-vigil on the PATH, against a real kube-apiserver whose Nodes carry
 * Vigil's conditions (written to nodes/status as the agent does): each node's heartbeat age, STALE
 * past twice the heartbeat interval (issue #22 point 12), and --context / --server as in kubectl.
 */
import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import * as k8s from '@kubernetes/client-node';
import YAML from 'yaml';
import { startCluster, waitFor, type TestCluster } from '../helpers/cluster.ts';
import { KUBECTL, ROOT, ensureTools, ok, run } from './tools.ts';
import type { NodeStatus } from '../../src/cli/index.ts';
import { tempDir } from '../helpers/temp-dir.ts';

before(() => ensureTools());

const VIGIL_TYPES = ['KernelReady', 'NetworkingReady', 'StorageReady', 'ContainerRuntimeReady', 'AcceleratedHardwareReady'];
const ESC = '\x1b[';

/** A condition that changed `minutesAgo`, last written by its agent `beatMinutesAgo` (1 minute: a live agent). */
function condition(type: string, status: string, reason: string, minutesAgo: number, beatMinutesAgo = 1): k8s.V1NodeCondition {
  const t = new Date(Date.now() - minutesAgo * 60_000);
  return {
    type,
    status,
    reason,
    message: `${type} ${reason}`,
    lastHeartbeatTime: new Date(Date.now() - beatMinutesAgo * 60_000),
    lastTransitionTime: t,
  };
}

function healthy(except: Record<string, k8s.V1NodeCondition> = {}, beatMinutesAgo = 1): k8s.V1NodeCondition[] {
  return VIGIL_TYPES.map((type) => except[type] ?? condition(type, 'True', `${type.replace(/Ready$/, '')}IsReady`, 60, beatMinutesAgo));
}

/** PATH with kubectl and the plugin (as `npm install -g` or krew would put it) first. */
function pluginPath(): string {
  const dir = tempDir('vigil-plugin-');
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
  // Its agent was stopped 12 minutes ago: every condition still says True, the heartbeat is old.
  await cluster.createNode('node-d', healthy({}, 12));
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
    assert.deepEqual(header.split(/\s{2,}/), ['NODE', 'HEARTBEAT', ...VIGIL_TYPES, 'FAILING FOR', 'REPAIR', 'QUARANTINE']);
    assert.deepEqual(
      rows.map((r) => r.split(/\s{2,}/)),
      [
        ['gpu-b', '1m', 'True', 'True', 'True', 'True', 'False NvidiaXID79Error', '12m', 'pending', '-'],
        ['node-a', '1m', 'True', 'True', 'True', 'True', 'True', '-', '-', 'tainted karpenter.sh/disrupted'],
        ['node-c', '1m', 'Unknown KernelLogUnavailable', 'True', 'True', 'True', 'True', '3m', '-', 'cordoned'],
        ['node-d', '12m STALE', 'True', 'True', 'True', 'True', 'True', '-', '-', '-'],
      ],
    );
  });

  await t.test("--heartbeat-interval: STALE past twice the agents' interval; 0 never marks a node", () => {
    const rows = (args: string[]) =>
      (JSON.parse(ok(run('kubectl', ['vigil', 'status', '--json', ...args], { env }), args.join(' '))) as NodeStatus[]).map((r) => [
        r.node,
        r.stale,
      ]);
    // The default (5m, the agent's kubernetes.heartbeat default): only the 12-minute-old heartbeat.
    assert.deepEqual(rows([]), [
      ['gpu-b', false],
      ['node-a', false],
      ['node-c', false],
      ['node-d', true],
    ]);
    // Agents that beat every 20 s: a minute without one is three missed beats.
    assert.deepEqual(rows(['--heartbeat-interval', '20s']), [
      ['gpu-b', true],
      ['node-a', true],
      ['node-c', true],
      ['node-d', true],
    ]);
    assert.deepEqual(rows(['--heartbeat-interval', '10m']), [
      ['gpu-b', false],
      ['node-a', false],
      ['node-c', false],
      ['node-d', false],
    ]);
    assert.ok(rows(['--heartbeat-interval', '0']).every(([, stale]) => stale === false));
    const d = (JSON.parse(ok(run('kubectl', ['vigil', 'status', '--json'], { env }), 'json')) as NodeStatus[]).find(
      (r) => r.node === 'node-d',
    )!;
    assert.ok(d.heartbeatAgeSeconds! >= 12 * 60 && d.heartbeatAgeSeconds! < 14 * 60, String(d.heartbeatAgeSeconds));
    assert.ok(Math.abs(Date.parse(d.lastHeartbeatTime!) - (Date.now() - 12 * 60_000)) < 120_000, String(d.lastHeartbeatTime));
    const bad = run('kubectl', ['vigil', 'status', '--heartbeat-interval', 'soon'], { env });
    assert.equal(bad.code, 2);
    assert.match(bad.err, /--heartbeat-interval must be a duration/);
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
    assert.ok(out.includes(`${ESC}33m12m STALE`), 'STALE stands out');
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
    await waitFor('the table after the repair', () => /^gpu-b\s+\S+\s+True\s+True\s+True\s+True\s+True\s+-\s+-\s+-$/m.test(out), 30_000);
  });
});

interface Kubeconfig {
  clusters: { name: string; cluster: Record<string, unknown> & { server: string } }[];
  contexts: { name: string; context: { cluster: string; user: string } }[];
  users: { name: string; user: unknown }[];
  'current-context': string;
}

test('kubectl vigil status --context and --server act as in kubectl: another context of the kubeconfig, another API server address with the same credentials', async (t) => {
  const cluster = await startCluster();
  t.after(() => cluster.stop());
  await cluster.createNode('node-a', healthy());
  const admin = YAML.parse(readFileSync(cluster.adminKubeconfig, 'utf8')) as Kubeconfig;
  const ctx = admin.contexts.find((c) => c.name === admin['current-context'])!;
  const real = admin.clusters.find((c) => c.name === ctx.context.cluster)!;
  // Nothing listens on port 1 of loopback: a request sent there is refused at once, nothing leaves the host.
  const nowhere = 'https://127.0.0.1:1';
  const dir = tempDir('vigil-plugin-kc-');
  const write = (name: string, doc: Kubeconfig) => {
    const file = path.join(dir, name);
    writeFileSync(file, YAML.stringify(doc), { mode: 0o600 });
    return file;
  };
  // Current context points at nowhere; the admin context is there under its own name.
  const twoContexts = write('two-contexts', {
    ...admin,
    clusters: [...admin.clusters, { name: 'nowhere', cluster: { server: nowhere, 'insecure-skip-tls-verify': true } }],
    contexts: [...admin.contexts, { name: 'broken', context: { cluster: 'nowhere', user: ctx.context.user } }],
    'current-context': 'broken',
  });
  // The cluster's address is wrong; its CA and the user's token are right.
  const moved = write('moved', {
    ...admin,
    clusters: admin.clusters.map((c) => (c.name === real.name ? { ...c, cluster: { ...c.cluster, server: nowhere } } : c)),
  });
  const env = (kubeconfig: string) => ({ PATH: pluginPath(), KUBECONFIG: kubeconfig, NO_COLOR: '' });
  const nodes = (r: ReturnType<typeof run>) => (JSON.parse(ok(r, 'kubectl vigil status')) as NodeStatus[]).map((n) => n.node);

  await t.test('--context picks the context, as kubectl --context does', () => {
    assert.equal(run('kubectl', ['vigil', 'status'], { env: env(twoContexts) }).code, 1, 'the current context reaches nothing');
    assert.equal(
      run('kubectl', ['get', 'nodes', '--context', ctx.name, '-o', 'name'], { env: env(twoContexts) }).out.trim(),
      'node/node-a',
    );
    assert.deepEqual(nodes(run('kubectl', ['vigil', 'status', '--json', '--context', ctx.name], { env: env(twoContexts) })), ['node-a']);
    const missing = run('kubectl', ['vigil', 'status', '--context', 'no-such-context'], { env: env(twoContexts) });
    assert.equal(missing.code, 2);
    assert.match(missing.err, /context "no-such-context" does not exist/);
  });

  await t.test('--server replaces the address and keeps the CA and credentials, as kubectl --server does', () => {
    assert.equal(run('kubectl', ['vigil', 'status'], { env: env(moved) }).code, 1, "the kubeconfig's address reaches nothing");
    assert.equal(
      run('kubectl', ['get', 'nodes', '--server', real.cluster.server, '-o', 'name'], { env: env(moved) }).out.trim(),
      'node/node-a',
    );
    assert.deepEqual(nodes(run('kubectl', ['vigil', 'status', '--json', '--server', real.cluster.server], { env: env(moved) })), [
      'node-a',
    ]);
    // kubectl's short form and host:port (https) work too.
    const hostPort = new URL(real.cluster.server).host;
    assert.deepEqual(nodes(run('kubectl', ['vigil', 'status', '--json', '-s', hostPort], { env: env(moved) })), ['node-a']);
    // Both together: the context's credentials at the given address.
    assert.deepEqual(
      nodes(
        run('kubectl', ['vigil', 'status', '--json', '--context', ctx.name, '--server', real.cluster.server], { env: env(twoContexts) }),
      ),
      ['node-a'],
    );
    const bad = run('kubectl', ['vigil', 'status', '--server', 'ftp://example.invalid'], { env: env(moved) });
    assert.equal(bad.code, 2);
    assert.match(bad.err, /--server must be an http\(s\) URL or host:port/);
  });
});
