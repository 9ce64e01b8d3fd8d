/**
 * The optional quarantine (src/remediation/quarantine.ts) on a real v1.34 API server, driven by a
 * real Engine as the agent wires it, with Vigil's own identity: a token bound to a pod on its node,
 * the ClusterRoles of deploy/rbac.yaml and deploy/rbac-quarantine.yaml, and
 * deploy/admission-policy.yaml in force.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '@kubernetes/client-node';
import type { Finding, HealthySignal } from '../../src/api/index.ts';
import { parseConfig } from '../../src/settings/index.ts';
import { makeClients } from '../../src/kube/index.ts';
import {
  CORDONED_BY_VIGIL_ANNOTATION,
  QUARANTINED_LABEL,
  QUARANTINE_TAINT_KEY,
  Quarantine,
  allowedQuarantined,
  type QuarantineOptions,
} from '../../src/remediation/index.ts';
import { kernelLogOnlyConfig, startAgent, uniquePci, writeKmsg, kubeAgentArgs } from '../helpers/agent-process.ts';
import {
  ADMISSION_POLICY_YAML,
  captureLog,
  eventsFor,
  shippedClusterRoleRules,
  startCluster,
  startVigil,
  waitFor,
  type TestCluster,
  type VigilUnderTest,
} from '../helpers/cluster.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const RBAC_QUARANTINE_YAML = path.join(ROOT, 'deploy/rbac-quarantine.yaml');

let cluster: TestCluster;
const stops: (() => Promise<void>)[] = [];
before(async () => {
  cluster = await startCluster();
  await cluster.apply(RBAC_QUARANTINE_YAML);
  await cluster.apply(ADMISSION_POLICY_YAML);
  // The policy takes effect shortly after its binding: wait until it refuses a token bound to no pod.
  await cluster.createNode('q-probe');
  await waitFor(
    'the admission policy to be in force',
    async () => (await patchAs(cluster.vigilKubeconfig, 'q-probe', {})) === 403,
    20_000,
    200,
  );
});
after(async () => {
  for (const stop of stops.reverse()) await stop();
  await cluster?.stop();
});

const fatal = (entity: string): Finding => ({
  reason: 'FilesystemReadOnly',
  message: `${entity} is read-only`,
  source: 'procfs',
  entity,
  at: Date.now(),
});
const healthy = (entity: string): HealthySignal => ({ reasons: ['FilesystemReadOnly'], entity, source: 'procfs', at: Date.now() });

/** A merge patch of a Node with some kubeconfig's identity: the HTTP status. */
async function patchAs(kubeconfig: string, node: string, body: object): Promise<number> {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfig);
  try {
    await kc
      .makeApiClient(k8s.CoreV1Api)
      .patchNode({ name: node, body }, k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch));
    return 200;
  } catch (err) {
    if (err instanceof k8s.ApiException) return err.code;
    throw err;
  }
}

interface Running {
  vigil: VigilUnderTest;
  quarantine: Quarantine;
  lines: Record<string, unknown>[];
  stop(): Promise<void>;
}

/** Vigil for `node` with its pod-bound token: Engine + Kubernetes sink + Quarantine, as run-command wires them. */
async function startQuarantined(node: string, opts: Partial<QuarantineOptions> = {}, kubeconfig?: string): Promise<Running> {
  const kc = kubeconfig ?? cluster.kubeconfigForToken(await cluster.tokenForPodOnNode(node), `pod-on-${node}`);
  const vigil = startVigil({ kubeconfig: kc, nodeName: node });
  const { log, lines } = captureLog();
  const quarantine = new Quarantine({
    clients: makeClients(kc),
    nodeName: node,
    log,
    registry: vigil.registry,
    dryRun: false,
    maxQuarantinedShare: 0.2,
    jitterMs: 0,
    recheckMs: 300,
    eventNamespace: 'default',
    retry: { baseMs: 100, maxMs: 1000 },
    ...opts,
  });
  vigil.engine.on((e, h) => quarantine.handle(e, h));
  await vigil.started;
  quarantine.start(vigil.engine.health());
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await quarantine.close();
    await vigil.stop();
  };
  stops.push(stop);
  return { vigil, quarantine, lines, stop };
}

