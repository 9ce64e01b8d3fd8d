/**
 * Issue #24, section 4, on a real kube-apiserver: repeated crashes of one program are one
 * events.k8s.io/v1 Event series with a count, not an Event per crash, and another program's crash
 * is an Event of its own. The lines go through the real classifier (AppCrash's entity is the
 * program), the engine and the Kubernetes sink, on an injected clock: 100 crashes of headless
 * Chrome 3 s apart (297 s, as in CI pods hitting trap int3) without waiting five minutes.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { KernelLogClassifier } from '../../src/monitors/index.ts';
import { eventsFor, startCluster, startVigil, waitFor, type TestCluster } from '../helpers/cluster.ts';

let cluster: TestCluster;
before(async () => {
  cluster = await startCluster();
});
after(async () => {
  await cluster?.stop();
});

// Real lines: https://github.com/aws/eks-node-monitoring-agent/issues/223 (trap int3, a new pid
// each time) and a python3 segfault in the shape of test/fixtures/kmsg/faults.tsv.
const chrome = (pid: number) => `traps: chrome[${pid}] trap int3 ip:5f9ad8850f04 sp:7fff57cb87c0 error:0 in chrome[5f9ad6161000+c48d000]`;
const python = (pid: number) =>
  `python3[${pid}]: segfault at 10 ip 00007f1c2d3e4f5a sp 00007ffd1a2b3c40 error 4 in libtorch_cpu.so[7f1c20000000+1e000000]`;

test('100 crashes of one program within 5 minutes are ONE Event series with count 100; another program gets its own Event; after 6 quiet minutes a new series starts', async () => {
  const node = 'ev-app-crash-fold';
  await cluster.createNode(node);
  let t = Date.now();
  const v = startVigil({ kubeconfig: cluster.vigilKubeconfig, nodeName: node, now: () => t, sink: { seriesFlushMs: 200 } });
  await v.started;
  const classifier = new KernelLogClassifier();
  const crash = (message: string) => {
    const found = classifier.classify({ message }, t);
    assert.equal(found.length, 1, message);
    v.engine.finding(found[0]);
  };

  const start = t;
  for (let i = 0; i < 100; i++) {
    if (i > 0) t += 3_000;
    crash(chrome(1_356_759 + i * 17));
  }
  const lastChromeCrash = t;
  assert.ok(lastChromeCrash - start < 5 * 60_000, 'within 5 minutes');
  crash(python(4242));

  const appCrashes = async () => (await eventsFor(cluster, node)).filter((e) => e.reason === 'AppCrash');
  const mine = await waitFor(
    'one series of 100 for chrome and an Event for python3',
    async () => {
      const evs = await appCrashes();
      return evs.length === 2 && evs.some((e) => e.series?.count === 100) && evs;
    },
    20_000,
  );
  const chromeEv = mine.find((e) => e.note?.startsWith('program:chrome: '));
  const pythonEv = mine.find((e) => e.note?.startsWith('program:python3: '));
  assert.ok(chromeEv && pythonEv, `notes: ${mine.map((e) => e.note).join(' | ')}`);
  assert.equal(chromeEv.type, 'Warning');
  assert.equal(chromeEv.series?.count, 100);
  assert.equal(new Date(chromeEv.series.lastObservedTime).getTime(), lastChromeCrash, 'lastObservedTime is the last crash');
  assert.equal(new Date(chromeEv.eventTime).getTime(), start, 'eventTime is the first crash');
  assert.equal(pythonEv.series, undefined, 'one python3 crash: no series');
  // The budget: two creates and one count update for 101 crashes, nothing dropped.
  await waitFor('writes settle', () => v.sink.events.idle);
  assert.equal(await v.metric('vigil_k8s_event_writes_total', { op: 'create', result: 'ok' }), 2);
  assert.equal(await v.metric('vigil_k8s_event_writes_total', { op: 'series', result: 'ok' }), 1);
  assert.equal(await v.metric('vigil_k8s_events_dropped_total'), 0);
  // Stays so while the flush timer runs on.
  await new Promise((r) => setTimeout(r, 600));
  assert.deepEqual(
    (await appCrashes()).map((e) => e.series?.count ?? 1).sort((a, b) => a - b),
    [1, 100],
  );

  // Seven minutes without a chrome crash: the series is finished, the next crash starts a new one.
  t += 7 * 60_000;
  await new Promise((r) => setTimeout(r, 400)); // the flush timer sees it finished
  crash(chrome(1_400_000));
  const after7 = await waitFor('a second chrome Event', async () => {
    const evs = (await appCrashes()).filter((e) => e.note?.startsWith('program:chrome: '));
    return evs.length === 2 && evs;
  });
  assert.deepEqual(
    after7.map((e) => e.series?.count ?? 1).sort((a, b) => a - b),
    [1, 100],
  );
  await v.stop();
});
