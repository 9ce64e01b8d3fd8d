/**
 * The engine with thousands of active problems (a burst of distinct faults): conditions, their
 * messages and the views handed to listeners stay exactly what they were when every event walked
 * every problem. Cost itself is measured by `npm run bench -- burst`, not here.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { Engine, type ConditionInfo } from '../../src/engine/index.ts';
import type { ActiveProblem, Finding, NodeHealth } from '../../src/api/index.ts';
import { CONDITIONS, ruleReason } from '../../src/catalog/index.ts';

const T0 = Date.parse('2026-12-01T00:00:00Z');

function setup() {
  let t = T0;
  const registry = new Registry();
  const conditions = new Map<string, ConditionInfo>(Object.entries(CONDITIONS).map(([type, c]) => [type, { name: type, ...c }]));
  const engine = new Engine({ bootId: 'boot-a', now: () => t, conditions, registry });
  const gauge = async (condition: string, severity: string) => {
    const m = (await registry.getMetricsAsJSON()).find((x) => x.name === 'vigil_active_problems');
    return m?.values.find((v) => v.labels.condition === condition && v.labels.severity === severity)?.value ?? 0;
  };
  return { engine, registry, conditions, gauge, advance: (ms: number) => (t += ms), now: () => t };
}

/** An XFS shutdown (Fatal, StorageReady) on its own device, seen at `at`. */
const xfs = (i: number, at: number): Finding => ({
  reason: 'XFSShutdown',
  message: `XFS (d${i}): Log I/O Error Detected. Shutting down filesystem`,
  source: 'kmsg',
  entity: `blockdev:d${i}`,
  at,
});

/** The condition message as it was defined before the per-condition index: every problem, oldest first, then cut. */
function fullMessage(active: ActiveProblem[]): string {
  const m = active.map((p) => `${p.reason}${p.entity ? ` on ${p.entity}` : ''}: ${p.message}`).join('; ');
  return m.length > 1024 ? `${m.slice(0, 1021)}...` : m;
}

test('thousands of Fatal problems: the condition names the oldest, lists all oldest first and bounds its message', () => {
  const { engine, now, advance } = setup();
  const sent: Finding[] = [];
  for (let i = 0; i < 3000; i++) {
    advance(1);
    // Every seventh is a record from the ring seen late (older than those before it); some share a time.
    const at = i % 7 === 0 ? T0 - (i % 50) * 1000 : now() - (i % 3 === 0 ? 1 : 0);
    const f = xfs(i, at);
    sent.push(f);
    engine.finding(f);
  }
  const c = engine.health().conditions.find((x) => x.type === 'StorageReady')!;
  assert.equal(c.status, 'False');
  assert.equal(c.active.length, 3000);
  // Oldest first; equal times keep arrival order (a stable sort of what was sent).
  const expected = sent.map((f, i) => ({ f, i })).sort((a, b) => a.f.at - b.f.at || a.i - b.i);
  assert.deepEqual(
    c.active.map((p) => p.entity),
    expected.map((x) => x.f.entity),
  );
  assert.equal(c.reason, 'XFSShutdown');
  assert.equal(c.message, fullMessage(c.active));
  assert.equal(c.message.length, 1024);
});

test('problems that clear leave the rest in order, and the condition recovers with the last one', async () => {
  const { engine, advance, now, gauge } = setup();
  const lost = ruleReason('DiskLost');
  const disk = (i: number, ttlMs: number): Finding => ({
    reason: lost,
    message: `disk ${i} lost`,
    source: 'kmsg',
    entity: `disk${i}`,
    at: now(),
    severity: 'Fatal',
    condition: 'StorageReady',
    recovery: { kind: 'ttl', ttlMs },
  });
  for (let i = 0; i < 600; i++) {
    advance(10);
    engine.finding(disk(i, i % 2 ? 60_000 : 120_000));
  }
  assert.equal(await gauge('StorageReady', 'Fatal'), 600);
  advance(61_000);
  engine.tick();
  const c = engine.health().conditions.find((x) => x.type === 'StorageReady')!;
  assert.deepEqual(
    c.active.map((p) => p.entity),
    Array.from({ length: 300 }, (_, k) => `disk${k * 2}`),
    'the odd ones expired; the even ones stay, oldest first',
  );
  assert.equal(c.message, fullMessage(c.active));
  assert.equal(await gauge('StorageReady', 'Fatal'), 300);
  advance(120_000);
  engine.tick();
  const after = engine.health().conditions.find((x) => x.type === 'StorageReady')!;
  assert.equal(after.status, 'True');
  assert.deepEqual(after.active, []);
  assert.equal(await gauge('StorageReady', 'Fatal'), 0);
});

test('listeners get on each event the health that health() reports at that moment', () => {
  const { engine, advance, now } = setup();
  const pairs: [string, string][] = [];
  engine.on((e, h: NodeHealth) => {
    if (e.kind !== 'repeat') pairs.push([JSON.stringify(h), JSON.stringify(engine.health())]);
  });
  for (let i = 0; i < 40; i++) {
    advance(1000);
    engine.finding(
      i % 2
        ? xfs(i, now())
        : { reason: 'BlockDeviceIOError', message: `I/O error ${i}`, source: 'kmsg', entity: `blockdev:w${i}`, at: now() },
    );
  }
  engine.finding({ reason: 'SoftLockup', message: 'soft lockup', source: 'kmsg', entity: 'cpu:3', at: now() });
  assert.equal(pairs.length, 42, 'one condition change and 41 findings');
  for (const [given, health] of pairs) assert.equal(given, health);
  const last = JSON.parse(pairs.at(-1)![0]) as NodeHealth;
  assert.equal(last.warnings.length, 21);
  assert.equal(last.conditions.find((c) => c.type === 'StorageReady')!.active.length, 20);
});

test('a restart restores thousands of problems with the same health and gauges', async () => {
  const a = setup();
  for (let i = 0; i < 2000; i++) {
    a.advance(1);
    a.engine.finding(
      i % 2
        ? xfs(i, i % 5 === 0 ? T0 - i : a.now())
        : { reason: 'Ext4Error', message: `ext4 ${i}`, source: 'kmsg', entity: `blockdev:e${i}`, at: a.now() },
    );
  }
  const registry = new Registry();
  const restored = new Engine({ bootId: 'boot-a', now: a.now, conditions: a.conditions, registry, restored: a.engine.snapshot() });
  assert.deepEqual(restored.health(), a.engine.health());
  const m = (await registry.getMetricsAsJSON()).find((x) => x.name === 'vigil_active_problems')!;
  assert.deepEqual(m.values.map((v) => [v.labels.severity, v.value]).sort(), [
    ['Fatal', 1000],
    ['Warning', 1000],
  ]);
});
