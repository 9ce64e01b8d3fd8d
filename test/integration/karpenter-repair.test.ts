/**
 * The self-healing loop with Karpenter's real node repair (v1.15, NodeRepair=true, repair as a disruption method) on
 * the real API server: a fault on the real /dev/kmsg -> the real Vigil agent writes AcceleratedHardwareReady=False ->
 * after the (scaled) toleration Karpenter deletes the NodeClaim -> a replacement NodeClaim and Node come up.
 * Nodes come from Karpenter's kwok provider and are kept Ready by the real KWOK controller (test/helpers/karpenter.ts).
 * Static NodePools (spec.replicas) stand for the pending work: there is no kube-scheduler here, and a pod that stays
 * pending keeps its node "nominated", which v1.15's repair treats as not disruptable.
 * Every step is asserted from API-server watches and its time is logged with t.diagnostic.
 */
import { after, before, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startAgent, uniquePci, writeKmsg, kernelLogOnlyConfig, type AgentProcess } from '../helpers/agent-process.ts';
import { startCluster, type TestCluster } from '../helpers/cluster.ts';
import {
  conditionOf,
  karpenterObjects,
  nodeClaimOfNode,
  nodeCondition,
  poolOf,
  runSelfHealing,
  startKarpenter,
  waitForPoolNodes,
  watchRepair,
  type KarpenterUnderTest,
  type RepairWatches,
  type SelfHealingSteps,
} from '../helpers/karpenter.ts';

/**
 * The AWS tolerations scaled by 1/20: AcceleratedHardwareReady=False is tolerated for 30 s (10 min in production), the
 * other *Ready types for 90 s (30 min); NetworkingReady, which the ttl test uses, is set to 30 s to keep that test short.
 */
const TOLERATION_SCALE = 0.05;
const TOLERATIONS = 'NetworkingReady=30s';

