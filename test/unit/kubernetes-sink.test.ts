/**
 * The Kubernetes sink's timing decisions, with a recording stand-in for the API clients (the real
 * API server is exercised in test/integration/kubernetes-*.test.ts), the writer's injected clock
 * and Node's mock timers: leading-edge condition writes, Fatal findings told as Events at once,
 * bounded messages that name every new failing entity, and Event series that cost about one
 * write an hour when a Warning persists.
 */
import { test } from 'node:test';
import { useMockClock } from '../helpers/mock-clock.ts';
import assert from 'node:assert/strict';
import pino from 'pino';
import { Registry } from 'prom-client';
import type { ActiveProblem, ConditionState, EngineEvent, NodeHealth } from '../../src/api/index.ts';
import { ConditionWriter, summarize, KubernetesSink } from '../../src/sinks/index.ts';
import { type KubeClients } from '../../src/kube/index.ts';
import { testEventRecorder } from '../helpers/event-recorder.ts';

interface Call {
  op: 'patchNode' | 'createEvent' | 'patchEvent';
  at: number;
  body: unknown;
}

function fakeClients(calls: Call[], clock: () => number): KubeClients {
  const record = (op: Call['op']) => (req: { body: unknown }) => {
    calls.push({ op, at: clock(), body: req.body });
    return Promise.resolve({});
  };
  return {
    core: { patchNodeStatus: record('patchNode') },
    events: { createNamespacedEvent: record('createEvent'), patchNamespacedEvent: record('patchEvent') },
    server: 'https://stand-in',
  } as unknown as KubeClients;
}

const { now: clock, advance } = useMockClock();

const log = pino({ level: 'silent' });

function problem(reason: string, entity: string, message = 'GPU has fallen off the bus'): ActiveProblem {
  return {
    key: `C|${reason}|${entity}`,
    reason,
    severity: 'Fatal',
    condition: 'C',
    entity,
    message,
    firstSeen: clock(),
    lastSeen: clock(),
    count: 1,
  };
}

function health(status: 'True' | 'False', message: string, active: ActiveProblem[] = []): NodeHealth {
  const c: ConditionState = {
    type: 'C',
    name: 'C',
    status,
    reason: status === 'True' ? 'Healthy' : 'NvidiaXID79Error',
    message,
    lastTransitionTime: '2026-12-01T00:00:00Z',
    active,
  };
  return { bootId: 'b', conditions: [c], warnings: [] };
}

function writer(calls: Call[], coalesceMs = 200) {
  return new ConditionWriter({
    clients: fakeClients(calls, clock),
    nodeName: 'n1',
    log,
    registry: new Registry(),
    coalesceMs,
    heartbeatMs: 0,
    staleGraceMs: 0,
    now: clock,
  });
}

const patches = (calls: Call[]) => calls.filter((c) => c.op === 'patchNode');
const sentMessage = (c: Call) => (c.body as { status: { conditions: { message: string }[] } }).status.conditions[0].message;

test('the first change after a quiet window is written at once, without waiting out the coalescing window', async () => {
  const calls: Call[] = [];
  const w = writer(calls);
  w.start(health('True', 'ok'));
  await advance(0);
  assert.equal(patches(calls).length, 1, 'initial state written');
  await advance(5000);

  const t0 = clock();
  w.update(health('False', 'NvidiaXID79Error on gpu:1: GPU has fallen off the bus'));
  await advance(0);
  assert.equal(patches(calls).length, 2, 'the change went out with no delay');
  assert.equal(patches(calls)[1].at, t0);
  await w.stop();
});

test('changes within the window after a write go out together when the window ends', async () => {
  const calls: Call[] = [];
  const w = writer(calls);
  w.start(health('True', 'ok'));
  await advance(0);
  await advance(5000);
  w.update(health('False', 'first'));
  await advance(0);
  assert.equal(patches(calls).length, 2);

  await advance(50);
  w.update(health('False', 'second'));
  await advance(50);
  w.update(health('False', 'third'));
  await advance(50);
  assert.equal(patches(calls).length, 2, 'nothing more before the window ends');
  await advance(50);
  assert.equal(patches(calls).length, 3, 'one write at the end of the window');
  assert.equal(sentMessage(patches(calls)[2]), 'third', 'with the latest state');
  await advance(1000);
  assert.equal(patches(calls).length, 3);
  await w.stop();
});

