/**
 * The agent (the real composition root: Agent + engine + Kubernetes sink) runs with nothing but
 * the ClusterRole deploy/rbac.yaml ships. With a role missing `patch nodes/status` it keeps
 * detecting and says what is missing exactly once.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type pino from 'pino';
import * as k8s from '@kubernetes/client-node';
import type { Finding, FindingSink } from '../../src/api/index.ts';
import { Agent } from '../../src/app/index.ts';
import { parseConfig } from '../../src/settings/index.ts';
import { KubernetesSink } from '../../src/sinks/index.ts';
import { makeClients } from '../../src/kube/index.ts';
import {
  captureLog,
  conditionsOf,
  eventsFor,
  shippedClusterRoleRules,
  startCluster,
  waitFor,
  type TestCluster,
} from '../helpers/cluster.ts';
import { tempDir } from '../helpers/temp-dir.ts';

let cluster: TestCluster;
/** Agents not stopped by their test (it failed first): their HTTP servers would hold the file open. */
const running = new Set<() => Promise<void>>();
before(async () => {
  cluster = await startCluster();
});
after(async () => {
  for (const stop of running) await stop();
  await cluster?.stop();
});

const finding = (reason: Finding['reason'], entity: string, message = `${reason} seen`): Finding => ({
  reason,
  message,
  source: 'kmsg',
  entity,
  at: Date.now(),
});

/** The agent as run-command wires it, with a stand-in monitor the test publishes through. */
async function startAgent(kubeconfig: string, nodeName: string, log: pino.Logger) {
  const stateDir = tempDir('vigil-state-');
  const config = parseConfig(`
stateDir: ${stateDir}
listen: 127.0.0.1:0
kubernetes: {mode: on, heartbeat: 0s, coalesce: 100ms}
`);
  let out: FindingSink | undefined;
  let kube: KubernetesSink | undefined;
  const agent = new Agent({
    config,
    log,
    bootId: 'boot-rbac',
    monitors: () => [
      {
        monitor: { name: 'stand-in', start: (o: FindingSink) => void (out = o), stop: () => undefined },
        conditions: ['KernelReady', 'AcceleratedHardwareReady'],
      },
    ],
    sinks: ({ registry }) => {
      kube = new KubernetesSink({
        clients: makeClients(kubeconfig),
        nodeName,
        log,
        registry,
        heartbeatMs: config.kubernetes.heartbeat,
        coalesceMs: config.kubernetes.coalesce,
        eventNamespace: config.kubernetes.eventNamespace,
        eventsPerReasonPerMinute: config.kubernetes.eventsPerReasonPerMinute,
        retry: { baseMs: 100, maxMs: 500 },
        seriesFlushMs: 200,
        finalWriteMs: 200,
      });
      return [{ sink: kube, adopts: kube }];
    },
  });
  await agent.start();
  const stop = () => (running.delete(stop), agent.stop());
  running.add(stop);
  const metric = async (name: string, labels: Record<string, string> = {}) => {
    const m = (await agent.registry.getMetricsAsJSON()).find((x) => x.name === name);
    return m?.values.filter((v) => Object.entries(labels).every(([k, val]) => v.labels[k] === val)).reduce((a, v) => a + v.value, 0) ?? 0;
  };
  return { agent, stop, out: () => out!, kube: kube!, metric };
}

