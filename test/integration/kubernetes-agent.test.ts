/**
 * The whole path on real parts: a fault written to the real /dev/kmsg, read by the real `vigil
 * run` process (kernel-log monitor, engine, Kubernetes sink) using Vigil's ServiceAccount with the
 * shipped ClusterRole, lands as a condition on a Node of a real kube-apiserver.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startAgent, uniquePci, writeKmsg, kernelLogOnlyConfig, kubeAgentArgs } from '../helpers/agent-process.ts';
import { conditionsOf, eventsFor, startCluster, waitFor, type TestCluster } from '../helpers/cluster.ts';

let cluster: TestCluster;
let dir: string;
before(async () => {
  cluster = await startCluster();
  dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-k8s-agent-'));
});
after(async () => {
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('Xid 79 on /dev/kmsg becomes AcceleratedHardwareReady=False (NvidiaXID79Error) on the Node', { timeout: 120_000 }, async () => {
  const node = 'agent-kmsg';
  await cluster.createNode(node);
  const ready0 = conditionsOf(await cluster.readNode(node)).get('Ready');
  const config = path.join(dir, 'vigil.yaml');
  // lookback 0: records already in the ring (other tests' faults) are not this test's business.
  // Host monitors and NVML are off so only the kernel log decides this node's state.
  writeFileSync(config, kernelLogOnlyConfig(['kubernetes:', '  mode: "on"', '  heartbeat: 5m', '  coalesce: 100ms']));
  const pci = uniquePci();
  const agent = await startAgent(kubeAgentArgs(cluster.vigilKubeconfig, node, path.join(dir, 'state'), config));
  try {
    await agent.waitFor((l) => l.msg === 'writing node conditions', 30_000);
    writeKmsg(`NVRM: Xid (PCI:${pci}): 79, pid=1234, name=python3, GPU has fallen off the bus.`);

    const c = await waitFor(
      'AcceleratedHardwareReady=False on the Node',
      async () => {
        const x = conditionsOf(await cluster.readNode(node)).get('AcceleratedHardwareReady');
        return x?.status === 'False' && x.message?.includes(`gpu:${pci}`) && x;
      },
      30_000,
    );
    assert.equal(c.reason, 'NvidiaXID79Error');
    assert.match(c.message!, /GPU has fallen off the bus/);
    const n = conditionsOf(await cluster.readNode(node));
    assert.deepEqual(n.get('Ready'), ready0, 'kubelet Ready untouched');
    assert.equal(n.get('KernelReady')?.status, 'True', 'the kernel-log monitor manages KernelReady');
    await waitFor(
      'the transition Event',
      async () => (await eventsFor(cluster, node)).find((e) => e.reason === 'NvidiaXID79Error' && e.note?.includes(`gpu:${pci}`)),
      20_000,
    );
    assert.equal(agent.lines.filter((l) => l.event === 'kubernetes' && typeof l.status === 'number').length, 0, 'no API errors logged');

    // This cluster has no NodeDiagnostic CRD: said once, and not asked again every few seconds.
    const hint = agent.lines.find((l) => l.event === 'diagnostics' && l.status === 404);
    assert.match(String(hint?.msg), /is the NodeDiagnostic CRD installed\?.*looking again every 600 s/);
    await new Promise((r) => setTimeout(r, 5000)); // a quick backoff would have retried at 1, 2 and 4 s
    assert.match(String(await agent.get('/metrics')), /vigil_diagnostics_watch_failures_total\{status="404"\} 1\n/);
  } finally {
    assert.equal(await agent.stop(), 0);
  }
});

test('a condition type dropped from the configuration is removed from the Node after a restart', { timeout: 240_000 }, async () => {
  const node = 'agent-stale-type';
  await cluster.createNode(node);
  const stateDir = path.join(dir, 'state-stale');
  const config = (storage: boolean) => {
    const file = path.join(dir, `stale-${storage}.yaml`);
    writeFileSync(
      file,
      [
        'kernelLog:',
        '  lookback: "0"',
        'monitors:',
        '  scheduler: {startupJitter: 1h}',
        '  kernel: {enabled: false}',
        '  networking: {enabled: false}',
        `  storage: {enabled: ${storage}}`,
        '  runtime: {enabled: false}',
        'gpu:',
        '  enabled: false',
        'kubernetes:',
        '  mode: "on"',
        '  coalesce: 100ms',
        '',
      ].join('\n'),
    );
    return file;
  };
  const args = (storage: boolean) => [
    '--kubeconfig',
    cluster.vigilKubeconfig,
    '--node-name',
    node,
    '--state-dir',
    stateDir,
    '--config',
    config(storage),
  ];

  const first = await startAgent(args(true));
  try {
    await waitFor(
      'StorageReady written',
      async () => conditionsOf(await cluster.readNode(node)).get('StorageReady')?.status === 'True',
      30_000,
    );
  } finally {
    assert.equal(await first.stop(), 0);
  }

  // Storage monitoring switched off: its type must not linger on the Node as a stale "True".
  const second = await startAgent(args(false));
  try {
    await waitFor('StorageReady removed', async () => !conditionsOf(await cluster.readNode(node)).has('StorageReady'), 150_000);
    const n = conditionsOf(await cluster.readNode(node));
    assert.equal(n.get('KernelReady')?.status, 'True', 'the types still managed stay');
  } finally {
    assert.equal(await second.stop(), 0);
  }
});