test('a status change right after a write goes out at once; only message changes wait out the window', async () => {
  const calls: Call[] = [];
  const w = writer(calls);
  w.start(health('True', 'ok'));
  await advance(0);
  await advance(5000);
  w.update(health('False', 'first'));
  await advance(0);
  assert.equal(patches(calls).length, 2);
  await advance(50);
  w.update(health('True', 'recovered'));
  await advance(0);
  assert.equal(patches(calls).length, 3, 'recovery written at once');
  await advance(20);
  w.update(health('False', 'again'));
  await advance(0);
  assert.equal(patches(calls).length, 4, 'the next fault written at once');
  await advance(20);
  w.update(health('False', 'again, another entity'));
  await advance(0);
  assert.equal(patches(calls).length, 4, 'a message change waits');
  await advance(200);
  assert.equal(patches(calls).length, 5);
  await w.stop();
});

test('a Fatal finding is posted as an Event at once, before any timer runs', async () => {
  const calls: Call[] = [];
  const rec = testEventRecorder(fakeClients(calls, clock), clock);
  const finding: EngineEvent = {
    kind: 'finding',
    finding: {
      reason: 'NvidiaXID79Error',
      message: 'GPU has fallen off the bus',
      source: 'kmsg',
      entity: 'gpu:0000:3b:00.0',
      at: clock(),
      severity: 'Fatal',
      condition: 'AcceleratedHardwareReady',
      action: 'reboot',
      count: 1,
    },
  };
  rec.handle(finding);
  const created = calls.filter((c) => c.op === 'createEvent');
  assert.equal(created.length, 1, 'sent synchronously, before any timer runs');
  const body = created[0].body as { type: string; reason: string; note: string };
  assert.deepEqual(
    { type: body.type, reason: body.reason, note: body.note },
    { type: 'Warning', reason: 'NvidiaXID79Error', note: 'gpu:0000:3b:00.0: GPU has fallen off the bus' },
  );
  await rec.stop();
});

test('a Warning that persists for hours costs about one Event write an hour, not one per repeat window', async () => {
  const calls: Call[] = [];
  const rec = testEventRecorder(fakeClients(calls, clock), clock);
  const warn = (): EngineEvent => ({
    kind: 'finding',
    finding: {
      reason: 'NvidiaPCIeError',
      message: 'replay counter rose',
      source: 'nvml',
      entity: 'gpu:0',
      at: clock(),
      severity: 'Warning',
      condition: 'AcceleratedHardwareReady',
      action: 'none',
      count: 2,
    },
  });
  // The engine re-emits a persistent Warning once per repeat window (1 min): 4 hours of it.
  const hour = 60;
  const writesInHour: number[] = [];
  for (let h = 0; h < 4; h++) {
    const before = calls.length;
    for (let m = 0; m < hour; m++) {
      rec.handle(warn());
      await advance(60_000);
    }
    writesInHour.push(calls.length - before);
  }
  assert.equal(calls.filter((c) => c.op === 'createEvent').length, 1, 'one Event');
  // The create and one count update 30 s later, then a refresh every 50 min (Events live an hour).
  assert.ok(writesInHour[0] <= 3, `writes per hour: ${writesInHour.join(', ')}`);
  for (const n of writesInHour.slice(1)) assert.ok(n <= 2, `writes per hour: ${writesInHour.join(', ')}`);
  assert.ok(writesInHour.reduce((a, n) => a + n, 0) <= 7, `writes per hour: ${writesInHour.join(', ')}`);
  // The count reaches the API server in the end.
  rec.flush();
  await advance(0);
  const last = calls.filter((c) => c.op === 'patchEvent').at(-1)!.body as { series: { count: number } };
  assert.equal(last.series.count, 4 * hour);
  await rec.stop();
});

