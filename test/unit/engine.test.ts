import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { Engine, type ConditionInfo, type EngineOptions } from '../../src/engine/index.ts';
import type { EngineEvent, Finding } from '../../src/api/index.ts';
import { CONDITIONS, ruleReason } from '../../src/catalog/index.ts';

function setup(over: Partial<EngineOptions> = {}) {
  let t = Date.parse('2026-12-01T00:00:00Z');
  const registry = new Registry();
  const conditions = new Map<string, ConditionInfo>(Object.entries(CONDITIONS).map(([type, c]) => [type, { name: type, ...c }]));
  const engine = new Engine({ bootId: 'boot-a', now: () => t, conditions, registry, ...over });
  const events: EngineEvent[] = [];
  engine.on((e) => events.push(e));
  const advance = (ms: number) => (t += ms);
  const f = (reason: Finding['reason'], entity = '', extra: Partial<Finding> = {}): Finding => ({
    reason,
    message: `${reason} happened`,
    source: 'kmsg',
    entity,
    at: t,
    ...extra,
  });
  const cond = (type: string) => engine.health().conditions.find((c) => c.type === type)!;
  const metric = async (name: string, labels: Record<string, string>) => {
    const m = (await registry.getMetricsAsJSON()).find((x) => x.name === name);
    const v = m?.values.find((x) => Object.entries(labels).every(([k, val]) => x.labels[k] === val));
    return v?.value ?? 0;
  };
  return { engine, events, advance, f, cond, metric, registry, conditions, now: () => t };
}

test('a Fatal reason sets its condition False, names the reason, and keeps the transition time while repeats arrive', () => {
  const { engine, f, cond, advance, events } = setup();
  const before = cond('AcceleratedHardwareReady');
  assert.equal(before.status, 'True');
  assert.equal(before.reason, 'NvidiaGPUIsReady');
  advance(5000);
  engine.finding(f('NvidiaXID79Error', 'gpu:0000:b3:00'));
  const c = cond('AcceleratedHardwareReady');
  assert.equal(c.status, 'False');
  assert.equal(c.reason, 'NvidiaXID79Error');
  assert.match(c.message, /NvidiaXID79Error on gpu:0000:b3:00/);
  assert.notEqual(c.lastTransitionTime, before.lastTransitionTime);
  assert.equal(events.filter((e) => e.kind === 'condition').length, 1);
  advance(60_000);
  engine.finding(f('NvidiaXID79Error', 'gpu:0000:b3:00'));
  assert.equal(cond('AcceleratedHardwareReady').lastTransitionTime, c.lastTransitionTime);
  assert.equal(events.filter((e) => e.kind === 'condition').length, 1);
  assert.equal(cond('KernelReady').status, 'True', 'other conditions are untouched');
});

test('Warnings and Info do not change a condition', () => {
  const { engine, f, cond, events } = setup();
  engine.finding(f('SoftLockup'));
  engine.finding(f('MonitorCheckTimeout'));
  assert.equal(cond('KernelReady').status, 'True');
  assert.deepEqual(
    events.map((e) => e.kind),
    ['finding', 'finding'],
  );
  assert.deepEqual(
    engine
      .health()
      .warnings.map((w) => w.reason)
      .sort(),
    ['MonitorCheckTimeout', 'SoftLockup'],
  );
});

test('several Fatal reasons on one condition keep it False until all have recovered', () => {
  const { engine, f, cond, advance } = setup();
  engine.finding(f('InterfaceNotUp', 'netif:eth0', { source: 'sysfs' }));
  engine.finding(f('MissingLoopbackInterface', '', { source: 'sysfs' }));
  const c = cond('NetworkingReady');
  assert.equal(c.status, 'False');
  assert.match(c.message, /InterfaceNotUp on netif:eth0.*MissingLoopbackInterface/);
  advance(1000);
  engine.healthy({ reasons: ['InterfaceNotUp'], entity: 'netif:eth0', source: 'sysfs', at: Date.now() });
  assert.equal(cond('NetworkingReady').status, 'False');
  assert.equal(cond('NetworkingReady').lastTransitionTime, c.lastTransitionTime);
  assert.doesNotMatch(cond('NetworkingReady').message, /InterfaceNotUp/);
  advance(1000);
  engine.healthy({ reasons: ['MissingLoopbackInterface'], source: 'sysfs', at: Date.now() });
  assert.equal(cond('NetworkingReady').status, 'True');
  assert.notEqual(cond('NetworkingReady').lastTransitionTime, c.lastTransitionTime);
});

test('a healthy signal for another entity does not clear a problem', () => {
  const { engine, f, cond } = setup();
  engine.finding(f('InterfaceNotUp', 'netif:eth0'));
  engine.healthy({ reasons: ['InterfaceNotUp'], entity: 'netif:eth1', source: 'sysfs', at: 0 });
  assert.equal(cond('NetworkingReady').status, 'False');
});

