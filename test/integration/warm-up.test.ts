/**
 * The warm-up (src/app/warm-up.ts) runs synthetic Xid 79s on PCI 0000:00:00-09 through throwaway copies
 * of the classifier, pipeline and engine: the agent itself must never show it, and a real fault right
 * after is reported as before. Real agent, real /dev/kmsg.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { kernelLogOnlyConfig, startAgent, uniquePci, writeKmsg } from '../helpers/agent-process.ts';
import { tempDir } from '../helpers/temp-dir.ts';

/** The warm-up's GPUs (WARM_UP_XID_LINES). */
const SYNTHETIC = /0000:00:0[0-9a-f]\b/;

interface Conditions {
  conditions: { type: string; status: string; active: { entity: string; reason: string }[] }[];
}

test("the warm-up's synthetic Xid never reaches the agent; a real Xid 79 after it is reported", async (t) => {
  const dir = tempDir('vigil-warm-');
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const config = path.join(dir, 'vigil.yaml');
  writeFileSync(config, kernelLogOnlyConfig());
  const agent = await startAgent(['--standalone', '--state-dir', dir, '--config', config]);
  t.after(() => agent.stop());
  // The warm-up runs on the turn after start; give it that turn and more.
  await new Promise((r) => setTimeout(r, 500));
  const active = async () =>
    ((await agent.get('/conditions')) as Conditions).conditions.flatMap((c) => c.active.map((p) => `${p.reason} ${p.entity}`));
  assert.ok(!(await active()).some((p) => SYNTHETIC.test(p)), 'the synthetic GPUs are no problem of the agent');
  assert.ok(!agent.lines.some((l) => SYNTHETIC.test(JSON.stringify(l))), 'nothing about the synthetic GPUs is logged');

  const pci = uniquePci();
  writeKmsg(`NVRM: Xid (PCI:${pci}): 79, pid=1234, name=python3, GPU has fallen off the bus.`);
  await agent.waitFor((l) => l.event === 'finding' && JSON.stringify(l).includes(pci), 10_000);
  assert.ok((await active()).includes(`NvidiaXID79Error gpu:${pci}`));
  assert.ok(!(await active()).some((p) => SYNTHETIC.test(p)));
});