test('a cut condition message still names the newest failing entity and the count per reason', () => {
  const active = Array.from({ length: 100 }, (_, i) =>
    problem('NvidiaXID79Error', `gpu:0000:${(i + 1).toString(16).padStart(2, '0')}:00.0`),
  );
  const msg = summarize(active);
  assert.ok(msg.length <= 1024, `bounded: ${msg.length}`);
  assert.match(
    msg,
    /^NvidiaXID79Error on gpu:0000:01:00\.0: GPU has fallen off the bus; NvidiaXID79Error on 100 entities: gpu:0000:01:00\.0, /,
  );
  assert.match(msg, /\(\+\d+ more, newest gpu:0000:64:00\.0\)$/);
  const named = msg.split('entities: ')[1].split(' (+')[0].split(', ').length;
  const more = Number(/\(\+(\d+) more/.exec(msg)![1]);
  assert.equal(named + more, 100, 'every entity is named or counted');

  const two = summarize([...active.slice(0, 50), problem('NvidiaXID48Error', 'gpu:0000:99:00.0')]);
  assert.match(two, /NvidiaXID48Error on 1 entity: gpu:0000:99:00\.0/, 'another reason keeps its own share of the bound');
});

test('every new failing entity changes the condition written, even once the engine has cut its message', async () => {
  const calls: Call[] = [];
  const w = writer(calls);
  const cut = 'x'.repeat(1021) + '...';
  const active: ActiveProblem[] = [];
  w.start(health('True', 'ok'));
  await advance(0);
  await advance(5000);
  for (let i = 0; i < 30; i++) {
    active.push(problem('NvidiaXID79Error', `gpu:0000:${(i + 1).toString(16).padStart(2, '0')}:00.0`));
    // The engine's message stays the same once cut; the sink is told the problems changed.
    w.update(health('False', cut, [...active]), 'C');
    const at = clock();
    await advance(0);
    const last = patches(calls).at(-1)!;
    assert.equal(last.at, at, `entity ${i + 1} written at once`);
    assert.match(sentMessage(last), new RegExp(`on ${i + 1} entit`));
    await advance(1000);
  }
  await w.stop();
});

test('a new failing entity: its Event goes first, the condition patch (status or message) once it is through, at most 100 ms later', async () => {
  const calls: Call[] = [];
  const clients = fakeClients(calls, clock) as unknown as {
    core: Record<string, unknown>;
    events: { createNamespacedEvent: (req: { body: unknown }) => Promise<unknown> };
  };
  clients.core.readNode = () => Promise.resolve({ metadata: { uid: 'u1' }, status: { conditions: [] } });
  // Event creates are held until released, as a slow API server would.
  const held: (() => void)[] = [];
  clients.events.createNamespacedEvent = (req) => {
    calls.push({ op: 'createEvent', at: clock(), body: req.body });
    return new Promise<unknown>((r) => held.push(() => r({})));
  };
  const sink = new KubernetesSink({
    clients: clients as unknown as KubeClients,
    nodeName: 'n1',
    log,
    registry: new Registry(),
    heartbeatMs: 0,
    coalesceMs: 0, // the sink's writer runs on the real clock; this test is about order, not the window
    eventNamespace: 'default',
    eventsPerReasonPerMinute: 6,
    staleGraceMs: 0,
    finalWriteMs: 0,
    instance: 'vigil-test',
  });
  let current = health('True', 'ok');
  await sink.readNode(current.conditions.map((c) => c.name));
  sink.begin(current, 0);
  await advance(0);
  // Start-up writes what the Node should show first; count from there.
  const base = calls.filter((c) => c.op === 'patchNode').length;
  const patches = () => calls.filter((c) => c.op === 'patchNode').slice(base);
  const createsBefore = calls.filter((c) => c.op === 'createEvent').length; // the dry-run preflight
  held.splice(0).forEach((release) => release());
  const fatal = (entity: string): EngineEvent => ({
    kind: 'finding',
    finding: {
      reason: 'NvidiaXID79Error',
      message: 'off the bus',
      source: 'kmsg',
      entity,
      at: clock(),
      severity: 'Fatal',
      condition: 'C',
      action: 'reboot',
      count: 1,
    },
  });
  const failing = (...entities: string[]) =>
    health(
      'False',
      entities.join(', '),
      entities.map((e) => problem('NvidiaXID79Error', e)),
    );

  // The first failing GPU: the engine tells the finding, then the condition's change to False (as
  // it does). The finding's Event goes first; the status patch once that Event is through.
  sink.handle(fatal('gpu:a'), current);
  current = failing('gpu:a');
  sink.handle({ kind: 'condition', condition: current.conditions[0], previous: 'True' }, current);
  await advance(50);
  assert.equal(
    calls.filter((c) => c.op === 'createEvent').length - createsBefore,
    1,
    "the finding's Event, the transition's queued behind it",
  );
  assert.equal(patches().length, 0, 'no status patch while the Event is in flight');
  assert.equal(sink.synced, false, 'a patch held for the Event is not yet on the Node');
  assert.equal(sink.conditions.synced, true, 'the writer has not been handed it yet');
  held.splice(0).forEach((release) => release());
  await advance(0);
  await advance(1);
  assert.equal(patches().length, 1, 'the status patch follows the Event at once');
  assert.match(JSON.stringify(patches()[0].body), /"status":"False"/);
  assert.equal(sink.synced, true, 'written: nothing held, nothing in flight');
  held.splice(0).forEach((release) => release());
  await advance(1_000);

  // A second GPU: only the message changes. Its Event is sent; the patch waits for it.
  current = failing('gpu:a', 'gpu:b');
  sink.handle(fatal('gpu:b'), current);
  await advance(50);
  assert.equal(calls.at(-1)?.op, 'createEvent');
  assert.equal(patches().length, 1, 'no patch while the Event is in flight');
  held.splice(0).forEach((release) => release());
  await advance(0); // the Event's response is handled
  await advance(1);
  assert.equal(patches().length, 2, 'the patch follows the Event at once');
  assert.match(JSON.stringify(patches()[1].body), /gpu:b/);
  await advance(1_000);

  // An Event that hangs holds the message back for 100 ms at the most.
  current = failing('gpu:a', 'gpu:b', 'gpu:c');
  sink.handle(fatal('gpu:c'), current);
  await advance(95);
  assert.equal(patches().length, 2);
  await advance(6); // the bound ends: the write is scheduled
  await advance(1);
  assert.equal(patches().length, 3);
  assert.match(JSON.stringify(patches()[2].body), /gpu:c/);
  held.splice(0).forEach((release) => release());
  await sink.close();
});

test("warm() runs a fault's events through a throwaway sink: no Event or condition is sent, the sink's metrics stay as they were, and a real fault after it is told", async () => {
  const calls: Call[] = [];
  const registry = new Registry();
  const sink = new KubernetesSink({
    clients: fakeClients(calls, clock),
    nodeName: 'n1',
    log,
    registry,
    heartbeatMs: 0,
    coalesceMs: 0,
    eventNamespace: 'default',
    eventsPerReasonPerMinute: 6,
    staleGraceMs: 0,
    finalWriteMs: 0,
    instance: 'vigil-test',
  });
  const fatal: EngineEvent = {
    kind: 'finding',
    finding: {
      reason: 'NvidiaXID79Error',
      message: 'off the bus',
      source: 'kmsg',
      entity: 'gpu:0000:00:00',
      at: clock(),
      severity: 'Fatal',
      condition: 'C',
      action: 'reboot',
      count: 1,
    },
  };
  const writes = async () =>
    JSON.stringify(
      await Promise.all(
        ['vigil_k8s_event_writes_total', 'vigil_k8s_condition_writes_total'].map(
          async (m) => (await registry.getSingleMetric(m)?.get())?.values,
        ),
      ),
    );
  const before = await writes();
  sink.warm([{ event: fatal, health: health('False', 'off the bus') }]);
  await advance(60_000);
  assert.equal(calls.length, 0, 'the warm-up sends nothing');
  assert.equal(await writes(), before);

  sink.handle(fatal, health('False', 'off the bus'));
  await advance(0);
  assert.deepEqual(
    calls.filter((c) => c.op === 'createEvent').map((c) => (c.body as { note: string }).note),
    ['gpu:0000:00:00: off the bus'],
    "the same fault for real is told: the warm-up's series and budget were its own",
  );
  await sink.close();
});
