/**
 * The API server goes away for 30 seconds while findings keep arriving, then comes back on the
 * same port with the same data. Vigil must converge to exactly the engine's view, lose no Fatal
 * finding, create an Event for every distinct warning (or count it as dropped by the rate limit),
 * and say so in the log once rather than once per retry.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Finding } from '../../src/api/index.ts';
import { conditionsOf, eventsFor, iso, startCluster, startVigil, waitFor, type TestCluster } from '../helpers/cluster.ts';

const OUTAGE_MS = 30_000;

let cluster: TestCluster;
before(async () => {
  cluster = await startCluster();
});
after(async () => {
  await cluster?.stop();
});

const finding = (reason: Finding['reason'], entity: string, message = `${reason} seen`): Finding => ({
  reason,
  message,
  source: 'kmsg',
  entity,
  at: Date.now(),
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('30 s without an API server: the Node ends exactly in the engine state and no finding is lost', { timeout: 180_000 }, async () => {
  const node = 'outage';
  await cluster.createNode(node);
  const v = startVigil({
    kubeconfig: cluster.vigilKubeconfig,
    nodeName: node,
    // Short retry ceiling and series flush keep the test quick; the logic is the production one.
    sink: { retry: { baseMs: 200, maxMs: 2000 }, seriesFlushMs: 500, eventsPerReasonPerMinute: 6 },
  });
  await v.started;
  await waitFor(
    'initial write',
    () => v.sink.synced && v.metric('vigil_k8s_condition_writes_total', { result: 'ok' }).then((n) => n === 1),
  );
  const ready0 = conditionsOf(await cluster.readNode(node)).get('Ready');

  await cluster.stopApiserver();
  const down = Date.now();

  // Two conditions go False, warnings arrive (one storm of repeats, one burst over the rate limit).
  v.engine.finding(finding('NvidiaXID79Error', 'gpu:0000:3b:00', 'GPU has fallen off the bus'));
  v.engine.finding(finding('InterfaceNotUp', 'netif:eth0', 'eth0 is down'));
  v.engine.finding(finding('SoftLockup', '', 'CPU#3 stuck for 23s'));
  v.engine.finding(finding('KernelBug', '', 'BUG: unable to handle page fault'));
  for (let i = 0; i < 20; i++) v.engine.finding(finding('AppCrash', 'pid:1234', 'python3 segfault'));
  for (let i = 0; i < 10; i++) v.engine.finding(finding('NvidiaPCIeError', `gpu:${i}`, `replay counter rose on GPU ${i}`));
  await waitFor('a failed write attempt', () => v.metric('vigil_k8s_condition_writes_total', { result: '0' }).then((n) => n >= 1));

  // One of them recovers, and a third condition fails, all while the API server is still down.
  await sleep(10_000);
  v.engine.healthy({ reasons: ['InterfaceNotUp'], entity: 'netif:eth0', source: 'sysfs', at: Date.now() });
  await sleep(10_000);
  v.engine.finding(finding('XFSShutdown', 'dev:sda1', 'XFS (sda1): Corruption of in-memory data detected. Shutting down filesystem'));
  v.engine.finding(finding('OOMKilling', '', 'Out of memory: Killed process 999 (python3)'));
  await sleep(Math.max(0, OUTAGE_MS - (Date.now() - down)));
  const failedWrites = await v.metric('vigil_k8s_condition_writes_total', { result: '0' });
  assert.ok(failedWrites >= 3, `kept retrying during the outage (${failedWrites} attempts)`);
  assert.equal(await v.metric('vigil_k8s_condition_writes_total', { result: 'ok' }), 1, 'nothing could be written while down');

  await cluster.startApiserver();

  // The Node converges to exactly what the engine says.
  const health = v.engine.health();
  const n = await waitFor(
    'the Node matches engine.health()',
    async () => {
      const c = conditionsOf(await cluster.readNode(node));
      const ok = health.conditions.every((h) => {
        const x = c.get(h.name);
        return (
          x &&
          x.status === h.status &&
          x.reason === h.reason &&
          x.message === h.message &&
          iso(x.lastTransitionTime) === iso(h.lastTransitionTime)
        );
      });
      return ok && c;
    },
    30_000,
  );
  const want = Object.fromEntries(health.conditions.map((h) => [h.name, `${h.status}/${h.reason}`]));
  assert.deepEqual(want, {
    KernelReady: 'True/KernelIsReady',
    NetworkingReady: 'True/NetworkingIsReady',
    StorageReady: 'False/XFSShutdown',
    ContainerRuntimeReady: 'True/ContainerRuntimeIsReady',
    AcceleratedHardwareReady: 'False/NvidiaXID79Error',
  });
  // Every Fatal problem still active in the engine is on the Node.
  for (const h of health.conditions) {
    for (const p of h.active) assert.ok(n.get(h.name)!.message!.includes(`${p.reason} on ${p.entity}`), `${p.reason} on the Node`);
  }
  assert.deepEqual(n.get('Ready'), ready0, 'kubelet Ready untouched');

  // Events: one per distinct warning or Fatal finding, one per transition, the rest counted as rate-limited.
  v.sink.events.flush();
  const events = await waitFor(
    'all Events written',
    async () => {
      const mine = await eventsFor(cluster, node);
      const crash = mine.find((e) => e.reason === 'AppCrash');
      if (!v.sink.events.idle || crash?.series?.count !== 20) return undefined;
      return mine;
    },
    30_000,
  );
  const byReason = new Map<string, number>();
  for (const e of events) byReason.set(e.reason!, (byReason.get(e.reason!) ?? 0) + 1);
  assert.deepEqual(Object.fromEntries([...byReason].sort()), {
    AppCrash: 1,
    InterfaceNotUp: 2, // the finding, and NetworkingReady going False...
    KernelBug: 1,
    NetworkingIsReady: 1, // ...and True again, both told even though the Node never showed False
    NvidiaPCIeError: 6,
    NvidiaXID79Error: 2, // the finding and the transition
    OOMKilling: 1,
    SoftLockup: 1,
    XFSShutdown: 2,
  });
  assert.equal(events.find((e) => e.reason === 'NetworkingIsReady')!.type, 'Normal');
  assert.equal(await v.metric('vigil_k8s_events_dropped_total', { why: 'rate_limited' }), 4, '10 NvidiaPCIeError, 6 per minute allowed');
  assert.equal(await v.metric('vigil_k8s_events_dropped_total'), 4, 'nothing else dropped');
  assert.equal(await v.metric('vigil_k8s_event_writes_total', { op: 'create', result: 'ok' }), events.length);

  // The outage is one log line per operation, not one per retry.
  const unreachable = v.lines.filter((l) => l.event === 'kubernetes' && l.status === 0);
  assert.equal(unreachable.filter((l) => l.op === 'patch').length, 1, 'one line for the condition writer');
  assert.equal(unreachable.filter((l) => l.op === 'create events').length, 1, 'one line for the event recorder');
  assert.ok(v.lines.some((l) => l.msg === 'node conditions written again after failures'));
  await v.stop();
});