test('untilReboot reasons ignore healthy signals and ttl', () => {
  const { engine, f, cond, advance } = setup();
  engine.finding(f('XFSShutdown', 'blockdev:sdb'));
  engine.healthy({ reasons: ['XFSShutdown'], source: 'procfs', at: 0 });
  advance(48 * 3600_000);
  engine.tick();
  assert.equal(cond('StorageReady').status, 'False');
});

test('ttl reasons clear after a quiet period, and a repeat restarts the clock', () => {
  const { engine, f, advance, events } = setup();
  engine.finding(f('SoftLockup'));
  advance(20 * 60_000);
  engine.finding(f('SoftLockup'));
  advance(20 * 60_000);
  engine.tick();
  assert.equal(engine.health().warnings.length, 1, 'still within 30m of the last one');
  advance(11 * 60_000);
  engine.tick();
  assert.equal(engine.health().warnings.length, 0);
  const rec = events.find((e) => e.kind === 'recovered');
  assert.ok(rec && rec.kind === 'recovered' && rec.why === 'ttl');
});

test('repeats within the repeat window are counted, not re-emitted', async () => {
  const { engine, f, events, advance, metric } = setup();
  for (let i = 0; i < 50; i++) engine.finding(f('NvidiaXID31Warning', 'gpu:0000:01:00'));
  assert.equal(events.filter((e) => e.kind === 'finding').length, 1);
  assert.equal(await metric('vigil_findings_suppressed_total', { why: 'duplicate' }), 49);
  assert.equal(await metric('vigil_findings_total', { reason: 'NvidiaXID31Warning' }), 50);
  advance(61_000);
  engine.finding(f('NvidiaXID31Warning', 'gpu:0000:01:00'));
  const last = events.at(-1)!;
  assert.ok(last.kind === 'finding');
  assert.equal(last.finding.count, 51, 'the re-emitted finding carries the total count');
});

test('a threshold raises only once the count is reached within the window', async () => {
  const { engine, f, advance, metric } = setup();
  const th = { threshold: { count: 3, windowMs: 60_000 } };
  engine.finding(f('PCIeCorrectedErrors', 'pci:0000:00:01.0', th));
  advance(61_000);
  engine.finding(f('PCIeCorrectedErrors', 'pci:0000:00:01.0', th));
  engine.finding(f('PCIeCorrectedErrors', 'pci:0000:00:01.0', th));
  assert.equal(engine.health().warnings.length, 0, 'the first one fell out of the window');
  engine.finding(f('PCIeCorrectedErrors', 'pci:0000:00:01.0', th));
  assert.equal(engine.health().warnings.length, 1);
  assert.equal(await metric('vigil_findings_suppressed_total', { why: 'below_threshold' }), 3);
});

test('escalation: repeated Xid 13 warnings on one GPU become a Fatal reason', () => {
  const { engine, f, cond, advance } = setup({
    escalations: [{ match: 'NvidiaXID(13)Warning', count: 3, windowMs: 600_000, raise: 'NvidiaXID$1Repeated' }],
  });
  engine.finding(f('NvidiaXID13Warning', 'gpu:0000:01:00'));
  engine.finding(f('NvidiaXID13Warning', 'gpu:0000:02:00'));
  advance(1000);
  engine.finding(f('NvidiaXID13Warning', 'gpu:0000:01:00'));
  assert.equal(cond('AcceleratedHardwareReady').status, 'True', 'two on one GPU and one on another is not enough');
  engine.finding(f('NvidiaXID13Warning', 'gpu:0000:01:00'));
  const c = cond('AcceleratedHardwareReady');
  assert.equal(c.status, 'False');
  assert.equal(c.reason, 'NvidiaXID13Repeated');
  assert.equal(c.active[0].entity, 'gpu:0000:01:00');
});

test('an unknown reason is dropped, counted and reported, never silently', async () => {
  const { engine, f, events, metric } = setup();
  engine.finding(f('NoSuchReason' as Finding['reason'])); // only a cast gets past the type checker
  assert.equal(await metric('vigil_findings_dropped_total', { why: 'unknown_reason' }), 1);
  assert.equal(events.length, 1);
  assert.ok(events[0].kind === 'finding' && /dropped finding/.test(events[0].finding.message));
  assert.equal(engine.health().warnings.length, 0);
});

test('a finding may bring its own severity and condition (user and NPD rules)', () => {
  const { engine, f, cond } = setup();
  engine.manageCondition('KernelDeadlock', {
    name: 'KernelDeadlock',
    healthyReason: 'KernelHasNoDeadlock',
    healthyMessage: 'kernel has no deadlock',
  });
  engine.finding(f(ruleReason('DockerHung'), '', { severity: 'Fatal', condition: 'KernelDeadlock', recovery: { kind: 'untilReboot' } }));
  assert.equal(cond('KernelDeadlock')?.status, 'False');
});

