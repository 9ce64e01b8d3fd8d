/**
 * deploy/admission-policy.yaml on a real v1.34 API server: Vigil's ServiceAccount, holding a token
 * bound to a pod on node A, may change A's conditions and is refused on node B. RBAC alone would
 * allow both (a ServiceAccount is not confined by NodeRestriction).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '@kubernetes/client-node';
import { ADMISSION_POLICY_YAML, conditionsOf, startCluster, startVigil, waitFor, type TestCluster } from '../helpers/cluster.ts';

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
  const denied = b.lines.filter((l) => l.status === 403);
  assert.equal(denied.length, 1);
  assert.match(String(denied[0].msg), /admission policy, not RBAC/);
  assert.match(String(denied[0].msg), /vigil may only change the status of the node it runs on \(adm-a\), not adm-b/);
  await b.stop();
});
