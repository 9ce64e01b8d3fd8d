/**
 * deploy/admission-policy.yaml on a real v1.34 API server: Vigil's ServiceAccount, holding a token
 * bound to a pod on node A, may change A's conditions and is refused on node B. RBAC alone would
 * allow both (a ServiceAccount is not confined by NodeRestriction). On its own node it may change
 * only its own condition types and quarantine marks, and it may post Events only about its own
 * node, in the Event namespace, as Vigil (issue #22 points 4 and 5).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '@kubernetes/client-node';
import { REPORTING_CONTROLLER } from '../../src/kube/index.ts';
import { CORDONED_BY_VIGIL_ANNOTATION, QUARANTINED_LABEL, QUARANTINE_TAINT_KEY } from '../../src/remediation/index.ts';
import { ADMISSION_POLICY_YAML, conditionsOf, eventsFor, startCluster, startVigil, waitFor, type TestCluster } from '../helpers/cluster.ts';

const RBAC_QUARANTINE_YAML = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../deploy/rbac-quarantine.yaml');

let cluster: TestCluster;
before(async () => {
  cluster = await startCluster();
});
after(async () => {
  await cluster?.stop();
});

const smp = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch);

async function patchCondition(kubeconfig: string, node: string): Promise<number> {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfig);
  try {
    await kc.makeApiClient(k8s.CoreV1Api).patchNodeStatus(
      {
        name: node,
        body: {
          status: {
            conditions: [
              {
                type: 'KernelReady',
                status: 'True',
                reason: 'KernelIsReady',
                message: 'probe',
                lastTransitionTime: new Date().toISOString(),
              },
            ],
          },
        },
      },
      smp,
    );
    return 200;
  } catch (err) {
    if (err instanceof k8s.ApiException) return err.code;
    throw err;
  }
}

test('a pod-bound token carries its node name in userInfo.extra', async () => {
  await cluster.createNode('adm-probe');
  const kubeconfig = cluster.kubeconfigForToken(await cluster.tokenForPodOnNode('adm-probe'), 'adm-probe');
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfig);
  const review = await kc.makeApiClient(k8s.AuthenticationV1Api).createSelfSubjectReview({ body: {} });
  const user = review.status!.userInfo!;
  assert.equal(user.username, 'system:serviceaccount:vigil:vigil');
  // The policy relies on this (ServiceAccountTokenPodNodeInfo, GA since 1.32).
  assert.deepEqual(user.extra?.['authentication.kubernetes.io/node-name'], ['adm-probe']);
});

test('with the admission policy, Vigil may change its own Node and is refused on another', async () => {
  await cluster.createNode('adm-a');
  await cluster.createNode('adm-b');
  const onA = cluster.kubeconfigForToken(await cluster.tokenForPodOnNode('adm-a'), 'pod-on-a');
  // Without the policy, RBAC lets the token write any Node: that is the gap being closed.
  assert.equal(await patchCondition(onA, 'adm-b'), 200);

  await cluster.apply(ADMISSION_POLICY_YAML);
  // A new policy takes effect shortly after its binding; wait until it denies.
  await waitFor('the policy to deny node B', async () => (await patchCondition(onA, 'adm-b')) === 403, 20_000, 200);
  assert.equal(await patchCondition(onA, 'adm-a'), 200, 'own node still allowed');
  assert.equal(await patchCondition(cluster.vigilKubeconfig, 'adm-a'), 403, 'a token bound to no pod has no node: refused');
  assert.equal(await patchCondition(cluster.adminKubeconfig, 'adm-b'), 200, 'other users are not affected');

  // The real sink, with the pod-on-A token: A gets Vigil's conditions...
  const a = startVigil({ kubeconfig: onA, nodeName: 'adm-a' });
  await a.started;
  a.engine.finding({ reason: 'NvidiaXID79Error', message: 'GPU has fallen off the bus', source: 'kmsg', entity: 'gpu:0', at: Date.now() });
  await waitFor(
    'A shows the fault',
    async () => conditionsOf(await cluster.readNode('adm-a')).get('AcceleratedHardwareReady')?.status === 'False',
  );
  await a.stop();

  // ...while a Vigil misconfigured to write B is refused, and says why in one line.
  const b = startVigil({ kubeconfig: onA, nodeName: 'adm-b' });
  await b.started;
  await waitFor('refused writes', () => b.metric('vigil_k8s_condition_writes_total', { result: '403' }).then((n) => n >= 2));
  const node = conditionsOf(await cluster.readNode('adm-b'));
  assert.equal(node.has('AcceleratedHardwareReady'), false);
  // One line each: the status write, and the dry-run Event create at start (its Events about B are refused too).
  const denied = b.lines.filter((l) => l.status === 403);
  assert.equal(denied.length, 2, JSON.stringify(denied));
  const status = denied.find((l) => l.dryRun !== true);
  const events = denied.find((l) => l.dryRun === true);
  assert.match(String(status?.msg), /admission policy, not RBAC/);
  assert.match(String(status?.msg), /vigil may only change the status of the node it runs on \(adm-a\), not adm-b/);
  assert.match(String(events?.msg), /create events/);
  assert.match(String(events?.msg), /Events only about the node it runs on \(adm-a\), not Node adm-b/);
  await b.stop();
});

// ---- Issue #22 points 4 and 5: what Vigil's pod-bound token may write on its own node, and which Events.

const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

/** The HTTP status of one request, and the API server's message when refused. */
async function attempt(request: () => Promise<unknown>): Promise<{ code: number; message: string }> {
  try {
    await request();
    return { code: 200, message: '' };
  } catch (err) {
    if (!(err instanceof k8s.ApiException)) throw err;
    const body: unknown = err.body;
    const text = typeof body === 'string' ? body : JSON.stringify(body);
    let message = text;
    try {
      message = String((JSON.parse(text) as { message?: string }).message ?? text);
    } catch {
      // not JSON: keep the text
    }
    return { code: err.code, message };
  }
}

