/**
 * The Fatal Event budget never hides a newly failing entity: what its reason's bucket refuses is
 * named in a summary Event (several entities in one note), and when the summary bucket is spent
 * too the entities wait for its next token and go out together. A recording stand-in for the API
 * clients (the real API server: test/integration/kubernetes-distinct-fatal.test.ts), the
 * recorder's injected clock and Node's mock timers.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import type { EngineEvent } from '../../src/api/index.ts';
import type { KubeClients } from '../../src/kube/index.ts';
import { testEventRecorder } from '../helpers/event-recorder.ts';
import { useMockClock } from '../helpers/mock-clock.ts';
import { rng } from '../helpers/prng.ts';

interface Create {
  at: number;
  reason: string;
  note: string;
}

const { now: clock, advance } = useMockClock();

/** Advances in 50 ms steps: the injected clock moves by a whole advance before its timers run, so a write is stamped to within 50 ms. */
async function step(ms: number): Promise<void> {
  for (let left = ms; left > 0; left -= 50) await advance(Math.min(50, left));
}

/** A recorder whose API calls are recorded and answered at once; Fatal budget `cap` a minute. */
function recorder(cap?: number) {
  const creates: Create[] = [];
  const patches: unknown[] = [];
  const registry = new Registry();
  const clients = {
    core: {},
    events: {
      createNamespacedEvent: (req: { body: { reason: string; note: string } }) => {
        creates.push({ at: clock(), reason: req.body.reason, note: req.body.note });
        return Promise.resolve({});
      },
      patchNamespacedEvent: (req: { body: unknown }) => {
        patches.push(req.body);
        return Promise.resolve({});
      },
    },
    server: 'https://stand-in',
  } as unknown as KubeClients;
  const rec = testEventRecorder(clients, clock, { registry, ...(cap ? { fatalPerReasonPerMinute: cap } : {}) });
  const metric = async (name: string, labels: Record<string, string> = {}) => {
    const m = (await registry.getSingleMetric(name)?.get())?.values ?? [];
    return m.filter((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x)).reduce((a, v) => a + v.value, 0);
  };
  return { rec, creates, patches, metric };
}

const gpu = (i: number) => `gpu:0000:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 0xff).toString(16).padStart(2, '0')}.0`;

function fatal(entity: string): EngineEvent {
  return {
    kind: 'finding',
    finding: {
      reason: 'NvidiaXID79Error',
      message: 'GPU has fallen off the bus',
      source: 'kmsg',
      entity,
      at: clock(),
      severity: 'Fatal',
      condition: 'AcceleratedHardwareReady',
      action: 'reboot',
      count: 1,
    },
  };
}

/** The Events (in order of creation) whose note names the entity: the entity followed by ':' or ',' or the end. */
function naming(creates: Create[], entity: string): Create[] {
  const re = new RegExp(`(^|[ ,])${entity.replace(/[.:]/g, '\\$&')}(:|,|$)`);
  return creates.filter((c) => re.test(c.note));
}

