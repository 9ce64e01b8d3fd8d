/**
 * A condition's status change is on disk before it is published: an agent killed with SIGKILL the
 * moment its condition line appears comes back with the same lastTransitionTime, not the restart's
 * time (which would restart a repair engine's toleration clock). Real agent, real /dev/kmsg.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { kernelLogOnlyConfig, startAgent, uniquePci, writeKmsg } from '../helpers/agent-process.ts';

interface Conditions {
  conditions: { type: string; status: string; lastTransitionTime: string; active: { entity: string }[] }[];
}

test('SIGKILL right after a condition turns False: the restarted agent keeps its lastTransitionTime', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-durable-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const config = path.join(dir, 'vigil.yaml');
  // A lookback that reaches the fault: without its saved state, the restart rebuilds the condition
  // from the ring, at the restart's time.
  writeFileSync(config, kernelLogOnlyConfig().replace('lookback: "0"', 'lookback: 2m'));
  const args = ['--standalone', '--state-dir', dir, '--config', config];

  const first = await startAgent(args);
  t.after(() => first.stop());
  const pci = uniquePci();
  writeKmsg(`NVRM: Xid (PCI:${pci}): 79, pid=1234, name=python3, GPU has fallen off the bus.`);
  const published = await first.waitFor((l) => l.event === 'condition' && l.type === 'AcceleratedHardwareReady' && l.status === 'False');
  const exited = once(first.child, 'exit');
  first.child.kill('SIGKILL');
  await exited;
  // Condition times have second precision: a restart in a later second would show.
  await new Promise((r) => setTimeout(r, 1100));

  const second = await startAgent(args);
  t.after(() => second.stop());
  const c = ((await second.get('/conditions')) as Conditions).conditions.find((x) => x.type === 'AcceleratedHardwareReady');
  assert.equal(c?.status, 'False', 'the fault is still reported after the restart');
  assert.ok(c.active.some((p) => p.entity === `gpu:${pci}`));
  assert.equal(c.lastTransitionTime, published.lastTransitionTime, 'the time the condition first turned False');
});
