/**
 * Every distinct Fatal problem becomes visible on a real kube-apiserver, however many there are:
 * 100 Xid 79 faults on 100 distinct GPUs of one agent each change what the Node shows (the
 * condition's bounded message names the newest failing GPU and the count), although the condition
 * is already False after the first and the per-reason Event rate limit drops most of their Events.
 * Seen through a watch on the Node, as a repair engine would see it.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '@kubernetes/client-node';
import type { Finding } from '../../src/api/types.ts';
import { eventsFor, startCluster, startVigil, waitFor, type TestCluster } from '../helpers/cluster.ts';

let cluster: TestCluster;
before(async () => {
  cluster = await startCluster();
});
after(async () => {
  await cluster?.stop();
});

const xid79 = (entity: string): Finding => ({
  reason: 'NvidiaXID79Error',
  message: 'GPU has fallen off the bus',
  source: 'kmsg',
  entity,
  at: Date.now(),
  attrs: { xid: 79 },
});

test('100 Xid 79 faults on 100 distinct GPUs each change the condition the Node shows, naming the new GPU', async (t) => {
  const node = 'distinct-fatal';
  await cluster.createNode(node);
  // The production coalescing window and Event rate limit.
  const v = startVigil({ kubeconfig: cluster.vigilKubeconfig, nodeName: node, sink: { coalesceMs: 200, eventsPerReasonPerMinute: 6 } });
  t.after(() => v.stop());
  await v.started;

  const messages: string[] = [];
  let onMessage: () => void = () => {};
  const watch = new k8s.Watch(cluster.admin.kc);
  const abort = await watch.watch(
    '/api/v1/nodes',
    { fieldSelector: `metadata.name=${node}` },
    (_type: string, obj: k8s.V1Node) => {
      const c = obj.status?.conditions?.find((x) => x.type === 'AcceleratedHardwareReady');
      if (c?.status === 'False' && c.message) {
        messages.push(c.message);
        onMessage();
      }
    },
    () => {},
  );
  t.after(() => abort.abort());

  const gpus = Array.from({ length: 100 }, (_, i) => `gpu:0000:${(i + 1).toString(16).padStart(2, '0')}:00.0`);
  const unseen: string[] = [];
  for (const [i, gpu] of gpus.entries()) {
    const from = messages.length;
    const seen = new Promise<boolean>((resolve) => {
      const done = (ok: boolean) => {
        clearTimeout(timer);
        onMessage = () => {};
        resolve(ok);
      };
      const timer = setTimeout(() => done(false), 5000);
      onMessage = () => {
        const m = messages[messages.length - 1];
        if (m.includes(gpu) && (i === 0 || m.includes(`on ${i + 1} entities`) || !m.endsWith('...'))) done(true);
      };
    });
    v.engine.finding(xid79(gpu));
    if (!(await seen)) unseen.push(`${gpu} (messages since: ${messages.slice(from).join(' | ')})`);
  }
  assert.deepEqual(unseen, [], 'every new GPU was named on the Node');

  const last = messages[messages.length - 1];
  assert.ok(last.length <= 1024, `bounded message: ${last.length} characters`);
  assert.match(last, /NvidiaXID79Error on 100 entities: gpu:0000:01:00\.0, gpu:0000:02:00\.0, .*\(\+\d+ more, newest gpu:0000:64:00\.0\)$/);

  // Events alone would not have told it: the rate limit kept most of them back, and counted them.
  await waitFor('events written', () => v.sink.events.idle);
  const told = (await eventsFor(cluster, node)).filter((e) => e.reason === 'NvidiaXID79Error' && e.note?.startsWith('gpu:'));
  assert.ok(told.length < 100, `${told.length} Events for 100 GPUs`);
  assert.ok((await v.metric('vigil_k8s_events_dropped_total', { why: 'rate_limited' })) > 0);
});
