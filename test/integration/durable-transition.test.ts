/**
 * A condition's status change is on disk before it is published: an agent killed with SIGKILL the
 * moment its condition line appears comes back with the same lastTransitionTime, not the restart's
 * time (which would restart a repair engine's toleration clock). Real agent, real /dev/kmsg.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { kernelLogOnlyConfig, startAgent, uniquePci, writeKmsg } from '../helpers/agent-process.ts';
import { tempDir } from '../helpers/temp-dir.ts';

interface Conditions {
  conditions: { type: string; status: string; lastTransitionTime: string; active: { entity: string }[] }[];
}

test('SIGKILL right after a condition turns False: the restarted agent keeps its lastTransitionTime', async (t) => {
  const dir = tempDir('vigil-durable-');
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  // The first agent reads only what is written after it starts: other tests write Xid 79s to the
  // same ring, and one replayed from before would turn the condition False before ours.
  const firstConfig = path.join(dir, 'first.yaml');
  writeFileSync(firstConfig, kernelLogOnlyConfig());
  // The restart's lookback reaches the fault: without its saved state, it would rebuild the
  // condition from the ring, at the restart's time.
  const config = path.join(dir, 'vigil.yaml');
  writeFileSync(config, kernelLogOnlyConfig().replace('lookback: "0"', 'lookback: 2m'));
  const args = ['--standalone', '--state-dir', dir, '--config', config];

  const first = await startAgent(['--standalone', '--state-dir', dir, '--config', firstConfig]);
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
  // Another test's Xid 79 may have turned the condition False before ours was read: the restart
  // then reads ours from its saved cursor, after it starts serving.
  const deadline = Date.now() + 15_000;
  let c: Conditions['conditions'][number] | undefined;
  for (;;) {
    c = ((await second.get('/conditions')) as Conditions).conditions.find((x) => x.type === 'AcceleratedHardwareReady');
    if (c?.active.some((p) => p.entity === `gpu:${pci}`) || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(c?.status, 'False', 'the fault is still reported after the restart');
  assert.ok(
    c.active.some((p) => p.entity === `gpu:${pci}`),
    `gpu:${pci} is among the active problems`,
  );
  assert.equal(c.lastTransitionTime, published.lastTransitionTime, 'the time the condition first turned False');
});