test('state survives a restart on the same boot with the same transition time', () => {
  const a = setup();
  a.engine.finding(a.f('NvidiaXID79Error', 'gpu:0000:b3:00'));
  a.engine.finding(a.f('SoftLockup'));
  const before = a.cond('AcceleratedHardwareReady');
  const snap = JSON.parse(JSON.stringify(a.engine.snapshot())) as EngineOptions['restored'];
  a.advance(3600_000);
  const b = setup({ restored: snap });
  const after = b.cond('AcceleratedHardwareReady');
  assert.equal(after.status, 'False');
  assert.equal(after.lastTransitionTime, before.lastTransitionTime);
  assert.deepEqual(
    b.engine.health().warnings.map((w) => w.reason),
    ['SoftLockup'],
  );
  assert.equal(b.events.length, 0, 'a restart emits nothing by itself');
});

test('a new boot clears every reason and marks the condition True from then', () => {
  const a = setup();
  a.engine.finding(a.f('NvidiaXID79Error', 'gpu:0000:b3:00'));
  const snap = a.engine.snapshot();
  const b = setup({ restored: snap, bootId: 'boot-b' });
  const c = b.cond('AcceleratedHardwareReady');
  assert.equal(c.status, 'True');
  assert.equal(b.engine.health().warnings.length, 0);
});

test('adopted transition times are kept only where the status agrees', () => {
  const { engine, cond } = setup();
  engine.adoptConditions([
    { type: 'KernelReady', status: 'True', lastTransitionTime: '2026-01-01T00:00:00Z' },
    { type: 'StorageReady', status: 'False', lastTransitionTime: '2026-01-01T00:00:00Z' },
  ]);
  assert.equal(cond('KernelReady').lastTransitionTime, '2026-01-01T00:00:00.000Z');
  assert.notEqual(cond('StorageReady').lastTransitionTime, '2026-01-01T00:00:00.000Z');
});

test('a flapping whenHealthy problem is held until it is quiet', async () => {
  const { engine, f, cond, advance, metric, now } = setup({ flap: { maxActivations: 2, windowMs: 600_000 } });
  const cycle = () => {
    engine.finding(f('InterfaceNotUp', 'netif:eth0'));
    advance(1000);
    engine.healthy({ reasons: ['InterfaceNotUp'], source: 'sysfs', at: now() });
    advance(1000);
  };
  cycle();
  cycle();
  assert.equal(cond('NetworkingReady').status, 'True');
  cycle();
  assert.equal(cond('NetworkingReady').status, 'False', 'third activation within the window is held');
  assert.equal(await metric('vigil_findings_suppressed_total', { why: 'flapping' }), 1);
});

test('a condition that is not managed is not reported, but its findings still count', () => {
  const { engine, f, conditions } = setup();
  conditions.delete('AcceleratedHardwareReady');
  engine.finding(f('NvidiaXID79Error', 'gpu:0000:b3:00'));
  assert.equal(
    engine.health().conditions.some((c) => c.type === 'AcceleratedHardwareReady'),
    false,
  );
  engine.manageCondition('AcceleratedHardwareReady', { name: 'AcceleratedHardwareReady', ...CONDITIONS.AcceleratedHardwareReady });
  assert.equal(engine.health().conditions.find((c) => c.type === 'AcceleratedHardwareReady')?.status, 'False');
});

test('a Fatal finding on a late condition (GPU fault with no NVML) starts managing it', () => {
  const { engine, f, conditions } = setup();
  const info = conditions.get('AcceleratedHardwareReady')!;
  conditions.delete('AcceleratedHardwareReady');
  const e2 = new Engine({ bootId: 'b', conditions, lateConditions: new Map([['AcceleratedHardwareReady', info]]) });
  e2.finding(f('NvidiaXID13Warning', 'gpu:0000:01:00'));
  assert.equal(
    e2.health().conditions.some((c) => c.type === 'AcceleratedHardwareReady'),
    false,
    'a warning proves nothing',
  );
  e2.finding(f('NvidiaXID79Error', 'gpu:0000:01:00'));
  assert.equal(e2.health().conditions.find((c) => c.type === 'AcceleratedHardwareReady')?.status, 'False');
  void engine;
});

test('a late condition proved before a restart stays managed, with its transition time', () => {
  const a = setup();
  const info = a.conditions.get('AcceleratedHardwareReady')!;
  const base = new Map([...a.conditions].filter(([t]) => t !== 'AcceleratedHardwareReady'));
  const late = () => new Map([['AcceleratedHardwareReady', info]]);
  const e1 = new Engine({ bootId: 'b', conditions: new Map(base), lateConditions: late(), now: a.now });
  e1.finding(a.f('NvidiaXID79Error', 'gpu:0000:01:00'));
  const before = e1.health().conditions.find((c) => c.type === 'AcceleratedHardwareReady')!;
  a.advance(60_000);
  const e2 = new Engine({ bootId: 'b', conditions: new Map(base), lateConditions: late(), now: a.now, restored: e1.snapshot() });
  const after = e2.health().conditions.find((c) => c.type === 'AcceleratedHardwareReady');
  assert.equal(after?.status, 'False');
  assert.equal(after?.lastTransitionTime, before.lastTransitionTime);
});