function clients(kubeconfig: string) {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfig);
  return { core: kc.makeApiClient(k8s.CoreV1Api), events: kc.makeApiClient(k8s.EventsV1Api) };
}

let policyApplied: Promise<void> | undefined;
/** deploy/admission-policy.yaml and deploy/rbac-quarantine.yaml applied, and the policy in force. */
function policyInForce(): Promise<void> {
  return (policyApplied ??= (async () => {
    await cluster.apply(RBAC_QUARANTINE_YAML);
    await cluster.apply(ADMISSION_POLICY_YAML);
    await cluster.createNode('adm-probe-policy');
    // A token bound to no pod is refused once the policy is in force.
    await waitFor(
      'the admission policy to be in force',
      async () => (await patchCondition(cluster.vigilKubeconfig, 'adm-probe-policy')) === 403,
      20_000,
      200,
    );
  })());
}

/** A node, and Vigil's identity on it: a ServiceAccount token bound to a pod scheduled there. */
async function vigilOn(node: string): Promise<ReturnType<typeof clients>> {
  await policyInForce();
  await cluster.createNode(node);
  return clients(cluster.kubeconfigForToken(await cluster.tokenForPodOnNode(node), `pod-on-${node}`));
}

let seq = 0;
/** An Event as Vigil's sink writes it (src/sinks/kubernetes/events.ts), with some fields replaced. */
function vigilEvent(node: string, namespace = 'default', over: Partial<k8s.EventsV1Event> = {}): k8s.EventsV1Event {
  return {
    metadata: { name: `${node}.t${(++seq).toString(16)}`, namespace },
    eventTime: new k8s.V1MicroTime(Date.now()),
    type: 'Warning',
    reason: 'NvidiaXID79Error',
    note: 'gpu:0: GPU has fallen off the bus',
    action: 'Detected',
    reportingController: REPORTING_CONTROLLER,
    reportingInstance: `vigil-${node}`,
    regarding: { kind: 'Node', apiVersion: 'v1', name: node },
    ...over,
  };
}