function marks(node: k8s.V1Node) {
  return {
    unschedulable: node.spec?.unschedulable === true,
    taint: node.spec?.taints?.find((t) => t.key === QUARANTINE_TAINT_KEY),
    otherTaints: (node.spec?.taints ?? []).filter((t) => t.key !== QUARANTINE_TAINT_KEY).map((t) => t.key),
    label: node.metadata?.labels?.[QUARANTINED_LABEL],
    annotation: node.metadata?.annotations?.[CORDONED_BY_VIGIL_ANNOTATION],
  };
}

async function waitIdle(q: Quarantine): Promise<void> {
  await waitFor('the quarantine to settle', () => q.idle, 20_000, 50);
}

test('the guard allows share × nodes rounded up, without float noise: 20 of 100, 1 of 3, 0 at share 0', () => {
  assert.equal(allowedQuarantined(0.2, 100), 20);
  assert.equal(allowedQuarantined(0.2, 3), 1);
  assert.equal(allowedQuarantined(0.2, 5000), 1000);
  assert.equal(allowedQuarantined(0, 100), 0);
  assert.equal(allowedQuarantined(1, 7), 7);
});

test('the quarantine section is off by default and a bad share or unknown key is refused with the field named', () => {
  assert.deepEqual(parseConfig('').quarantine, {
    enabled: false,
    dryRun: false,
    maxQuarantinedShare: 0.2,
    jitter: 10_000,
    recheck: 60_000,
  });
  assert.throws(
    () => parseConfig('quarantine: {enabled: true, maxQuarantinedShare: 1.5, taintKey: x}', 'f.yaml'),
    (err: Error) =>
      /quarantine\.maxQuarantinedShare: a share from 0 to 1/.test(err.message) &&
      /quarantine: Unrecognized key: "taintKey"/.test(err.message),
  );
});

test('a Fatal condition cordons the node and taints it vigil.dev/unhealthy=<condition>; recovery lifts both and keeps other taints', async () => {
  await cluster.createNode('q-a');
  await cluster.admin.core.patchNode(
    { name: 'q-a', body: { spec: { taints: [{ key: 'example.com/other', value: 'x', effect: 'NoSchedule' }] } } },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
  );
  const r = await startQuarantined('q-a');
  r.vigil.engine.finding(fatal('fs:/'));
  const on = await waitFor('q-a quarantined', async () => {
    const m = marks(await cluster.readNode('q-a'));
    return m.taint && m.unschedulable ? m : undefined;
  });
  assert.deepEqual({ ...on.taint }, { key: QUARANTINE_TAINT_KEY, value: 'StorageReady', effect: 'NoSchedule' });
  assert.equal(on.label, 'true');
  assert.equal(on.annotation, 'true', 'Vigil records that it cordoned the node');
  assert.deepEqual(on.otherTaints, ['example.com/other']);
  assert.equal(await r.vigil.metric('vigil_quarantine_active'), 1);
  assert.equal(await r.vigil.metric('vigil_quarantine_actions_total', { action: 'quarantine', result: 'ok' }), 1);
  await waitFor('a VigilQuarantined Event', async () => (await eventsFor(cluster, 'q-a')).find((e) => e.reason === 'VigilQuarantined'));

  r.vigil.engine.healthy(healthy('fs:/'));
  const off = await waitFor('q-a released', async () => {
    const m = marks(await cluster.readNode('q-a'));
    return !m.taint && !m.unschedulable ? m : undefined;
  });
  assert.equal(off.label, undefined);
  assert.equal(off.annotation, undefined);
  assert.deepEqual(off.otherTaints, ['example.com/other'], "someone else's taint stays");
  assert.equal(await r.vigil.metric('vigil_quarantine_active'), 0);
  await waitFor('a VigilQuarantineLifted Event', async () =>
    (await eventsFor(cluster, 'q-a')).find((e) => e.reason === 'VigilQuarantineLifted'),
  );
  await r.stop();
});

