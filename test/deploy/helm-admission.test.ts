/**
 * The chart's admission policy (deploy/admission-policy.yaml, rendered by
 * templates/admission-policy.yaml) pins what the values configure: Events only in `eventNamespace`,
 * node status only for the condition types of `conditions.names` and `conditions.extraTypes`.
 * Rendered by the real helm, applied to a real kube-apiserver, exercised with Vigil's pod-bound
 * token (issue #22 points 4 and 5).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '@kubernetes/client-node';
import { REPORTING_CONTROLLER } from '../../src/kube/index.ts';
import { startCluster, waitFor, type TestCluster } from '../helpers/cluster.ts';
import { ensureTools, helmTemplate, only } from './tools.ts';

let cluster: TestCluster;
before(async () => {
  ensureTools();
  cluster = await startCluster();
});
after(async () => {
  await cluster?.stop();
});

const smp = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch);

async function status(request: () => Promise<unknown>): Promise<number> {
  try {
    await request();
    return 200;
  } catch (err) {
    if (err instanceof k8s.ApiException) return err.code;
    throw err;
  }
}

test('helm renders eventNamespace and the condition types (renamed names plus extraTypes) into the policy, and the API server enforces them', async () => {
  // Release namespace and ServiceAccount "vigil": the identity the test cluster's pod-bound tokens carry.
  const docs = helmTemplate(
    {
      eventNamespace: 'kube-system',
      conditions: { names: { KernelReady: 'VigilKernelReady' }, extraTypes: ['KernelDeadlock'] },
    },
    { namespace: 'vigil', release: 'vigil' },
  );
  const policy = only<k8s.V1ValidatingAdmissionPolicy>(docs, 'ValidatingAdmissionPolicy');
  const variable = (name: string) => policy.spec?.variables?.find((v) => v.name === name)?.expression;
  assert.equal(variable('eventNamespace'), '"kube-system"');
  assert.deepEqual(JSON.parse(variable('conditionTypes') ?? ''), [
    'AcceleratedHardwareReady',
    'ContainerRuntimeReady',
    'KernelDeadlock',
    'NetworkingReady',
    'StorageReady',
    'VigilKernelReady',
  ]);
  for (const d of docs.filter((x) => x.kind.startsWith('ValidatingAdmissionPolicy'))) await cluster.admin.objects.create(d);

  await cluster.createNode('chart-a');
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(cluster.kubeconfigForToken(await cluster.tokenForPodOnNode('chart-a'), 'pod-on-chart-a'));
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const events = kc.makeApiClient(k8s.EventsV1Api);
  const condition = (type: string) =>
    status(() =>
      core.patchNodeStatus(
        {
          name: 'chart-a',
          body: {
            status: {
              conditions: [{ type, status: 'True', reason: 'Probe', message: 'probe', lastTransitionTime: new Date().toISOString() }],
            },
          },
        },
        smp,
      ),
    );
  await waitFor('the policy to be in force', async () => (await condition('Ready')) === 403, 20_000, 200);

  assert.equal(await condition('VigilKernelReady'), 200, 'a renamed type');
  assert.equal(await condition('KernelDeadlock'), 200, 'an extraTypes entry');
  assert.equal(await condition('StorageReady'), 200, 'a type left as it is');
  assert.equal(await condition('KernelReady'), 403, "the built-in name, renamed away: another agent's type now");

  let n = 0;
  const event = (namespace: string) =>
    status(() =>
      events.createNamespacedEvent({
        namespace,
        body: {
          metadata: { name: `chart-a.c${++n}`, namespace },
          eventTime: new k8s.V1MicroTime(Date.now()),
          type: 'Warning',
          reason: 'NvidiaXID79Error',
          note: 'probe',
          action: 'Detected',
          reportingController: REPORTING_CONTROLLER,
          reportingInstance: 'vigil-chart-a',
          regarding: { kind: 'Node', apiVersion: 'v1', name: 'chart-a' },
        },
      }),
    );
  assert.equal(await event('kube-system'), 200, 'the configured eventNamespace');
  assert.equal(await event('default'), 403, 'any other namespace');
});
