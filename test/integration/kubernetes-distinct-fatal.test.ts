/**
 * Every distinct Fatal problem becomes visible on a real kube-apiserver, however many there are:
 * 100 Xid 79 faults on 100 distinct GPUs of one agent each change what the Node shows (the
 * condition's bounded message names the newest failing GPU and the count), although the condition
 * is already False after the first; and each GPU is named in an Event, its own within the Fatal
 * Event budget, else a summary Event of the GPUs over it. A burst of 100 within one second: every
 * GPU named in an Event or the condition message. Seen through watches, as a repair engine would.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '@kubernetes/client-node';
import type { Finding } from '../../src/api/index.ts';
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

  // Past the Fatal Event budget (30 a minute) the GPUs are named in summary Events, none dropped
  // (at 4 a second the summary bucket runs short too: the last wait a token, up to 2 s, together).
  const xidEvents = async () => (await eventsFor(cluster, node)).filter((e) => e.reason === 'NvidiaXID79Error');
  await waitFor('every GPU named in an Event', async () => {
    const notes = (await xidEvents()).map((e) => e.note ?? '');
    return gpus.every((g) => notes.some((n) => n.includes(g)));
  }).catch(() => undefined);
  await waitFor('events written', () => v.sink.events.idle);
  const told = await xidEvents();
  const own = told.filter((e) => e.note?.startsWith('gpu:')).length;
  assert.ok(own >= 30 && own < 100, `${own} Events of their own: the budget and what it refilled meanwhile`);
  for (const gpu of gpus)
    assert.ok(
      told.some((e) => e.note?.includes(gpu)),
      `${gpu} named in an Event`,
    );
  assert.equal(await v.metric('vigil_k8s_events_dropped_total', { why: 'rate_limited' }), 0);
  assert.equal(await v.metric('vigil_k8s_event_entities_summarized_total'), 100 - own);
});

test('a burst of 100 Xid 79 faults on distinct GPUs within one second: every GPU is named in an Event or the condition message', async (t) => {
  const node = 'distinct-fatal-burst';
  await cluster.createNode(node);
  // As shipped: the production coalescing window and the Fatal Event budget (30 a minute).
  const v = startVigil({ kubeconfig: cluster.vigilKubeconfig, nodeName: node, sink: { coalesceMs: 200, eventsPerReasonPerMinute: 6 } });
  t.after(() => v.stop());
  await v.started;

  // What the API shows, as a watch sees it: the condition's messages and the Events' notes.
  const shown: string[] = [];
  const watch = new k8s.Watch(cluster.admin.kc);
  const nodes = await watch.watch(
    '/api/v1/nodes',
    { fieldSelector: `metadata.name=${node}` },
    (_type: string, obj: k8s.V1Node) => {
      const c = obj.status?.conditions?.find((x) => x.type === 'AcceleratedHardwareReady');
      if (c?.message) shown.push(c.message);
    },
    () => {},
  );
  t.after(() => nodes.abort());
  const events = await watch.watch(
    '/apis/events.k8s.io/v1/namespaces/default/events',
    {},
    (_type: string, e: k8s.EventsV1Event) => {
      if (e.regarding?.name === node && e.note) shown.push(e.note);
    },
    () => {},
  );
  t.after(() => events.abort());

  const gpus = Array.from({ length: 100 }, (_, i) => `gpu:0000:${(i + 0x81).toString(16)}:00.0`);
  for (const [i, gpu] of gpus.entries()) {
    v.engine.finding(xid79(gpu));
    if (i % 10 === 9) await new Promise((r) => setTimeout(r, 90));
  }
  const unnamed = () => gpus.filter((g) => !shown.some((m) => m.includes(g)));
  await waitFor('every GPU named', () => unnamed().length === 0, 20_000).catch(() => undefined);
  assert.deepEqual(unnamed(), [], 'every GPU of the burst is named in the API');
  await waitFor('events written', () => v.sink.events.idle);
  assert.equal(await v.metric('vigil_k8s_events_dropped_total'), 0, 'no Event dropped');
  const told = (await eventsFor(cluster, node)).filter((e) => e.reason === 'NvidiaXID79Error');
  for (const e of told) assert.ok((e.note ?? '').length <= 1024);
  // Events of their own within the budget (30) while the queue of creates is short (8); the others
  // named together in a few summaries (each gathers 200 ms, up to about 50 GPUs).
  const own = told.filter((e) => e.note?.startsWith('gpu:')).length;
  assert.ok(own >= 8 && own <= 30, `${own} Events of their own`);
  assert.equal(await v.metric('vigil_k8s_event_entities_summarized_total'), 100 - own);
  assert.ok(told.length <= 45, `${told.length} Events for 100 GPUs`);
});
