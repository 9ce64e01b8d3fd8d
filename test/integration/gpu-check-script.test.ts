/**
 * bench/gpu/gpu-check.sh against the stand-ins (fake NVML library, fake nvidia-smi driven by the
 * same scenario): every field comparison and the event window pass, and a disagreement fails.
 */
import { strict as assert } from 'node:assert';
import { execFile } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const run = promisify(execFile);

test('gpu-check.sh --fake passes every check, one line each, and a field that differs from nvidia-smi fails', async (t) => {
  const started = Date.now();
  const { stdout } = await run('bash', ['bench/gpu/gpu-check.sh', '--fake', '--window', '6', '--keep'], {
    cwd: root,
    timeout: 280_000,
  }).catch((e: { stdout?: string; stderr?: string }) => assert.fail(`gpu-check.sh failed:\n${e.stdout ?? ''}\n${e.stderr ?? ''}`));
  const work = /^work dir: (.+)$/m.exec(stdout)?.[1];
  assert.ok(work, stdout);
  t.after(() => rmSync(work, { recursive: true, force: true }));
  assert.ok(Date.now() - started < 300_000, 'the check finishes within five minutes');
  const lines = stdout.split('\n').filter((l) => /^(PASS|FAIL|SKIP) {2}/.test(l));
  const status = (check: string) => lines.find((l) => l.slice(6).startsWith(check))?.slice(0, 4);
  for (const check of [
    'GPU count',
    'gpu 0000:18:00 uuid',
    'gpu 0000:18:00 pci address',
    'gpu 0000:18:00 ecc mode',
    'gpu 0000:18:00 ecc corrected (volatile)',
    'gpu 0000:18:00 remapped rows correctable',
    'gpu 0000:18:00 clock-event HW reasons',
    'gpu 0000:18:00 nvlink state',
    'gpu 0000:28:00 nvlink state',
    'events registered',
    'events window',
    'event Xid 48 (stand-in)',
  ])
    assert.equal(status(check), 'PASS', `${check}\n${stdout}`);
  assert.equal(lines.filter((l) => l.startsWith('FAIL')).length, 0, stdout);
  assert.match(stdout, /STAND-IN RUN/);

  // nvidia-smi now reports another UUID and an active HW slowdown: the comparison says so.
  const xml = path.join(work, 'smi.xml');
  writeFileSync(
    xml,
    readFileSync(xml, 'utf8')
      .replace('GPU-1f6b2c0e-58a1-4c3e-9d1a-000000000002', 'GPU-ffffffff-0000-0000-0000-000000000000')
      .replace(/<clocks_event_reason_hw_slowdown>Not Active/, '<clocks_event_reason_hw_slowdown>Active'),
  );
  const err = await run('node', ['bench/gpu/compare.js', work], { cwd: root }).then(
    () => null,
    (e: { code: number; stdout: string }) => e,
  );
  assert.ok(err, 'compare.js exits non-zero');
  assert.equal(err.code, 1);
  assert.match(err.stdout, /^FAIL {2}gpu 0000:28:00 inventory/m);
  assert.match(err.stdout, /^FAIL {2}gpu 0000:18:00 clock-event HW reasons +vigil=0x0 nvidia-smi=0x8/m);
});