test('a burst of 100 distinct Fatals within one second: 30 Events of their own, the other 70 named in summary Events, none dropped', async () => {
  const { rec, creates, metric } = recorder();
  const entities = Array.from({ length: 100 }, (_, i) => gpu(i + 1));
  for (const e of entities) {
    rec.handle(fatal(e));
    await advance(10);
  }
  // A summary gathers for 200 ms before it is queued (one that fills up goes at once).
  await step(250);
  for (const e of entities) assert.equal(naming(creates, e).length, 1, `${e} named in exactly one Event`);
  const own = creates.filter((c) => /^gpu:\S+: GPU has fallen off the bus$/.test(c.note));
  assert.equal(own.length, 30, 'the budget: 30 a minute');
  const summaries = creates.filter((c) => / more entit(y|ies) \(/.test(c.note));
  // Each gathers 200 ms: 70 entities arriving over 700 ms take about 4.
  assert.ok(summaries.length >= 3 && summaries.length <= 5, `${summaries.length} summaries`);
  for (const s of summaries) {
    assert.equal(s.reason, 'NvidiaXID79Error');
    assert.ok(s.note.length <= 1024, `bounded note: ${s.note.length}`);
    assert.match(s.note, /^GPU has fallen off the bus on \d+ more entities \(over NvidiaXID79Error's Event budget of 30 a minute\): gpu:/);
  }
  assert.equal(await metric('vigil_k8s_event_entities_summarized_total'), 70);
  assert.equal(await metric('vigil_k8s_events_dropped_total'), 0);
  await rec.stop();
});

test('a stream of 200 distinct Fatals 0.5-2 s apart: every one named in an Event created in the same second', async () => {
  const { rec, creates, metric } = recorder();
  const rand = rng(26);
  const written: { e: string; at: number }[] = [];
  for (let i = 0; i < 200; i++) {
    const e = gpu(i + 1);
    written.push({ e, at: clock() });
    rec.handle(fatal(e));
    await step(500 + Math.floor(rand() * 1500));
  }
  await step(2000);
  const unseen = written.filter(({ e, at }) => {
    const c = naming(creates, e);
    return c.length !== 1 || c[0].at - at > 1000;
  });
  assert.deepEqual(unseen, [], 'each named once, in an Event created within 1 s');
  // Past the first 30 the bucket refills at 0.5 a second: about 60% own Events, the rest summaries.
  assert.ok((await metric('vigil_k8s_event_entities_summarized_total')) > 0);
  assert.equal(await metric('vigil_k8s_events_dropped_total'), 0);
  await rec.stop();
});

test('with the summary bucket spent too, entities wait for its next token and are named together then, none lost', async () => {
  const { rec, creates, metric } = recorder(2);
  const entities = Array.from({ length: 12 }, (_, i) => gpu(i + 1));
  // 300 ms apart: each summary is sent (after gathering 200 ms) before the next arrives, so each takes a token of its own.
  for (const e of entities) {
    rec.handle(fatal(e));
    await advance(300);
  }
  // 2 own Events, 2 summaries of one entity each; the other 8 wait for a summary token.
  assert.equal(creates.length, 4);
  const waitingFor = entities.slice(4);
  for (const e of waitingFor) assert.equal(naming(creates, e).length, 0);
  // The summary bucket (2 a minute) gives its next token about 30 s after it was spent.
  await step(30_000);
  assert.equal(creates.length, 5);
  assert.match(creates[4].note, /on 8 more entities/);
  for (const e of entities) assert.equal(naming(creates, e).length, 1, `${e} named once`);
  assert.equal(await metric('vigil_k8s_event_entities_summarized_total'), 10);
  assert.equal(await metric('vigil_k8s_events_dropped_total'), 0);
  await rec.stop();
});

test('entities still waiting for a summary token when the agent stops are sent in its final write', async () => {
  const { rec, creates } = recorder(1);
  const entities = Array.from({ length: 5 }, (_, i) => gpu(i + 1));
  for (const e of entities) {
    rec.handle(fatal(e));
    await step(300);
  }
  // 1 own Event and 1 summary; the other 3 wait about a minute for the summary bucket.
  assert.equal(creates.length, 2);
  assert.equal(rec.idle, true);
  const stopped = rec.stop(2000);
  await step(100);
  await stopped;
  assert.equal(creates.length, 3);
  assert.match(creates[2].note, /on 3 more entities/);
  for (const e of entities) assert.equal(naming(creates, e).length, 1, `${e} named once`);
});

test('1,000 distinct Fatals at once: a backlog of 8 creates, every other one named in summaries of about 50 each', async () => {
  const { rec, creates } = recorder();
  const entities = Array.from({ length: 1000 }, (_, i) => gpu(i + 1));
  for (const e of entities) rec.handle(fatal(e));
  await advance(250);
  const summaries = creates.filter((c) => / more entit(y|ies) \(/.test(c.note));
  // Arriving faster than any write: own Events until 8 creates are queued, then summaries.
  assert.equal(creates.length - summaries.length, 8);
  // 992 entities of 16 characters: ~50 a note, within the summary bucket's 30.
  assert.ok(summaries.length >= 19 && summaries.length <= 21, `${summaries.length} summaries`);
  for (const e of entities) assert.equal(naming(creates, e).length, 1, `${e} named once`);
  await rec.stop();
});

test("a summarized entity's repeats fold into its own uncounted series: no second Event, no series write", async () => {
  const { rec, creates, patches } = recorder(1);
  rec.handle(fatal(gpu(1)));
  rec.handle(fatal(gpu(2)));
  await advance(250);
  assert.equal(creates.length, 2);
  for (let i = 0; i < 5; i++) {
    rec.handle({
      kind: 'repeat',
      problem: {
        key: `AcceleratedHardwareReady|NvidiaXID79Error|${gpu(2)}`,
        reason: 'NvidiaXID79Error',
        severity: 'Fatal',
        condition: 'AcceleratedHardwareReady',
        entity: gpu(2),
        message: 'GPU has fallen off the bus',
        firstSeen: clock(),
        lastSeen: clock(),
        count: 2 + i,
      },
    });
    await advance(10_000);
  }
  rec.flush();
  await advance(0);
  assert.equal(creates.length, 2, 'no Event for the repeats');
  assert.deepEqual(patches, [], 'a summary is never series-patched for one of its entities');
  await rec.stop();
});

test('Warnings over their budget are still dropped and counted, never summarized', async () => {
  const { rec, creates, metric } = recorder();
  for (let i = 0; i < 8; i++)
    rec.handle({
      kind: 'finding',
      finding: {
        reason: 'NvidiaPCIeError',
        message: 'replay counter rose',
        source: 'nvml',
        entity: gpu(i),
        at: clock(),
        severity: 'Warning',
        condition: 'AcceleratedHardwareReady',
        action: 'none',
        count: 1,
      },
    });
  await advance(0);
  assert.equal(creates.length, 6);
  assert.equal(await metric('vigil_k8s_events_dropped_total', { why: 'rate_limited' }), 2);
  assert.equal(await metric('vigil_k8s_event_entities_summarized_total'), 0);
  await rec.stop();
});