test('with only the shipped ClusterRole the agent writes conditions, Events and Event series', async () => {
  const node = 'rbac-shipped';
  await cluster.createNode(node);
  const { log, lines } = captureLog();
  const a = await startAgent(cluster.vigilKubeconfig, node, log);
  await waitFor('initial conditions', async () => conditionsOf(await cluster.readNode(node)).get('KernelReady')?.status === 'True');
  // The dry-run Event create at start goes through (the shipped role allows it) and stores nothing.
  await waitFor('the preflight', async () => (await a.metric('vigil_k8s_event_writes_total', { op: 'preflight', result: 'ok' })) === 1);
  assert.deepEqual(await eventsFor(cluster, node), [], 'a dry run stores no Event');

  a.out().finding(finding('NvidiaXID79Error', 'gpu:0', 'GPU has fallen off the bus'));
  for (let i = 0; i < 3; i++) a.out().finding(finding('SoftLockup', '', 'CPU#1 stuck for 22s'));
  await waitFor(
    'AcceleratedHardwareReady=False',
    async () => conditionsOf(await cluster.readNode(node)).get('AcceleratedHardwareReady')?.status === 'False',
  );
  // series.count 3 needs `patch events`, the Event itself `create events`.
  await waitFor('SoftLockup Event with series 3', async () =>
    (await eventsFor(cluster, node)).find((e) => e.reason === 'SoftLockup' && e.series?.count === 3),
  );
  assert.equal(
    lines.filter((l) => typeof l.status === 'number' && l.status !== 0).length,
    0,
    `no API errors: ${JSON.stringify(lines.filter((l) => l.status))}`,
  );
  await a.stop();

  // ...and nothing more: the same identity can read Nodes but not change or delete them, nor touch core/v1 Events.
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(cluster.vigilKubeconfig);
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const code = (p: Promise<unknown>) =>
    p.then(
      () => 200,
      (e: { code?: number }) => e.code,
    );
  assert.equal(await code(core.listNode()), 200);
  assert.equal(
    await code(
      core.patchNode(
        { name: node, body: { spec: { unschedulable: true } } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
      ),
    ),
    403,
  );
  assert.equal(await code(core.deleteNode({ name: node })), 403);
  assert.equal(await code(core.listNamespacedEvent({ namespace: 'default' })), 403);
});

test('without `patch nodes/status` detection continues and the 403 is logged once, naming nodes/status', async () => {
  const node = 'rbac-missing';
  await cluster.createNode(node);
  const rules = shippedClusterRoleRules()
    .map((r) => ({ ...r, resources: r.resources?.filter((x) => x !== 'nodes/status') }))
    .filter((r) => r.resources?.length);
  assert.ok(!rules.some((r) => r.resources!.includes('nodes/status')));
  const kubeconfig = await cluster.serviceAccountKubeconfig('vigil-no-status', rules);
  const { log, lines } = captureLog();
  const a = await startAgent(kubeconfig, node, log);

  a.out().finding(finding('NvidiaXID79Error', 'gpu:0', 'GPU has fallen off the bus'));
  await waitFor('several refused writes', () => a.metric('vigil_k8s_condition_writes_total', { result: '403' }).then((n) => n >= 3));
  // Detection continues: the engine follows new findings while every write is refused.
  a.out().finding(finding('HardwareErrorFatal', '', 'Machine check: Processor context corrupt'));
  await waitFor('more refused writes', () => a.metric('vigil_k8s_condition_writes_total', { result: '403' }).then((n) => n >= 6));
  const health = a.agent.engine.health();
  assert.equal(health.conditions.find((c) => c.type === 'AcceleratedHardwareReady')?.status, 'False');
  assert.equal(health.conditions.find((c) => c.type === 'KernelReady')?.reason, 'HardwareErrorFatal');
  // Events still work: the role still grants them.
  await waitFor('the transition Event', async () => (await eventsFor(cluster, node)).some((e) => e.reason === 'HardwareErrorFatal'));
  assert.equal(conditionsOf(await cluster.readNode(node)).has('KernelReady'), false, 'nothing reached the Node');

  const denied = lines.filter((l) => l.status === 403);
  assert.equal(denied.length, 1, `exactly one 403 line: ${JSON.stringify(denied)}`);
  assert.match(String(denied[0].msg), /patch nodes\/status/);
  assert.match(String(denied[0].msg), /deploy\/rbac\.yaml/);
  await a.stop();
});

test('without `create events` the agent says so at start, before any fault, naming the permission', async () => {
  const node = 'rbac-no-events';
  await cluster.createNode(node);
  const rules = shippedClusterRoleRules()
    .map((r) => ({ ...r, verbs: r.resources?.includes('events') ? r.verbs?.filter((v) => v !== 'create') : r.verbs }))
    .filter((r) => r.verbs?.length);
  assert.ok(!rules.some((r) => r.resources!.includes('events') && r.verbs.includes('create')));
  const kubeconfig = await cluster.serviceAccountKubeconfig('vigil-no-events', rules);
  const { log, lines } = captureLog();
  const a = await startAgent(kubeconfig, node, log);
  await waitFor(
    'the refused preflight',
    async () => (await a.metric('vigil_k8s_event_writes_total', { op: 'preflight', result: '403' })) === 1,
  );
  const denied = lines.filter((l) => l.status === 403);
  assert.equal(denied.length, 1, `one 403 line: ${JSON.stringify(denied)}`);
  assert.equal(denied[0].dryRun, true);
  assert.match(String(denied[0].msg), /create events/);
  assert.equal(await a.metric('vigil_findings_total'), 0, 'said before any fault');
  await a.stop();
});