test('a node an operator cordoned stays cordoned after recovery: Vigil removes only its taint and label', async () => {
  await cluster.createNode('q-op');
  await cluster.admin.core.patchNode(
    { name: 'q-op', body: { spec: { unschedulable: true } } },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
  );
  const r = await startQuarantined('q-op');
  r.vigil.engine.finding(fatal('fs:/data'));
  const on = await waitFor(
    'q-op tainted',
    async () => marks(await cluster.readNode('q-op')).taint && marks(await cluster.readNode('q-op')),
  );
  assert.equal(on.unschedulable, true);
  assert.equal(on.annotation, undefined, 'Vigil did not cordon it, so it does not claim the cordon');
  r.vigil.engine.healthy(healthy('fs:/data'));
  const off = await waitFor('q-op untainted', async () => {
    const m = marks(await cluster.readNode('q-op'));
    return !m.taint && !m.label ? m : undefined;
  });
  assert.equal(off.unschedulable, true, "the operator's cordon is kept");
  await r.stop();
});

test('ownership survives a restart: a new agent that finds the node healthy lifts the quarantine an earlier one put on', async () => {
  await cluster.createNode('q-restart');
  const first = await startQuarantined('q-restart');
  first.vigil.engine.finding(fatal('fs:/'));
  await waitFor('q-restart quarantined', async () => marks(await cluster.readNode('q-restart')).unschedulable);
  await waitIdle(first.quarantine);
  await first.stop();

  // The new agent has no memory of the quarantine (a fresh engine, all healthy): the Node's marks say it was Vigil's.
  const second = await startQuarantined('q-restart');
  const off = await waitFor('q-restart released by the new agent', async () => {
    const m = marks(await cluster.readNode('q-restart'));
    return !m.unschedulable && !m.taint && !m.label && !m.annotation ? m : undefined;
  });
  assert.deepEqual(off.otherTaints, ['node.kubernetes.io/not-ready'], 'the taint the API server added on create stays');
  await second.stop();
});

test(
  '`vigil run` with quarantine enabled cordons and taints its own Node on an Xid 79 read from /dev/kmsg',
  { timeout: 120_000 },
  async () => {
    const node = 'q-agent';
    await cluster.createNode(node);
    const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-quarantine-'));
    stops.push(() => Promise.resolve(rmSync(dir, { recursive: true, force: true })));
    const config = path.join(dir, 'vigil.yaml');
    writeFileSync(
      config,
      kernelLogOnlyConfig([
        'kubernetes:',
        '  mode: "on"',
        '  coalesce: 100ms',
        'quarantine:',
        '  enabled: true',
        '  jitter: 0s',
        '  maxQuarantinedShare: 1',
      ]),
    );
    const kubeconfig = cluster.kubeconfigForToken(await cluster.tokenForPodOnNode(node), `pod-on-${node}`);
    const agent = await startAgent(kubeAgentArgs(kubeconfig, node, path.join(dir, 'state'), config));
    stops.push(async () => void (await agent.stop()));
    await agent.waitFor((l) => l.msg === 'writing node conditions', 30_000);
    const pci = uniquePci();
    writeKmsg(`NVRM: Xid (PCI:${pci}): 79, pid=1234, name=python3, GPU has fallen off the bus.`);
    const on = await waitFor(
      'q-agent quarantined',
      async () => {
        const m = marks(await cluster.readNode(node));
        return m.taint && m.unschedulable ? m : undefined;
      },
      30_000,
    );
    assert.equal(on.taint?.value, 'AcceleratedHardwareReady');
    assert.equal(on.annotation, 'true');
    const line = await agent.waitFor((l) => l.event === 'quarantine' && l.action === 'quarantine');
    assert.match(String(line.msg), /^quarantined: quarantine node q-agent: cordon it/);
    assert.equal(await agent.stop(), 0);
  },
);

