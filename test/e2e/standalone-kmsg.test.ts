/**
 * End to end on the real kernel log: the standalone agent sees faults written to /dev/kmsg,
 * reports them on /conditions, and keeps them (with the same transition time) across a restart
 * without reporting the old records again.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startAgent, uniquePci, writeKmsg } from '../helpers/agent-process.ts';
import type { NodeHealth } from '../../src/api/index.ts';

test('Xid 79 and a soft lockup on /dev/kmsg reach /conditions, and survive a restart without replay', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-e2e-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const config = path.join(dir, 'vigil.yaml');
  // lookback 0: records already in the ring (from other tests) are not this test's business.
  writeFileSync(config, 'kernelLog:\n  lookback: "0"\n');
  const args = ['--standalone', '--state-dir', dir, '--config', config];
  const pci = uniquePci();
  const entity = `gpu:${pci}`;
  const task = `vigil-e2e-${process.pid}`;

  const first = await startAgent(args);
  try {
    writeKmsg(`NVRM: Xid (PCI:${pci}): 79, pid=1234, name=python3, GPU has fallen off the bus.`);
    writeKmsg(`watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [${task}:4054]`, 4);
    await first.waitFor((l) => l.reason === 'NvidiaXID79Error' && l.entity === entity);
    await first.waitFor((l) => l.reason === 'SoftLockup' && String(l.msg).includes(task));
    const health = (await first.get('/conditions')) as NodeHealth;
    const accel = health.conditions.find((c) => c.type === 'AcceleratedHardwareReady');
    assert.ok(accel, 'a GPU fault in the kernel log proves a GPU, so the condition is reported');
    assert.equal(accel.status, 'False');
    assert.ok(accel.active.some((p) => p.reason === 'NvidiaXID79Error' && p.entity === entity));
    assert.ok(health.warnings.some((w) => w.reason === 'SoftLockup' && w.message.includes(task)));
    const metrics = String(await first.get('/metrics'));
    assert.match(metrics, /vigil_findings_total\{reason="NvidiaXID79Error",severity="Fatal",condition="AcceleratedHardwareReady"\} [1-9]/);
    assert.match(metrics, /vigil_condition_status\{condition="AcceleratedHardwareReady"\} 0/);
    assert.equal(await first.stop(), 0);

    const second = await startAgent(args);
    try {
      const again = (await second.get('/conditions')) as NodeHealth;
      const accel2 = again.conditions.find((c) => c.type === 'AcceleratedHardwareReady');
      assert.equal(accel2?.status, 'False');
      assert.equal(accel2?.lastTransitionTime, accel.lastTransitionTime, 'a restart does not reset the repair clock');
      // A fresh record proves the second agent is reading, and the old ones were not replayed.
      const marker = uniquePci();
      writeKmsg(`NVRM: Xid (PCI:${marker}): 13, pid=1, name=probe, Graphics Exception`);
      await second.waitFor((l) => l.entity === `gpu:${marker}`);
      assert.equal(
        second.lines.filter((l) => l.event === 'finding' && l.entity === entity).length,
        0,
        'the old Xid 79 record was not reported again',
      );
      assert.equal(
        second.lines.filter((l) => l.event === 'finding' && String(l.msg).includes(task)).length,
        0,
        'the old soft lockup was not reported again',
      );
    } finally {
      await second.stop();
    }
  } finally {
    await first.stop();
  }
});
