/**
 * Issue #24, section 4: a program that aborts every few seconds (headless Chrome in CI pods hitting
 * `trap int3`) is one Event series with a count, not an Event every few seconds. The classifier
 * names the program (AppCrash's entity, never the pid), the engine keeps one problem per program,
 * and the Kubernetes sink folds its repeats into one events.k8s.io/v1 series: created once, then
 * series.count and lastObservedTime patched, a new series only after 6 minutes without a crash.
 * Real classifier, engine and EventRecorder with an injected clock and a recording stand-in for the
 * API clients (the real API server: test/integration/kubernetes-app-crash-fold.test.ts).
 */
import { test } from 'node:test';
import { useMockClock } from '../helpers/mock-clock.ts';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { KernelLogClassifier } from '../../src/monitors/index.ts';
import { Engine, type ConditionInfo, type EngineOptions } from '../../src/engine/index.ts';
import { CONDITIONS } from '../../src/catalog/index.ts';
import type { KubeClients } from '../../src/kube/index.ts';
import { testEventRecorder } from '../helpers/event-recorder.ts';

// Real lines: headless Chrome's trap int3 (https://github.com/aws/eks-node-monitoring-agent/issues/223),
// Firefox's "Web Content" (https://github.com/BrowserWorks/waterfox/issues/1983), a python3 segfault
// in the shape of test/fixtures/kmsg/faults.tsv.
const chrome = (pid: number) => `traps: chrome[${pid}] trap int3 ip:5f9ad8850f04 sp:7fff57cb87c0 error:0 in chrome[5f9ad6161000+c48d000]`;
const python = (pid: number) =>
  `python3[${pid}]: segfault at 10 ip 00007f1c2d3e4f5a sp 00007ffd1a2b3c40 error 4 in libtorch_cpu.so[7f1c20000000+1e000000]`;
const webContent = 'Web Content[3562]: segfault at 0 ip 00007f2469f11fc3 sp 00007ffcc20ad090 error 6 in libxul.so[7f2469c1d000+6a7a000]';

interface Call {
  op: 'createEvent' | 'patchEvent';
  at: number;
  name: string;
  body: { reason?: string; note?: string; series?: { count: number; lastObservedTime: string } };
}

const { now: clock, advance, jump } = useMockClock();
const settle = () => advance(0);

function setup(engineOver: Partial<EngineOptions> = {}) {
  const calls: Call[] = [];
  const record = (op: Call['op']) => (req: { name?: string; body: Call['body'] & { metadata?: { name?: string } } }) => {
    calls.push({ op, at: clock(), name: req.name ?? req.body.metadata?.name ?? '', body: req.body });
    return Promise.resolve({});
  };
  const clients = {
    events: { createNamespacedEvent: record('createEvent'), patchNamespacedEvent: record('patchEvent') },
    server: 'https://stand-in',
  } as unknown as KubeClients;
  const registry = new Registry();
  const rec = testEventRecorder(clients, clock, { registry });
  const conditions = new Map<string, ConditionInfo>(Object.entries(CONDITIONS).map(([type, c]) => [type, { name: type, ...c }]));
  const engine = new Engine({ bootId: 'b', now: clock, conditions, registry, ...engineOver });
  engine.on((e) => rec.handle(e));
  const classifier = new KernelLogClassifier();
  const crash = (message: string) => {
    const found = classifier.classify({ message }, clock());
    assert.equal(found.length, 1, message);
    engine.finding(found[0]);
  };
  const creates = () => calls.filter((c) => c.op === 'createEvent');
  const patches = () => calls.filter((c) => c.op === 'patchEvent');
  const dropped = async () =>
    (await registry.getMetricsAsJSON()).find((m) => m.name === 'vigil_k8s_events_dropped_total')!.values.reduce((a, v) => a + v.value, 0);
  return { rec, engine, crash, calls, creates, patches, dropped };
}

test('AppCrash names the program, never the pid: one entity per program, spaces in the name kept, a log prefix left out', () => {
  const c = new KernelLogClassifier();
  const entity = (message: string) => c.classify({ message }, clock()).map((f) => [f.reason, f.entity]);
  assert.deepEqual(entity(chrome(1356759)), [['AppCrash', 'program:chrome']]);
  assert.deepEqual(entity(chrome(1361870)), [['AppCrash', 'program:chrome']], 'another pid, the same program');
  assert.deepEqual(entity(python(12345)), [['AppCrash', 'program:python3']]);
  assert.deepEqual(entity(webContent), [['AppCrash', 'program:Web Content']]);
  assert.deepEqual(
    entity(
      'traps: Web Content[270439] general protection fault ip:7f9acaa00d82 sp:7ffcb7bca6b0 error:0 in libxul.so[7f9ac6f7e000+4bf9000]',
    ),
    [['AppCrash', 'program:Web Content']],
  );
  // A syslog ident or a dmesg timestamp the parser did not take off is not part of the name.
  assert.deepEqual(entity(`kernel: ${python(7)}`), [['AppCrash', 'program:python3']]);
  assert.deepEqual(entity(`[ 2424451.422379] ${python(7)}`), [['AppCrash', 'program:python3']]);
  const [f] = c.classify({ message: chrome(640020) }, clock());
  assert.deepEqual(f.attrs, { process: 'chrome', pid: 640020 });
});