test("Events: Vigil's token may post and update Events about its own Node in the Event namespace as vigil.dev/node-health-agent", async () => {
  const own = await vigilOn('ev-own');
  const e = vigilEvent('ev-own');
  assert.equal((await attempt(() => own.events.createNamespacedEvent({ namespace: 'default', body: e }))).code, 200);
  const series = { series: { count: 2, lastObservedTime: new Date().toISOString().replace(/\.(\d{3})Z$/, '.$1000Z') } };
  const patched = await attempt(() =>
    own.events.patchNamespacedEvent({ name: e.metadata!.name!, namespace: 'default', body: series }, smp),
  );
  assert.equal(patched.code, 200, patched.message);

  // The real sink with that token: its Warning lands as an Event on the Node, and no write is refused.
  const kubeconfig = cluster.kubeconfigForToken(await cluster.tokenForPodOnNode('ev-own'), 'pod-on-ev-own-sink');
  const v = startVigil({ kubeconfig, nodeName: 'ev-own' });
  await v.started;
  v.engine.finding({ reason: 'NvidiaXID13Error', message: 'graphics engine exception', source: 'kmsg', entity: 'gpu:0', at: Date.now() });
  await waitFor('the Event', async () => (await eventsFor(cluster, 'ev-own')).some((x) => x.reason === 'NvidiaXID13Error'));
  assert.equal(await v.metric('vigil_k8s_event_writes_total', { result: '403' }), 0);
  await v.stop();
});

test('Events: an Event in another namespace than the Event namespace is refused, naming both', async () => {
  const own = await vigilOn('ev-ns');
  // kube-system is the one other namespace the API server itself allows for an Event about a Node.
  const r = await attempt(() => own.events.createNamespacedEvent({ namespace: 'kube-system', body: vigilEvent('ev-ns', 'kube-system') }));
  assert.equal(r.code, 403, r.message);
  assert.match(r.message, /vigil may write Events only in namespace default, not kube-system/);
  const list = await cluster.admin.events.listNamespacedEvent({ namespace: 'kube-system' });
  assert.equal(list.items.filter((x) => x.regarding?.name === 'ev-ns').length, 0);
});

test('Events: an Event about another Node, a Pod, or with a related object is refused', async () => {
  const own = await vigilOn('ev-obj');
  await cluster.createNode('ev-victim');
  const create = (body: k8s.EventsV1Event) => attempt(() => own.events.createNamespacedEvent({ namespace: 'default', body }));

  const otherNode = await create(vigilEvent('ev-victim'));
  assert.equal(otherNode.code, 403, otherNode.message);
  assert.match(otherNode.message, /only about the node it runs on \(ev-obj\), not Node ev-victim/);
  const pod = await create(
    vigilEvent('ev-obj', 'default', { regarding: { kind: 'Pod', apiVersion: 'v1', namespace: 'default', name: 'payments-api' } }),
  );
  assert.equal(pod.code, 403, pod.message);
  const related = await create(
    vigilEvent('ev-obj', 'default', { related: { kind: 'Pod', apiVersion: 'v1', namespace: 'default', name: 'payments-api' } }),
  );
  assert.equal(related.code, 403, related.message);
  assert.deepEqual(await eventsFor(cluster, 'ev-victim'), []);
});

test('Events: an Event claiming reportingController kubelet is refused', async () => {
  const own = await vigilOn('ev-ctl');
  const create = (body: k8s.EventsV1Event) => attempt(() => own.events.createNamespacedEvent({ namespace: 'default', body }));
  const kubelet = await create(vigilEvent('ev-ctl', 'default', { reportingController: 'kubelet', reason: 'NodeNotReady' }));
  assert.equal(kubelet.code, 403, kubelet.message);
  assert.match(kubelet.message, /only as reportingController vigil\.dev\/node-health-agent, not kubelet/);
  // deprecatedSource (what kubectl describe would show first) is refused by the API server's own
  // validation on events.k8s.io; the policy checks it too, for core/v1 Events.
  assert.deepEqual(await eventsFor(cluster, 'ev-ctl'), []);
});