test('dry run changes nothing on the Node and says what it would do (log line, Event, metric)', async () => {
  await cluster.createNode('q-dry');
  const before = marks(await cluster.readNode('q-dry'));
  assert.equal(before.unschedulable, false);
  const r = await startQuarantined('q-dry', { dryRun: true });
  r.vigil.engine.finding(fatal('fs:/'));
  const line = await waitFor('the dry-run log line', () => r.lines.find((l) => l.event === 'quarantine' && l.dryRun === true));
  assert.match(String(line.msg), /^dry run: would quarantine node q-dry: cordon it, taint vigil\.dev\/unhealthy=StorageReady:NoSchedule/);
  await waitIdle(r.quarantine);
  assert.equal(await r.vigil.metric('vigil_quarantine_actions_total', { action: 'quarantine', result: 'dry_run' }), 1);
  assert.equal(await r.vigil.metric('vigil_quarantine_actions_total', { result: 'ok' }), 0);
  const ev = await waitFor('a VigilQuarantineDryRun Event', async () =>
    (await eventsFor(cluster, 'q-dry')).find((e) => e.reason === 'VigilQuarantineDryRun'),
  );
  assert.match(String(ev.note), /nothing changed: would quarantine node q-dry/);
  assert.deepEqual(marks(await cluster.readNode('q-dry')), before);
  await r.stop();
});

