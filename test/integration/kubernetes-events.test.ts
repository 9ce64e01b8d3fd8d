/**
 * Findings reach a real kube-apiserver as Vigil means them to: a Fatal finding as a False
 * condition, a Warning as an events.k8s.io/v1 Event about the Node, and a storm of one warning as
 * a single Event series rather than one Event per repeat.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Finding } from '../../src/api/index.ts';
import { REPORTING_CONTROLLER } from '../../src/kube/index.ts';
import { conditionsOf, eventsFor, startCluster, startVigil, waitFor, type TestCluster } from '../helpers/cluster.ts';

let cluster: TestCluster;
before(async () => {
  cluster = await startCluster();
});
after(async () => {
  await cluster?.stop();
});

const finding = (reason: Finding['reason'], entity: string, message: string): Finding => ({
  reason,
  message,
  source: 'kmsg',
  entity,
  at: Date.now(),
});

test('a Fatal finding sets its condition False; a Warning becomes one events.k8s.io/v1 Event on the Node', async () => {
  const node = 'ev-basic';
  const created = await cluster.createNode(node);
  const v = startVigil({ kubeconfig: cluster.vigilKubeconfig, nodeName: node, sink: { instance: 'vigil-pod-abc' } });
  await v.started;

  v.engine.finding(finding('NvidiaXID79Error', 'gpu:0000:3b:00', 'GPU has fallen off the bus'));
  const c = await waitFor('AcceleratedHardwareReady=False', async () => {
    const x = conditionsOf(await cluster.readNode(node)).get('AcceleratedHardwareReady');
    return x?.status === 'False' && x;
  });
  assert.equal(c.reason, 'NvidiaXID79Error');
  assert.match(c.message!, /NvidiaXID79Error on gpu:0000:3b:00: GPU has fallen off the bus/);

  v.engine.finding(finding('SoftLockup', '', 'watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [python3:1234]'));
  const ev = await waitFor('the SoftLockup Event', async () => (await eventsFor(cluster, node)).find((e) => e.reason === 'SoftLockup'));
  assert.equal(ev.type, 'Warning');
  assert.equal(ev.note, 'watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [python3:1234]');
  assert.equal(ev.reportingController, REPORTING_CONTROLLER);
  assert.equal(ev.reportingInstance, 'vigil-pod-abc');
  assert.equal(ev.action, 'Detected');
  assert.equal(ev.metadata?.namespace, 'default');
  assert.deepEqual(
    { kind: ev.regarding?.kind, apiVersion: ev.regarding?.apiVersion, name: ev.regarding?.name, uid: ev.regarding?.uid },
    { kind: 'Node', apiVersion: 'v1', name: node, uid: created.metadata!.uid },
  );
  assert.ok(ev.eventTime, 'eventTime set');
  assert.equal(ev.series, undefined, 'a single occurrence has no series');

  // The Fatal finding is told at once as an Event naming its entity, and the condition change as another.
  const told = await waitFor('the Fatal finding Event', async () =>
    (await eventsFor(cluster, node)).find(
      (e) => e.reason === 'NvidiaXID79Error' && e.note === 'gpu:0000:3b:00: GPU has fallen off the bus',
    ),
  );
  assert.equal(told.type, 'Warning');
  const transition = await waitFor('the transition Event', async () =>
    (await eventsFor(cluster, node)).find((e) => e.reason === 'NvidiaXID79Error' && e.note?.startsWith('AcceleratedHardwareReady is')),
  );
  assert.equal(transition.type, 'Warning');
  assert.match(transition.note!, /^AcceleratedHardwareReady is False: /);
  await v.stop();
});

test('50 repeats of one warning make ONE Event with a series of 50', async () => {
  const node = 'ev-series';
  await cluster.createNode(node);
  const v = startVigil({ kubeconfig: cluster.vigilKubeconfig, nodeName: node, sink: { seriesFlushMs: 200 } });
  await v.started;
  for (let i = 0; i < 50; i++) v.engine.finding(finding('AppCrash', 'pid:4242', 'python3[4242]: segfault at 0 ip 00007f error 4'));

  const ev = await waitFor(
    'series.count 50',
    async () => {
      const mine = (await eventsFor(cluster, node)).filter((e) => e.reason === 'AppCrash');
      return mine.length === 1 && mine[0].series?.count === 50 && mine[0];
    },
    20_000,
  );
  assert.ok(ev.series!.lastObservedTime, 'lastObservedTime set');
  // Let the flush timer run a few more times: still one Event, count unchanged.
  await new Promise((r) => setTimeout(r, 600));
  const again = (await eventsFor(cluster, node)).filter((e) => e.reason === 'AppCrash');
  assert.equal(again.length, 1);
  assert.equal(again[0].series?.count, 50);
  assert.equal(await v.metric('vigil_k8s_event_writes_total', { op: 'create', result: 'ok' }), 1);
  assert.equal(await v.metric('vigil_k8s_events_dropped_total'), 0);
  await v.stop();
});

test('a warning that repeats only after its first flush gap waits for the long refresh: no Event write per repeat', async () => {
  const node = 'ev-slow-repeat';
  await cluster.createNode(node);
  const v = startVigil({ kubeconfig: cluster.vigilKubeconfig, nodeName: node, sink: { seriesFlushMs: 200, seriesRefreshMs: 60_000 } });
  await v.started;
  const crash = () => finding('AppCrash', 'pid:777', 'python3[777]: segfault at 0 ip 00007f error 4');
  v.engine.finding(crash());
  await waitFor('the Event', async () => (await eventsFor(cluster, node)).some((e) => e.reason === 'AppCrash'));
  await new Promise((r) => setTimeout(r, 700)); // past the first gap, with no repeat in it
  v.engine.finding(crash());
  await new Promise((r) => setTimeout(r, 700));
  assert.equal(await v.metric('vigil_k8s_event_writes_total', { op: 'create', result: 'ok' }), 1);
  assert.equal(await v.metric('vigil_k8s_event_writes_total', { op: 'series', result: 'ok' }), 0, 'the repeat waits for the refresh');
  v.sink.events.flush(); // shutdown writes what is pending
  const ev = await waitFor('series.count 2', async () =>
    (await eventsFor(cluster, node)).find((e) => e.reason === 'AppCrash' && e.series?.count === 2),
  );
  assert.ok(ev);
  await v.stop();
});

test('Fatal findings have a budget of their own: every newly failing GPU is named in an Event while Warnings are held to their rate', async () => {
  const node = 'ev-fatal-rate';
  await cluster.createNode(node);
  const v = startVigil({
    kubeconfig: cluster.vigilKubeconfig,
    nodeName: node,
    sink: { eventsPerReasonPerMinute: 3, fatalEventsPerReasonPerMinute: 10 },
  });
  await v.started;
  for (let i = 0; i < 6; i++) v.engine.finding(finding('NvidiaPCIeError', `gpu:${i}`, `replay counter rose on GPU ${i}`));
  for (let i = 0; i < 12; i++) v.engine.finding(finding('NvidiaXID79Error', `gpu:0000:${10 + i}:00.0`, `GPU ${i} has fallen off the bus`));
  const gpus = Array.from({ length: 12 }, (_, i) => `gpu:0000:${10 + i}:00.0`);
  const named = async () => {
    const notes = (await eventsFor(cluster, node)).filter((e) => e.reason === 'NvidiaXID79Error').map((e) => e.note ?? '');
    return gpus.every((g) => notes.some((n) => n.includes(g)));
  };
  await waitFor('events written', async () => v.sink.events.idle && (await named()));
  const mine = await eventsFor(cluster, node);
  assert.equal(mine.filter((e) => e.reason === 'NvidiaPCIeError').length, 3, 'Warnings: 3 a minute');
  // Fatal: Events of their own within the budget (10 a minute; fewer once 8 creates, Warnings too, are
  // queued), the other GPUs named together in a summary Event, none dropped.
  const own = mine.filter((e) => e.reason === 'NvidiaXID79Error' && e.note?.startsWith('gpu:')).length;
  assert.ok(own >= 1 && own <= 10, `${own} Fatal Events of their own`);
  const summary = mine.filter((e) => e.reason === 'NvidiaXID79Error' && / more entities \(over /.test(e.note ?? ''));
  assert.equal(summary.length, 1);
  assert.match(summary[0].note ?? '', /gpu:0000:21:00\.0$/);
  assert.equal(await v.metric('vigil_k8s_events_dropped_total', { why: 'rate_limited' }), 3);
  assert.equal(await v.metric('vigil_k8s_event_entities_summarized_total'), 12 - own);
  await v.stop();
});

test('distinct warnings of one reason beyond the per-reason rate are dropped and counted', async () => {
  const node = 'ev-rate';
  await cluster.createNode(node);
  const v = startVigil({ kubeconfig: cluster.vigilKubeconfig, nodeName: node, sink: { eventsPerReasonPerMinute: 3 } });
  await v.started;
  for (let i = 0; i < 8; i++) v.engine.finding(finding('NvidiaPCIeError', `gpu:${i}`, `replay counter rose on GPU ${i}`));
  v.engine.finding(finding('KernelBug', '', 'BUG: unable to handle page fault'));
  await waitFor('events written', async () => v.sink.events.idle && (await eventsFor(cluster, node)).some((e) => e.reason === 'KernelBug'));
  const mine = await eventsFor(cluster, node);
  assert.equal(mine.filter((e) => e.reason === 'NvidiaPCIeError').length, 3);
  assert.equal(mine.filter((e) => e.reason === 'KernelBug').length, 1, 'another reason has its own budget');
  assert.equal(await v.metric('vigil_k8s_events_dropped_total', { why: 'rate_limited' }), 5);
  await v.stop();
});
