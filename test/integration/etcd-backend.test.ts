/**
 * The API server on a real etcd (test/cluster/up.sh --storage etcd, built by build-etcd.sh): Vigil,
 * holding a token bound to a pod on its Node and confined by deploy/admission-policy.yaml, writes its
 * Fatal condition, and etcd itself (its v3 JSON gateway and its metrics, not the API server) holds the
 * Node with that condition. The API server restarts onto the same etcd data, and down.sh stops etcd
 * and removes its data (issue #26 point 2).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { ADMISSION_POLICY_YAML, conditionsOf, startCluster, startVigil, waitFor, type TestCluster } from '../helpers/cluster.ts';

const smp = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch);

let cluster: TestCluster;
before(async () => {
  cluster = await startCluster({ storage: 'etcd' });
});
after(async () => {
  await cluster?.stop();
});

interface RangeResponse {
  header?: { revision?: string };
  kvs?: { key: string; value: string; mod_revision?: string; version?: string }[];
  count?: string;
}

/** A range read of one key through etcd's own gRPC gateway (/v3/kv/range), not the API server. */
async function etcdGet(key: string): Promise<{ value: Buffer; modRevision: number } | undefined> {
  const res = await fetch(`${cluster.etcdUrl}/v3/kv/range`, {
    method: 'POST',
    body: JSON.stringify({ key: Buffer.from(key).toString('base64') }),
  });
  assert.equal(res.status, 200, `etcd range ${key}`);
  const body = (await res.json()) as RangeResponse;
  const kv = body.kvs?.[0];
  return kv ? { value: Buffer.from(kv.value, 'base64'), modRevision: Number(kv.mod_revision) } : undefined;
}

function metric(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : NaN;
}

test('up.sh --storage etcd: the API server stores in a real etcd, and cluster.json says so', async () => {
  assert.equal(cluster.storage, 'etcd');
  assert.ok(cluster.etcdUrl, 'etcd client URL');
  const health = (await (await fetch(`${cluster.etcdUrl}/health`)).json()) as { health: string };
  assert.equal(health.health, 'true');
  const version = (await (await fetch(`${cluster.etcdUrl}/version`)).json()) as { etcdserver: string };
  assert.match(version.etcdserver, /^3\.7\./);
  // The bootstrap objects the API server wrote are in etcd under its /registry prefix.
  assert.ok(await etcdGet('/registry/namespaces/default'), 'namespace default in etcd');
  assert.equal(metric(await cluster.etcdMetrics(), 'etcd_server_has_leader'), 1);
});

test("Vigil's Fatal condition, written through the admission policy, is in etcd's copy of the Node", async () => {
  await cluster.apply(ADMISSION_POLICY_YAML);
  const node = 'etcd-node-1';
  await cluster.createNode(node);
  const before = await etcdGet(`/registry/minions/${node}`);
  assert.ok(before, 'the Node is in etcd');
  const putsBefore = metric(await cluster.etcdMetrics(), 'etcd_mvcc_put_total');

  const kubeconfig = cluster.kubeconfigForToken(await cluster.tokenForPodOnNode(node), `vigil-${node}`);
  // The policy is in force (it takes effect shortly after its binding): this token may not touch another Node.
  await cluster.createNode('etcd-node-2');
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfig);
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const probe = { status: { conditions: [{ type: 'KernelReady', status: 'True', reason: 'KernelIsReady', message: 'probe' }] } };
  await waitFor('the admission policy to refuse another Node', async () => {
    try {
      await core.patchNodeStatus({ name: 'etcd-node-2', body: probe }, smp);
      return false;
    } catch (err) {
      return err instanceof k8s.ApiException && (err.code === 422 || err.code === 403);
    }
  });
  const vigil = startVigil({ kubeconfig, nodeName: node });
  try {
    await vigil.started;
    vigil.engine.finding({
      reason: 'NvidiaXID79Error',
      message: 'GPU has fallen off the bus',
      source: 'kmsg',
      entity: 'gpu:0000:3b:00.0',
      at: Date.now(),
      attrs: { xid: 79 },
    });
    const shown = await waitFor('AcceleratedHardwareReady=False through the API server', async () => {
      const c = conditionsOf(await cluster.readNode(node)).get('AcceleratedHardwareReady');
      return c?.status === 'False' ? c : undefined;
    });
    assert.match(shown.message ?? '', /0000:3b:00\.0/);

    // etcd's own copy (protobuf; strings are stored as they are) carries the condition and its message.
    const after = await etcdGet(`/registry/minions/${node}`);
    assert.ok(after && after.modRevision > before.modRevision, 'the Node was rewritten in etcd');
    const stored = after.value.toString('latin1');
    assert.ok(stored.startsWith('k8s\x00'), 'stored as the API server protobuf encoding');
    assert.ok(stored.includes('AcceleratedHardwareReady'), 'the condition type is in etcd');
    assert.ok(stored.includes('0000:3b:00.0'), 'the condition message naming the GPU is in etcd');
    assert.ok(metric(await cluster.etcdMetrics(), 'etcd_mvcc_put_total') > putsBefore, 'etcd counted the puts');
  } finally {
    await vigil.stop();
  }
});

test('the API server restarts onto the same etcd data', async () => {
  await cluster.stopApiserver();
  await cluster.startApiserver();
  const c = conditionsOf(await cluster.readNode('etcd-node-1')).get('AcceleratedHardwareReady');
  assert.equal(c?.status, 'False');
  const list = await cluster.admin.core.listNode();
  assert.ok(list.items.some((n: k8s.V1Node) => n.metadata?.name === 'etcd-node-1'));
});

test('down.sh stops etcd and removes its data', async () => {
  const pid = cluster.etcdPid;
  assert.ok(pid && existsSync(`/proc/${pid}`), 'etcd runs');
  const dataDir = path.join(cluster.dir, 'etcd');
  assert.ok(existsSync(dataDir));
  await cluster.stop();
  assert.equal(existsSync(`/proc/${pid}/status`), false, 'etcd stopped');
  assert.equal(existsSync(dataDir), false, 'its data removed');
});