test("Events: Vigil's token may not update another controller's Event, nor post any Event with a token bound to no pod", async () => {
  const own = await vigilOn('ev-upd');
  const kubeletEvent = vigilEvent('ev-upd', 'default', { reportingController: 'kubelet', reportingInstance: 'ev-upd', reason: 'Starting' });
  await cluster.admin.events.createNamespacedEvent({ namespace: 'default', body: kubeletEvent });
  const series = { series: { count: 5, lastObservedTime: new Date().toISOString().replace(/\.(\d{3})Z$/, '.$1000Z') } };
  const r = await attempt(() =>
    own.events.patchNamespacedEvent({ name: kubeletEvent.metadata!.name!, namespace: 'default', body: series }, smp),
  );
  assert.equal(r.code, 403, r.message);
  const unbound = clients(cluster.vigilKubeconfig);
  const u = await attempt(() => unbound.events.createNamespacedEvent({ namespace: 'default', body: vigilEvent('ev-upd') }));
  assert.equal(u.code, 403, u.message);
  const shown = (await eventsFor(cluster, 'ev-upd')).find((x) => x.metadata?.name === kubeletEvent.metadata!.name);
  assert.equal(shown?.series, undefined);
});

/** A strategic merge patch of nodes/status. */
function statusPatch(c: ReturnType<typeof clients>, node: string, status: object, metadata?: object) {
  return attempt(() => c.core.patchNodeStatus({ name: node, body: { ...(metadata ? { metadata } : {}), status } }, smp));
}

test("Node status: Vigil's token may set, change and remove its own condition types on its Node", async () => {
  const own = await vigilOn('st-own');
  const now = new Date().toISOString();
  const kernel = {
    type: 'KernelReady',
    status: 'True',
    reason: 'KernelIsReady',
    message: 'ok',
    lastTransitionTime: now,
    lastHeartbeatTime: now,
  };
  const gpu = { type: 'AcceleratedHardwareReady', status: 'False', reason: 'NvidiaXID79Error', message: 'gpu:0', lastTransitionTime: now };
  assert.equal((await statusPatch(own, 'st-own', { conditions: [kernel, gpu] })).code, 200);
  assert.equal((await statusPatch(own, 'st-own', { conditions: [{ ...kernel, status: 'False', reason: 'KernelBug' }] })).code, 200);
  assert.equal((await statusPatch(own, 'st-own', { conditions: [{ type: 'AcceleratedHardwareReady', $patch: 'delete' }] })).code, 200);
  const shown = conditionsOf(await cluster.readNode('st-own'));
  assert.equal(shown.get('KernelReady')?.status, 'False');
  assert.equal(shown.has('AcceleratedHardwareReady'), false);
  assert.equal(shown.get('Ready')?.status, 'True');
});

test("Node status: Ready=False, removing Ready, or another agent's condition type is refused, naming the type", async () => {
  const own = await vigilOn('st-ready');
  const now = new Date().toISOString();
  const notReady = await statusPatch(own, 'st-ready', {
    conditions: [
      { type: 'Ready', status: 'False', reason: 'KubeletNotReady', message: 'spoofed', lastTransitionTime: now, lastHeartbeatTime: now },
    ],
  });
  assert.equal(notReady.code, 403, notReady.message);
  assert.match(
    notReady.message,
    /vigil may change only its own condition types \(KernelReady, NetworkingReady, StorageReady, ContainerRuntimeReady, AcceleratedHardwareReady\), not Ready/,
  );
  assert.equal((await statusPatch(own, 'st-ready', { conditions: [{ type: 'Ready', $patch: 'delete' }] })).code, 403);
  const npd = await statusPatch(own, 'st-ready', {
    conditions: [{ type: 'KernelDeadlock', status: 'False', reason: 'KernelHasNoDeadlock', message: 'x', lastTransitionTime: now }],
  });
  assert.equal(npd.code, 403, npd.message);
  // One refused entry refuses the whole patch, Vigil's own entries with it.
  const mixed = await statusPatch(own, 'st-ready', {
    conditions: [
      { type: 'KernelReady', status: 'True', reason: 'KernelIsReady', message: 'ok', lastTransitionTime: now },
      { type: 'Ready', status: 'False', reason: 'KubeletNotReady', message: 'spoofed', lastTransitionTime: now },
    ],
  });
  assert.equal(mixed.code, 403);
  const shown = conditionsOf(await cluster.readNode('st-ready'));
  assert.equal(shown.get('Ready')?.status, 'True');
  assert.equal(shown.has('KernelDeadlock'), false);
  assert.equal(shown.has('KernelReady'), false);
});