test('100 crashes of one program within 5 minutes: one Event, its series patched to count 100; another program gets its own Event', async () => {
  const { rec, crash, creates, patches, dropped } = setup();
  const start = clock();
  for (let i = 0; i < 100; i++) {
    if (i > 0) await advance(3_000); // one every 3 s: 297 s in all
    crash(chrome(1_356_759 + i * 17));
  }
  assert.ok(clock() - start < 5 * 60_000);
  crash(python(4242));
  await advance(30_000);
  // While the storm goes on the API server shows the count of the first update (30 s after the
  // create), then at most one update per seriesRefreshMs (50 min); the series ends with its count.
  assert.ok(patches().length <= 1, `count updates during the storm: ${patches().length}`);
  await advance(7 * 60_000); // 6 min without a crash of the program: the series is finished

  const made = creates();
  assert.deepEqual(
    made.map((c) => [c.body.reason, c.body.note?.split(': ')[0]]),
    [
      ['AppCrash', 'program:chrome'],
      ['AppCrash', 'program:python3'],
    ],
    'one Event per program',
  );
  const chromeEvent = made[0].name;
  const last = patches()
    .filter((p) => p.name === chromeEvent)
    .at(-1)!;
  assert.equal(last.body.series!.count, 100);
  assert.equal(last.body.series!.lastObservedTime, new Date(start + 99 * 3_000).toISOString().replace('Z', '000Z'));
  assert.ok(!patches().some((p) => p.name === made[1].name), 'a single crash has no series');
  // The budget: 100 crashes cost one create and two count updates, nothing dropped.
  assert.equal(patches().length, 2);
  assert.equal(await dropped(), 0);
  await rec.stop();
});

test('a crash storm that goes on costs one Event and a few count updates an hour; after 6 quiet minutes the next crash starts a new series', async () => {
  const { rec, crash, creates, patches } = setup();
  // One crash every 3 s for an hour.
  for (let i = 0; i < 1200; i++) {
    crash(chrome(10_000 + i));
    await advance(3_000);
  }
  assert.equal(creates().length, 1);
  assert.ok(patches().length <= 3, `count updates in the hour: ${patches().length}`);
  // Quiet for 7 minutes: the series finishes with its final count.
  await advance(7 * 60_000);
  const final = patches().at(-1)!;
  assert.equal(final.name, creates()[0].name);
  assert.equal(final.body.series!.count, 1200);
  crash(chrome(99_999));
  await settle();
  assert.equal(creates().length, 2, 'a new series');
  assert.notEqual(creates()[1].name, creates()[0].name);
  await rec.stop();
});

test('crashes less than 6 minutes apart stay in one series even past the engine repeat window and the AppCrash ttl', async () => {
  const { rec, crash, creates, patches } = setup();
  for (let i = 0; i < 6; i++) {
    crash(chrome(500 + i));
    await advance(5 * 60_000); // 5 min apart: the engine re-emits each as a finding; the series goes on
  }
  assert.equal(creates().length, 1);
  rec.flush();
  await settle();
  assert.equal(patches().at(-1)!.body.series!.count, 6);
  await rec.stop();
});

test('a repeat the engine holds back (engine.repeatWindow longer than the series window) still starts a new series once the old one finished', async () => {
  const { rec, crash, creates, patches } = setup({ repeatWindowMs: 30 * 60_000 });
  crash(chrome(1));
  await settle();
  crash(chrome(2));
  await advance(7 * 60_000); // the series finishes (final count 2); the engine's window still runs
  assert.equal(patches().at(-1)!.body.series!.count, 2);
  crash(chrome(3)); // a repeat for the engine
  await settle();
  assert.equal(creates().length, 2, 'told, not lost');
  crash(chrome(4));
  rec.flush();
  await settle();
  assert.equal(patches().at(-1)!.name, creates()[1].name);
  assert.equal(patches().at(-1)!.body.series!.count, 2);
  await rec.stop();
});

test('a finished series the flush timer has not reached yet gets its final count before the next series starts', async () => {
  const { rec, crash, creates, patches } = setup();
  crash(chrome(1));
  await settle();
  for (let i = 0; i < 4; i++) crash(chrome(2 + i)); // count 5, not yet written
  jump(7 * 60_000); // the clock moves on; no timer has run
  crash(chrome(9));
  await settle();
  assert.equal(creates().length, 2);
  const old = patches().find((p) => p.name === creates()[0].name);
  assert.equal(old?.body.series!.count, 5);
  await rec.stop();
});

test('many programs crashing: each gets its Event within the per-reason budget; the rest are counted as dropped', async () => {
  const { rec, crash, creates, dropped } = setup();
  for (let i = 0; i < 10; i++)
    crash(`prog${i}[${100 + i}]: segfault at 0 ip 0000000000401136 sp 00007ffd8c5d4e60 error 6 in prog${i}[401000+1000]`);
  await settle();
  assert.equal(creates().length, 6, 'eventsPerReasonPerMinute');
  assert.equal(await dropped(), 4);
  await rec.stop();
});