let cluster: TestCluster;
let karpenter: KarpenterUnderTest;
let watches: RepairWatches;
let dir: string;
before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-karpenter-'));
  cluster = await startCluster();
  karpenter = await startKarpenter(cluster, { tolerationScale: TOLERATION_SCALE, tolerations: TOLERATIONS });
  watches = await watchRepair(cluster);
});
after(async () => {
  watches?.stop();
  await karpenter?.stop();
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const agentConfig = (name: string, extra: string[] = []): string => {
  const file = path.join(dir, `${name}.yaml`);
  writeFileSync(file, kernelLogOnlyConfig(['kubernetes:', '  mode: "on"', '  heartbeat: 5m', '  coalesce: 100ms', ...extra]));
  return file;
};
const runAgent = (node: string, config: string, stateDir = path.join(dir, `state-${node}`)): Promise<AgentProcess> =>
  startAgent(['--kubeconfig', cluster.vigilKubeconfig, '--node-name', node, '--state-dir', stateDir, '--config', config]);
const xid79 = (pci: string) => writeKmsg(`NVRM: Xid (PCI:${pci}): 79, pid=4242, name=train, GPU has fallen off the bus.`, 4);

function logSteps(t: TestContext, s: SelfHealingSteps): void {
  const rel = (at: number) => `${String(at - s.at.fault).padStart(7)} ms`;
  t.diagnostic(`toleration AcceleratedHardwareReady=False: ${s.tolerationMs} ms`);
  t.diagnostic(
    `pool created -> NodeClaim: ${s.at.nodeClaimCreated - s.at.poolCreated} ms; -> Node Ready: ${s.at.nodeReady - s.at.poolCreated} ms`,
  );
  t.diagnostic(`fault written (kmsg)             ${rel(s.at.fault)}`);
  t.diagnostic(`AcceleratedHardwareReady=False   ${rel(s.at.conditionFalse)}`);
  t.diagnostic(`lastTransitionTime + toleration  ${rel(s.lastTransitionTime + s.tolerationMs)}`);
  t.diagnostic(`replacement NodeClaim created    ${rel(s.at.replacementNodeClaim)}`);
  t.diagnostic(`old NodeClaim deleted            ${rel(s.at.nodeClaimDeleted)}`);
  t.diagnostic(`replacement Node Ready           ${rel(s.at.replacementNodeReady)}`);
}

test(
  'Karpenter replaces the node whose AcceleratedHardwareReady Vigil set False after an Xid 79, once the toleration passes',
  { timeout: 300_000 },
  async (t) => {
    const pool = 'repair-a';
    const s = await runSelfHealing({
      cluster,
      karpenter,
      watches,
      pool,
      dir,
      pci: uniquePci(),
      startAgent: (node) => runAgent(node, agentConfig('a')),
      writeFault: xid79,
    });
    logSteps(t, s);
    // Repair acted on Vigil's condition only after lastTransitionTime + toleration (the API stores seconds).
    assert.ok(s.at.nodeClaimDeleted >= s.lastTransitionTime + s.tolerationMs, 'deleted no earlier than the toleration allows');
    assert.ok(s.at.nodeClaimDeleted >= s.at.fault + s.tolerationMs - 1000, 'deleted no earlier than fault + toleration');
    assert.notEqual(s.replacement.node, s.node);
    const selected = karpenter.karpenter.lines.find((l) => l.includes('selected repair policy') && l.includes(s.node));
    assert.ok(selected, 'Karpenter logged the repair decision for the node');
    assert.match(selected, /"condition":"AcceleratedHardwareReady"/);
    assert.match(selected, /"reason":"NvidiaXID79Error"/);
  },
);

test(
  'Karpenter holds back repair (NodeRepairBlocked) when more than 20% of a NodePool carries the fatal condition',
  { timeout: 300_000 },
  async (t) => {
    const pool = 'repair-b';
    const objects = karpenterObjects(cluster);
    await objects.createNodeClass(pool);
    await objects.createStaticNodePool(pool, pool, 3);
    const up = await waitForPoolNodes(watches, pool, 3);
    const [n0, n1] = up.nodes as [string, string, string];
    const config = agentConfig('b');
    const agents = [await runAgent(n0, config), await runAgent(n1, config)];
    t.after(() => Promise.all(agents.map((a) => a.stop())));
    for (const a of agents) await a.waitFor((l) => l.msg === 'writing node conditions', 30_000);
    const pci = uniquePci();
    const fault = Date.now();
    // Both agents read the same kernel log: one fault line makes both of their Nodes unhealthy (2 of 3 = 67% > 20%).
    xid79(pci);
    const f0 = await nodeCondition(watches, n0, 'AcceleratedHardwareReady', 'False', 30_000, pci);
    const f1 = await nodeCondition(watches, n1, 'AcceleratedHardwareReady', 'False', 30_000, pci);
    const tolerationMs = karpenter.tolerationMs('AcceleratedHardwareReady');
    const blocked = await watches.events.waitFor(
      'a NodeRepairBlocked event',
      (s) => s.obj.reason === 'NodeRepairBlocked' && [n0, n1].includes(s.obj.involvedObject?.name ?? ''),
      tolerationMs + 90_000,
    );
    t.diagnostic(`fault -> both conditions False: ${Math.max(f0.at, f1.at) - fault} ms; -> NodeRepairBlocked: ${blocked.at - fault} ms`);
    t.diagnostic(`NodeRepairBlocked message: ${blocked.obj.message}`);
    assert.match(blocked.obj.message ?? '', /more than 20%/);
    // Give repair a further pass (the disruption loop polls every 10 s): still nothing deleted or replaced.
    await new Promise((r) => setTimeout(r, 15_000));
    const touched = watches.nodeClaims.seen.filter(
      (s) => poolOf(s.obj) === pool && (s.type === 'DELETED' || !!s.obj.metadata?.deletionTimestamp),
    );
    assert.deepEqual(touched, [], 'no NodeClaim of the pool was deleted');
    const claims = new Set(watches.nodeClaims.seen.filter((s) => poolOf(s.obj) === pool).map((s) => s.obj.metadata!.name));
    assert.equal(claims.size, 3, 'no replacement was launched');
  },
);

test('a condition that clears before the toleration ends (ttl recovery) gets no replacement', { timeout: 300_000 }, async (t) => {
  const pool = 'repair-c';
  const objects = karpenterObjects(cluster);
  await objects.createNodeClass(pool);
  await objects.createStaticNodePool(pool, pool, 1);
  const up = await waitForPoolNodes(watches, pool, 1);
  const node = up.nodes[0];
  const nodeClaim = nodeClaimOfNode(watches, node);
  const token = `vk${Math.random().toString(36).slice(2, 10)}`;
  // A user rule: a transient fault on NetworkingReady that recovers by ttl. The other types are renamed so that
  // faults other tests write to the shared kernel log (Xids, ...) cannot make Karpenter act on this node.
  const rules = path.join(dir, 'transient-rules.yaml');
  writeFileSync(
    rules,
    [
      'rules:',
      '  - name: transient-link-fault',
      `    pattern: 'vigil-test ${token} transient link fault'`,
      '    reason: TransientLinkFault',
      '    severity: Fatal',
      '    condition: NetworkingReady',
      '    recovery: {ttl: 10s}',
      '',
    ].join('\n'),
  );
  const config = path.join(dir, 'c.yaml');
  writeFileSync(
    config,
    [
      'kernelLog:',
      '  lookback: "0"',
      `  userRules: [${JSON.stringify(rules)}]`,
      'engine: {tick: 1s}',
      'conditions:',
      '  names: {KernelReady: VigilTestKernelReady, StorageReady: VigilTestStorageReady, ContainerRuntimeReady: VigilTestContainerRuntimeReady, AcceleratedHardwareReady: VigilTestAcceleratedHardwareReady}',
      'monitors:',
      '  kernel: {enabled: false}',
      '  networking: {enabled: false}',
      '  storage: {enabled: false}',
      '  runtime: {enabled: false}',
      'gpu: {enabled: false}',
      'kubernetes: {mode: "on", heartbeat: 5m, coalesce: 100ms}',
      '',
    ].join('\n'),
  );
  const agent = await runAgent(node, config);
  t.after(() => agent.stop());
  await agent.waitFor((l) => l.msg === 'writing node conditions', 30_000);
  const tolerationMs = karpenter.tolerationMs('NetworkingReady');
  const fault = Date.now();
  writeKmsg(`vigil-test ${token} transient link fault`, 4);
  const down = await nodeCondition(watches, node, 'NetworkingReady', 'False', 30_000);
  const ltt = new Date(conditionOf(down.obj, 'NetworkingReady')!.lastTransitionTime!).getTime();
  const cleared = await watches.nodes.waitFor(
    'NetworkingReady=True again',
    (s) => s.at > down.at && s.obj.metadata?.name === node && conditionOf(s.obj, 'NetworkingReady')?.status === 'True',
    tolerationMs,
  );
  t.diagnostic(`toleration NetworkingReady=False: ${tolerationMs} ms`);
  t.diagnostic(`fault -> NetworkingReady=False: ${down.at - fault} ms; -> True (ttl 10 s): ${cleared.at - fault} ms`);
  assert.ok(cleared.at < ltt + tolerationMs, 'the condition cleared before the toleration ended');
  // Wait past the point where repair would have acted, plus two disruption passes.
  const waitUntil = ltt + tolerationMs + 25_000;
  await new Promise((r) => setTimeout(r, Math.max(0, waitUntil - Date.now())));
  const deleted = watches.nodeClaims.seen.find(
    (s) => s.obj.metadata?.name === nodeClaim && (s.type === 'DELETED' || !!s.obj.metadata?.deletionTimestamp),
  );
  assert.equal(deleted, undefined, 'the NodeClaim was not deleted');
  const claims = new Set(watches.nodeClaims.seen.filter((s) => poolOf(s.obj) === pool).map((s) => s.obj.metadata!.name));
  assert.deepEqual([...claims], [nodeClaim], 'no replacement NodeClaim');
  assert.ok(
    !karpenter.karpenter.lines.some((l) => l.includes('selected repair policy') && l.includes(node)),
    'no repair decision for the node',
  );
});

test(
  'restarting the Vigil agent during the toleration keeps lastTransitionTime, so Karpenter still repairs on time',
  { timeout: 300_000 },
  async (t) => {
    const pool = 'repair-d';
    const config = agentConfig('d');
    let restartedAt = 0;
    const s = await runSelfHealing({
      cluster,
      karpenter,
      watches,
      pool,
      dir,
      pci: uniquePci(),
      startAgent: (node) => runAgent(node, config),
      writeFault: xid79,
      async duringToleration({ node, agent }) {
        await new Promise((r) => setTimeout(r, 1000));
        assert.equal(await agent.stop(), 0);
        const again = await runAgent(node, config);
        await again.waitFor((l) => l.msg === 'writing node conditions', 30_000);
        restartedAt = Date.now();
        return again;
      },
    });
    logSteps(t, s);
    t.diagnostic(`agent restarted (new agent writing) ${restartedAt - s.at.fault} ms after the fault`);
    assert.ok(restartedAt < s.lastTransitionTime + s.tolerationMs, 'the restart happened within the toleration');
    // Every state of the Node from the fault until the NodeClaim's deletion: False, with the first lastTransitionTime.
    const seen = watches.nodes.seen.filter(
      (e) => e.obj.metadata?.name === s.node && e.at >= s.at.conditionFalse && e.at <= s.at.nodeClaimDeleted,
    );
    assert.ok(seen.length > 0);
    for (const e of seen) {
      const c = conditionOf(e.obj, 'AcceleratedHardwareReady');
      assert.equal(c?.status, 'False');
      assert.equal(new Date(c.lastTransitionTime!).getTime(), s.lastTransitionTime, 'lastTransitionTime unchanged across the restart');
    }
    // On time: not earlier than the toleration allows, and within two disruption passes (10 s each) plus slack after it.
    assert.ok(s.at.nodeClaimDeleted >= s.lastTransitionTime + s.tolerationMs);
    assert.ok(s.at.nodeClaimDeleted <= s.lastTransitionTime + s.tolerationMs + 40_000, 'repaired on the original clock, not restarted');
  },
);