test('Node status: addresses, capacity (nvidia.com/gpu: 64), allocatable, nodeInfo, labels and annotations are refused', async () => {
  const own = await vigilOn('st-res');
  const before = await cluster.readNode('st-res');
  // 192.0.2.0/24 is TEST-NET-1: only written into the object, never contacted.
  for (const [what, status] of [
    ['addresses', { addresses: [{ type: 'InternalIP', address: '192.0.2.10' }] }],
    ['capacity', { capacity: { 'nvidia.com/gpu': '64' } }],
    ['allocatable', { allocatable: { 'nvidia.com/gpu': '64' } }],
    ['nodeInfo', { nodeInfo: { kubeletVersion: 'v9.9.9' } }],
  ] as const) {
    const r = await statusPatch(own, 'st-res', status);
    assert.equal(r.code, 403, `${what}: ${r.message}`);
    assert.match(r.message, /nothing in its node's status but its own conditions/, what);
  }
  assert.equal((await statusPatch(own, 'st-res', {}, { labels: { 'node-role.kubernetes.io/control-plane': '' } })).code, 403, 'label');
  assert.equal((await statusPatch(own, 'st-res', {}, { annotations: { 'example.com/a': 'x' } })).code, 403, 'annotation');
  const after = await cluster.readNode('st-res');
  assert.deepEqual(after.status?.addresses, before.status?.addresses);
  assert.deepEqual(after.status?.capacity, before.status?.capacity);
  assert.deepEqual(after.metadata?.labels, before.metadata?.labels);
});

test('Quarantine: the vigil.dev/unhealthy taint only with NoSchedule; NoExecute (evicting every pod) is refused', async () => {
  const own = await vigilOn('q-effect');
  const taints = (await cluster.readNode('q-effect')).spec?.taints ?? [];
  const taint = (effect: string) => ({
    spec: { taints: [...taints, { key: QUARANTINE_TAINT_KEY, value: 'KernelReady', effect }] },
  });
  const noExecute = await attempt(() => own.core.patchNode({ name: 'q-effect', body: taint('NoExecute') }, merge));
  assert.equal(noExecute.code, 403, noExecute.message);
  assert.match(noExecute.message, /only with effect NoSchedule/);
  assert.equal((await attempt(() => own.core.patchNode({ name: 'q-effect', body: taint('PreferNoSchedule') }, merge))).code, 403);
  assert.equal((await attempt(() => own.core.patchNode({ name: 'q-effect', body: taint('NoSchedule') }, merge))).code, 200);
  const shown = (await cluster.readNode('q-effect')).spec?.taints?.filter((t) => t.key === QUARANTINE_TAINT_KEY);
  assert.deepEqual(
    shown?.map((t) => t.effect),
    ['NoSchedule'],
  );
});

test('Quarantine: a node an operator cordoned cannot be uncordoned by Vigil, not even by marking it cordoned-by-vigil first', async () => {
  const own = await vigilOn('q-operator');
  await cluster.admin.core.patchNode({ name: 'q-operator', body: { spec: { unschedulable: true } } }, merge);
  const uncordon = await attempt(() => own.core.patchNode({ name: 'q-operator', body: { spec: { unschedulable: null } } }, merge));
  assert.equal(uncordon.code, 403, uncordon.message);
  assert.match(uncordon.message, /only when it cordoned it/);
  const withMark = await attempt(() =>
    own.core.patchNode(
      {
        name: 'q-operator',
        body: { metadata: { annotations: { [CORDONED_BY_VIGIL_ANNOTATION]: 'true' } }, spec: { unschedulable: false } },
      },
      merge,
    ),
  );
  assert.equal(withMark.code, 403, withMark.message);
  const markFirst = await attempt(() =>
    own.core.patchNode({ name: 'q-operator', body: { metadata: { annotations: { [CORDONED_BY_VIGIL_ANNOTATION]: 'true' } } } }, merge),
  );
  assert.equal(markFirst.code, 403, markFirst.message);
  assert.match(markFirst.message, /only when it cordons its node itself/);
  const node = await cluster.readNode('q-operator');
  assert.equal(node.spec?.unschedulable, true);
  assert.equal(node.metadata?.annotations?.[CORDONED_BY_VIGIL_ANNOTATION], undefined);
});

test("Quarantine: Vigil's own cordon (with its annotation) and uncordon still work; a cordon without the annotation is refused", async () => {
  const own = await vigilOn('q-cycle');
  const taints = (await cluster.readNode('q-cycle')).spec?.taints ?? [];
  const bare = await attempt(() => own.core.patchNode({ name: 'q-cycle', body: { spec: { unschedulable: true } } }, merge));
  assert.equal(bare.code, 403, bare.message);
  // The bodies src/remediation/quarantine.ts sends.
  const quarantine = await attempt(() =>
    own.core.patchNode(
      {
        name: 'q-cycle',
        body: {
          metadata: { labels: { [QUARANTINED_LABEL]: 'true' }, annotations: { [CORDONED_BY_VIGIL_ANNOTATION]: 'true' } },
          spec: { taints: [...taints, { key: QUARANTINE_TAINT_KEY, value: 'KernelReady', effect: 'NoSchedule' }], unschedulable: true },
        },
      },
      merge,
    ),
  );
  assert.equal(quarantine.code, 200, quarantine.message);
  const release = await attempt(() =>
    own.core.patchNode(
      {
        name: 'q-cycle',
        body: {
          metadata: { labels: { [QUARANTINED_LABEL]: null }, annotations: { [CORDONED_BY_VIGIL_ANNOTATION]: null } },
          spec: { taints: taints.length ? taints : null, unschedulable: null },
        },
      },
      merge,
    ),
  );
  assert.equal(release.code, 200, release.message);
  const node = await cluster.readNode('q-cycle');
  assert.equal(node.spec?.unschedulable, undefined);
  assert.equal(node.metadata?.annotations?.[CORDONED_BY_VIGIL_ANNOTATION], undefined);
});

test("Node status: after a rename, a stale type the policy will not let Vigil remove stays on the Node, and Vigil's own conditions are still written", async () => {
  await policyInForce();
  const now = new Date();
  // An earlier run wrote VigilKernelReady; the configuration (and so the policy) now names KernelReady.
  await cluster.createNode('st-stale', [
    {
      type: 'VigilKernelReady',
      status: 'True',
      reason: 'KernelIsReady',
      message: 'old name',
      lastTransitionTime: now,
      lastHeartbeatTime: now,
    },
  ]);
  const kubeconfig = cluster.kubeconfigForToken(await cluster.tokenForPodOnNode('st-stale'), 'pod-on-st-stale');
  const v = startVigil({ kubeconfig, nodeName: 'st-stale', sink: { writtenTypes: ['VigilKernelReady'], staleGraceMs: 0 } });
  await v.started;
  v.engine.finding({ reason: 'NvidiaXID79Error', message: 'GPU has fallen off the bus', source: 'kmsg', entity: 'gpu:0', at: Date.now() });
  await waitFor(
    'the fault on the Node',
    async () => conditionsOf(await cluster.readNode('st-stale')).get('AcceleratedHardwareReady')?.status === 'False',
  );
  assert.equal(conditionsOf(await cluster.readNode('st-stale')).get('VigilKernelReady')?.message, 'old name');
  assert.equal(v.sink.conditions.writtenTypes.includes('VigilKernelReady'), false, 'forgotten: not tried again');
  const said = v.lines.filter((l) => String(l.msg).includes('VigilKernelReady'));
  assert.equal(said.length, 1);
  assert.match(String(said[0].msg), /admission policy/);
  await v.stop();
});
