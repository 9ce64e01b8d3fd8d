import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { HostMonitors, ReportPublisher, type StatfsFn } from '../../src/monitors/index.ts';
import { hostMonitorsConfigSchema } from '../../src/monitors/index.ts';
import { WorkQueue } from '../../src/scheduler/index.ts';
import { lookupReason } from '../../src/catalog/index.ts';
import { fakeExec, fx, RecordingSink } from './host-helpers.ts';

const statfs: StatfsFn = () => Promise.resolve({ blocks: 100, bfree: 2, bavail: 2, files: 100, ffree: 1 });
const kernel = { timex: () => Promise.resolve({ status: 0x40, state: 5, maxErrorUs: 16e6 }), klog: () => Promise.resolve(undefined) };

test('config: every field has a default; durations, regexes and budgets are validated', () => {
  const cfg = hostMonitorsConfigSchema.parse({});
  assert.equal(cfg.hostRoot, '/');
  assert.deepEqual(cfg.kernel.checks.limits, { enabled: true, intervalMs: 300_000, budgetMs: 10_000 });
  assert.equal(cfg.networking.checks.interfaces.intervalMs, 300_000);
  assert.equal(cfg.storage.checks.iodelay.intervalMs, 600_000);
  const custom = hostMonitorsConfigSchema.parse({
    storage: { checks: { diskstats: { interval: '30s', budget: '2s' } }, ioLatency: '250ms' },
  });
  assert.deepEqual(custom.storage.checks.diskstats, { enabled: true, intervalMs: 30_000, budgetMs: 2_000 });
  assert.equal(custom.storage.ioLatency, 250);
  assert.throws(() => hostMonitorsConfigSchema.parse({ networking: { excludedInterfaces: ['(('] } }), /invalid regular expression/);
  assert.throws(
    () => hostMonitorsConfigSchema.parse({ kernel: { checks: { clock: { interval: '1s', budget: '5s' } } } }),
    /budget <= interval/,
  );
  assert.throws(() => hostMonitorsConfigSchema.parse({ kernel: { checks: { clock: { interval: 'soon' } } } }), /expected a duration/);
  assert.throws(() => hostMonitorsConfigSchema.parse({ kernel: { pidMax: 1 } }), /pidMax/);
});

test('enabled flags select monitors and checks', () => {
  const cfg = hostMonitorsConfigSchema.parse({
    storage: { enabled: false },
    runtime: { enabled: false },
    kernel: { checks: { clock: { enabled: false } } },
  });
  const names = new HostMonitors(cfg).checks.map((c) => c.name);
  assert.deepEqual(names, [
    'kernel.limits',
    'kernel.zombies',
    'kernel.warnings',
    'networking.interfaces',
    'networking.sysctl',
    'networking.ena',
    'networking.rdma',
    'networking.dns',
    'txTimeouts.queues',
  ]);
});

test('a faulty host: findings reach the sink and every reason is in the catalog', async () => {
  const root = fx('faulty');
  const sink = new RecordingSink();
  const registry = new Registry();
  const cfg = hostMonitorsConfigSchema.parse({
    hostRoot: root,
    networking: { consecutivePolls: 1 },
    kernel: { zombieConsecutivePolls: 1 },
  });
  const hm = new HostMonitors(cfg, {
    registry,
    deps: { kernel, statfs, exec: fakeExec({ root }), lookup: () => Promise.resolve('ENOTFOUND'), env: {} },
  });
  hm.start(sink);
  const records = await hm.runOnce();
  await hm.stop();
  assert.equal(records.length, 16);
  assert.ok(
    records.every((r) => r.status !== 'error' && r.status !== 'timeout'),
    JSON.stringify(records.map((r) => [r.name, r.status])),
  );
  const reasons = new Set<string>(sink.findings.map((f) => f.reason));
  for (const r of reasons) assert.ok(lookupReason(r), `${r} is not in the catalog`);
  for (const expected of [
    'ApproachingKernelPidMax',
    'ApproachingMaxOpenFiles',
    'ExcessiveZombieProcesses',
    'ClockUnsynchronized',
    'InterfaceNotUp',
    'InterfaceNotRunning',
    'MissingLoopbackInterface',
    'NetworkSysctl',
    'ConntrackExceeded',
    'DNSResolutionFailed',
    'FilesystemReadOnly',
    'DiskUsageHigh',
    'InodeUsageHigh',
    'KubeletFailed',
  ]) {
    assert.ok(reasons.has(expected), `${expected} missing from ${[...reasons].join(', ')}`);
  }
  assert.ok(sink.findings.every((f) => ['procfs', 'sysfs', 'exec', 'kmsg'].includes(f.source)));
  assert.match(await registry.metrics(), /vigil_check_last_result\{check="kernel.limits",result="fault"\} 1/);
});

test('an overrunning check is reported as MonitorCheckTimeout and its late report dropped', async () => {
  const sink = new RecordingSink();
  let release!: (v: undefined) => void;
  const hang = { timex: () => new Promise<undefined>((r) => (release = r)), klog: () => Promise.resolve(undefined) };
  const cfg = hostMonitorsConfigSchema.parse({
    hostRoot: fx('healthy'),
    kernel: { checks: { clock: { interval: '1m', budget: '20ms' } } },
  });
  const hm = new HostMonitors(cfg, { deps: { kernel: hang } });
  hm.start(sink);
  const [rec] = await hm.scheduler.runAll(['kernel.clock']);
  assert.equal(rec.status, 'timeout');
  assert.deepEqual(
    sink.findings.map((f) => [f.reason, f.entity, f.source]),
    [['MonitorCheckTimeout', 'check:kernel.clock', 'engine']],
  );
  release(undefined);
  await new Promise((r) => setImmediate(r));
  assert.equal(sink.healthySignals.length, 0, 'the late result is not published');
  await hm.stop();
});

test('a shared queue keeps other pollers; stop() removes only the host checks', async () => {
  const queue = new WorkQueue({ startupJitterMs: 60_000 });
  queue.add({ name: 'gpu.poll', intervalMs: 60_000, budgetMs: 5_000, run: () => Promise.resolve(undefined) });
  const hm = new HostMonitors(hostMonitorsConfigSchema.parse({ storage: { enabled: false } }), { scheduler: queue });
  hm.start(new RecordingSink());
  assert.ok(queue.names().includes('gpu.poll') && queue.names().includes('kernel.limits'));
  await hm.stop();
  assert.deepEqual(queue.names(), ['gpu.poll']);
  await queue.stop();
});

test('publisher: an entity that was reported and then vanished is cleared', () => {
  const sink = new RecordingSink();
  const p = new ReportPublisher();
  const f = { reason: 'InterfaceNotUp' as const, source: 'sysfs' as const, entity: 'netif:eth9', message: 'x', at: 1 };
  assert.equal(p.publish(sink, { findings: [f], healthy: [] }, 1), 'fault');
  assert.equal(p.publish(sink, { findings: [], healthy: [] }, 2), 'ok');
  assert.deepEqual(sink.healthySignals, [{ reasons: ['InterfaceNotUp'], entity: 'netif:eth9', source: 'sysfs', at: 2 }]);
  assert.equal(p.publish(sink, { findings: [], healthy: [], status: 'skipped' }, 3), 'skipped');
  assert.equal(sink.healthySignals.length, 1, 'cleared once');
});
