/**
 * A burst of 5,000 distinct faults written to the real /dev/kmsg as fast as one process can, into
 * a real standalone agent: every one becomes a problem, the agent loses no kernel record, and
 * /healthz keeps answering while it digests them. How fast is `npm run bench -- burst`'s business.
 * The faults are Warnings (block-device I/O errors on made-up devices): a Fatal burst would turn
 * StorageReady False in any agent a test running beside this one has started.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { kernelLogOnlyConfig, startAgent } from '../helpers/agent-process.ts';
import { burstLine, pollHealthz, writeBurst } from '../helpers/kmsg-burst.ts';
import type { NodeHealth } from '../../src/api/index.ts';
import { tempDir } from '../helpers/temp-dir.ts';

const N = 5000;
const skip = process.getuid?.() === 0 ? false : 'needs root to write to /dev/kmsg';

test('5,000 distinct faults in a burst: all arrive, no kernel record is lost, /healthz answers throughout', { skip }, async (t) => {
  const dir = tempDir('vigil-burst-');
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const config = path.join(dir, 'vigil.yaml');
  writeFileSync(config, kernelLogOnlyConfig());
  const agent = await startAgent(['--standalone', '--state-dir', dir, '--config', config]);
  t.after(() => agent.stop());
  const token = Math.random().toString(16).slice(2, 8);
  const mine = new Set(Array.from({ length: N }, (_, i) => burstLine(token, i).entity));

  const poller = pollHealthz(agent.port);
  t.after(() => poller.stop());
  const burstStart = Date.now();
  await writeBurst(token, N);

  // Every fault is a new problem, so each one logs one finding.
  // Wait while they keep coming (records lost to the ring never do).
  const arrived = new Set<string>();
  let scanned = 0;
  for (let lastNew = Date.now(); arrived.size < N && Date.now() - lastNew < 60_000;) {
    const before = arrived.size;
    for (; scanned < agent.lines.length; scanned++) {
      const l = agent.lines[scanned];
      if (l.event === 'finding' && typeof l.entity === 'string' && mine.has(l.entity)) arrived.add(l.entity);
    }
    if (arrived.size > before) lastNew = Date.now();
    if (arrived.size < N) await new Promise((r) => setTimeout(r, 100));
  }
  const burstEnd = Date.now();
  const samples = await poller.stop();
  const metrics = String(await agent.get('/metrics'));
  const lost = /^vigil_kmsg_lost_records_total (\d+)$/m.exec(metrics)?.[1];

  assert.equal(lost, '0', 'the agent read every record the kernel logged');
  assert.equal(arrived.size, N, `${N - arrived.size} faults never became findings`);
  const health = (await agent.get('/conditions')) as NodeHealth;
  assert.equal(
    health.warnings.filter((w) => mine.has(w.entity) && w.reason === 'BlockDeviceIOError').length,
    N,
    'one problem each on /conditions',
  );

  assert.deepEqual(samples.failures, [], 'no /healthz request went unanswered');
  const during = samples.answeredAt.filter((at) => at >= burstStart && at <= burstEnd).length;
  assert.ok(during > 0, '/healthz answered while the burst was being digested');
  assert.deepEqual(Object.keys(samples.statuses), ['200'], 'a burst does not make the agent unhealthy');
});
