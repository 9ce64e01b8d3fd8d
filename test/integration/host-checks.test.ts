/** Every host check against this machine's own /proc and /sys (host root `/`), with the real readers. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildHostChecks, HostMonitors, type CheckReport } from '../../src/monitors/index.ts';
import { hostMonitorsConfigSchema } from '../../src/monitors/index.ts';
import type { Finding, HealthySignal } from '../../src/api/index.ts';
import { errorMessage } from '../../src/util/index.ts';

// localhost makes the DNS check run for real without depending on cluster DNS.
const cfg = hostMonitorsConfigSchema.parse({ hostRoot: '/', networking: { dns: { host: 'localhost' } } });

test('every check runs twice against / without throwing and returns a report', async () => {
  const reports = new Map<string, CheckReport[]>();
  for (const check of buildHostChecks(cfg)) {
    for (let i = 0; i < 2; i++) {
      const r = await check.run({ root: '/', signal: AbortSignal.timeout(check.budgetMs), now: Date.now() });
      assert.ok(Array.isArray(r.findings) && Array.isArray(r.healthy), check.name);
      for (const f of r.findings) assert.ok(f.reason && f.message && typeof f.entity === 'string', `${check.name}: ${JSON.stringify(f)}`);
      reports.set(check.name, [...(reports.get(check.name) ?? []), r]);
    }
  }
  assert.equal(reports.size, 16);
  const last = (name: string) => reports.get(name)!.at(-1)!;
  const healthyOrFound = (r: CheckReport) => [...r.findings.map((f) => f.reason), ...r.healthy.flatMap((h) => h.reasons)];
  // Facts every Linux host has.
  assert.ok(healthyOrFound(last('kernel.limits')).includes('ApproachingKernelPidMax'));
  assert.ok(healthyOrFound(last('networking.interfaces')).includes('MissingLoopbackInterface'));
  assert.ok(healthyOrFound(last('storage.filesystems')).includes('FilesystemReadOnly'));
  assert.deepEqual(last('networking.dns').findings, [], 'localhost resolves');
  assert.notEqual(last('kernel.clock').status, 'skipped', 'adjtimex through koffi works');
  assert.notEqual(last('txTimeouts.queues').status, 'skipped', 'the kernel counts transmit timeouts in sysfs');
});

test('HostMonitors runs a full cycle on this machine through the queue', async (t) => {
  const findings: Finding[] = [];
  const healthy: HealthySignal[] = [];
  const hm = new HostMonitors(cfg);
  hm.start({ finding: (f) => findings.push(f), healthy: (h) => healthy.push(h), source: () => {} });
  t.after(() => hm.stop());
  const records = await hm.runOnce();
  assert.equal(records.length, 16);
  for (const r of records) {
    const why = r.error === undefined ? '' : errorMessage(r.error);
    assert.ok(['ok', 'fault', 'skipped'].includes(r.status), `${r.name}: ${r.status} ${why}`);
  }
  assert.ok(healthy.length > 0);
});
