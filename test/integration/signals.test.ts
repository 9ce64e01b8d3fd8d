/**
 * Signals on the real `vigil run` process: SIGHUP (a closed terminal, `kill -HUP`) stops the agent
 * the way SIGTERM does, with a log line and its state saved, instead of killing it (exit 129).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startAgent, uniquePci, writeKmsg } from '../helpers/agent-process.ts';

test('SIGHUP stops the agent cleanly: exit 0, a "stopping" log line, and the finding it just saw saved', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-signals-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const config = path.join(dir, 'vigil.yaml');
  // lookback 0: records already in the ring (other tests' faults) are not this test's business.
  writeFileSync(config, 'kernelLog:\n  lookback: "0"\n');
  const agent = await startAgent(['--standalone', '--state-dir', dir, '--config', config]);
  t.after(() => agent.stop());
  // Logged just before the signal handlers are installed, in the same synchronous step.
  await agent.waitFor((l) => l.event === 'mode');

  const pci = uniquePci();
  writeKmsg(`NVRM: Xid (PCI:${pci}): 79, pid=1234, name=python3, GPU has fallen off the bus.`);
  await agent.waitFor((l) => l.event === 'finding' && l.entity === `gpu:${pci}`);
  const exited = once(agent.child, 'exit');
  agent.child.kill('SIGHUP');
  const [code, signal] = (await exited) as [number | null, NodeJS.Signals | null];

  assert.deepEqual({ code, signal }, { code: 0, signal: null }, 'a clean exit, not death by SIGHUP (129)');
  assert.ok(
    agent.lines.some((l) => l.event === 'stopping' && l.signal === 'SIGHUP'),
    'says why it stops',
  );
  // The signal follows the finding at once: the coalesced save may not have run yet, the stop's save must.
  const state = readFileSync(path.join(dir, 'state.json'), 'utf8');
  assert.ok(state.includes(`gpu:${pci}`), 'the finding is in the saved state');
});