test('the guard holds back when this node would make 21 of 100 nodes quarantined, and goes ahead once it would make 20', async () => {
  const existing = (await cluster.admin.core.listNode()).items.length;
  const names = Array.from({ length: 100 - existing - 1 }, (_, i) => `q-fleet-${i}`);
  for (let i = 0; i < names.length; i += 10)
    await Promise.all(names.slice(i, i + 10).map((n) => cluster.admin.core.createNode({ body: { metadata: { name: n } } })));
  await cluster.createNode('q-guard');
  const before = marks(await cluster.readNode('q-guard'));
  assert.equal((await cluster.admin.core.listNode()).items.length, 100);
  // Nodes earlier tests left quarantined (q-agent: Xid 79 lasts until reboot) count too: 20 in all.
  const already = (await cluster.admin.core.listNode({ labelSelector: `${QUARANTINED_LABEL}=true` })).items.length;
  const labelled = names.slice(0, 20 - already);
  const label = (n: string, value: string | null) =>
    cluster.admin.core.patchNode(
      { name: n, body: { metadata: { labels: { [QUARANTINED_LABEL]: value } } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
  await Promise.all(labelled.map((n) => label(n, 'true')));

  const r = await startQuarantined('q-guard', { recheckMs: 300 });
  r.vigil.engine.finding(fatal('fs:/'));
  await waitFor('held back', () => r.vigil.metric('vigil_quarantine_held_back').then((v) => v === 1));
  const ev = await waitFor('a VigilQuarantineHeldBack Event', async () =>
    (await eventsFor(cluster, 'q-guard')).find((e) => e.reason === 'VigilQuarantineHeldBack'),
  );
  assert.equal(ev.type, 'Warning');
  assert.match(
    String(ev.note),
    /at least 20 of 100 nodes are already quarantined by Vigil; this node would make more than 20% \(at most 20 allowed\)/,
  );
  // Rechecks keep holding back without a second Event or episode.
  await new Promise((res) => setTimeout(res, 1000));
  assert.deepEqual(marks(await cluster.readNode('q-guard')), before, 'the node is left as it was');
  assert.equal(await r.vigil.metric('vigil_quarantine_held_back_total'), 1);
  assert.equal((await eventsFor(cluster, 'q-guard')).filter((e) => e.reason === 'VigilQuarantineHeldBack').length, 1);

  // One quarantined node recovers: 19 + this one = 20 of 100, within the share.
  await label(labelled[0], null);
  await waitFor('q-guard quarantined on a recheck', async () => marks(await cluster.readNode('q-guard')).taint);
  assert.equal(await r.vigil.metric('vigil_quarantine_held_back'), 0);
  await r.stop();
  // Leave the fleet unlabelled for any later test.
  await Promise.all(labelled.slice(1).map((n) => label(n, null)));
  await label('q-guard', null);
});

test("RBAC and admission: Vigil's identity may cordon and taint only its own node, and only with its own keys", async () => {
  await cluster.createNode('q-own');
  await cluster.createNode('q-other');
  const onOwn = cluster.kubeconfigForToken(await cluster.tokenForPodOnNode('q-own'), 'pod-on-q-own');
  // A merge patch replaces the whole taint list: keep the ones the API server put on at create.
  const ownTaints = (await cluster.readNode('q-own')).spec?.taints ?? [];
  assert.equal(await patchAs(onOwn, 'q-other', { spec: { unschedulable: true } }), 403, 'cannot cordon another node');
  assert.equal(
    await patchAs(onOwn, 'q-other', { spec: { taints: [{ key: QUARANTINE_TAINT_KEY, value: 'KernelReady', effect: 'NoSchedule' }] } }),
    403,
    'cannot taint another node',
  );
  assert.equal(await patchAs(onOwn, 'q-own', { metadata: { labels: { 'example.com/role': 'x' } } }), 403, 'no other label');
  assert.equal(await patchAs(onOwn, 'q-own', { metadata: { annotations: { 'example.com/a': 'x' } } }), 403, 'no other annotation');
  assert.equal(
    await patchAs(onOwn, 'q-own', { spec: { taints: [{ key: 'example.com/evict', effect: 'NoExecute' }] } }),
    403,
    'no other taint',
  );
  assert.equal(
    await patchAs(onOwn, 'q-own', {
      metadata: { labels: { [QUARANTINED_LABEL]: 'true' }, annotations: { [CORDONED_BY_VIGIL_ANNOTATION]: 'true' } },
      spec: { unschedulable: true, taints: [...ownTaints, { key: QUARANTINE_TAINT_KEY, value: 'KernelReady', effect: 'NoSchedule' }] },
    }),
    200,
    'its own marks on its own node',
  );
  const other = marks(await cluster.readNode('q-other'));
  assert.equal(other.unschedulable, false);
  assert.equal(other.taint, undefined);

  // Without deploy/rbac-quarantine.yaml, deploy/rbac.yaml's role cannot patch nodes at all.
  const baseOnly = await cluster.serviceAccountKubeconfig('vigil-base-only', shippedClusterRoleRules());
  assert.equal(await patchAs(baseOnly, 'q-own', { spec: { unschedulable: false } }), 403);
});

test('with only deploy/rbac.yaml, a Fatal condition leaves the node as it is and the agent says which file grants quarantine, once', async () => {
  await cluster.createNode('q-norbac');
  const kubeconfig = await cluster.serviceAccountKubeconfig('vigil-no-quarantine', shippedClusterRoleRules());
  // Share 1: the guard never holds back here, so the patch is what is refused.
  const r = await startQuarantined('q-norbac', { maxQuarantinedShare: 1 }, kubeconfig);
  r.vigil.engine.finding(fatal('fs:/'));
  await waitFor('refused patches', () => r.vigil.metric('vigil_quarantine_actions_total', { result: '403' }).then((n) => n >= 2));
  const denied = r.lines.filter((l) => l.event === 'quarantine' && l.status === 403);
  assert.equal(denied.length, 1);
  assert.match(String(denied[0].msg), /permission denied.*deploy\/rbac-quarantine\.yaml/);
  assert.equal(marks(await cluster.readNode('q-norbac')).unschedulable, false);
  await r.stop();
});
