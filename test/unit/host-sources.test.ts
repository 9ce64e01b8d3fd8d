import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  execBounded,
  hostPath,
  listDir,
  readFileSmall,
  readLinkBase,
  readNumber,
  readSysFileAsync,
  statfs,
} from '../../src/sources/index.ts';
import { fx } from './host-helpers.ts';

test('hostPath joins under the root and cannot climb out of it', () => {
  assert.equal(hostPath('/', '/proc/loadavg'), '/proc/loadavg');
  assert.equal(hostPath('/host', '/proc/loadavg'), '/host/proc/loadavg');
  assert.equal(hostPath('/host', 'proc/../../etc/shadow'), '/host/etc/shadow');
});

test('readers: missing files are undefined; large files are read whole', (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'vigil-read-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const big = 'x'.repeat(300_000);
  writeFileSync(path.join(dir, 'big'), big);
  assert.equal(readFileSmall(path.join(dir, 'big')), big);
  assert.equal(readFileSmall(path.join(dir, 'nope')), undefined);
  assert.equal(readNumber(fx('healthy'), '/proc/sys/kernel/pid_max'), 4194304);
  assert.equal(readNumber(fx('healthy'), '/proc/sys/kernel/nope'), undefined);
  assert.deepEqual(listDir(fx('empty'), '/sys/class/net'), []);
  assert.equal(readLinkBase(fx('healthy'), '/sys/class/net/eth0/device/driver'), 'ena');
  assert.equal(readLinkBase(fx('healthy'), '/sys/class/net/lo/device/driver'), undefined);
});

test('readSysFileAsync honours abort', async () => {
  assert.equal((await readSysFileAsync(fx('healthy'), '/sys/kernel/warn_count'))?.trim(), '2');
  await assert.rejects(readSysFileAsync(fx('healthy'), '/sys/kernel/warn_count', AbortSignal.abort()));
});

test('execBounded: output bound, timeout, missing program, abort', async () => {
  const big = await execBounded('sh', ['-c', 'yes vigil'], { timeoutMs: 5000, maxBytes: 1000 });
  assert.equal(big.truncated, true);
  assert.equal(big.stdout.length, 1000);
  const slow = await execBounded('sleep', ['5'], { timeoutMs: 50 });
  assert.equal(slow.timedOut, true);
  const ok = await execBounded('sh', ['-c', 'echo out; echo err >&2; exit 3'], { timeoutMs: 5000 });
  assert.deepEqual([ok.code, ok.stdout, ok.stderr], [3, 'out\n', 'err\n']);
  await assert.rejects(execBounded('/nonexistent/vigil-tool', [], { timeoutMs: 1000 }), /ENOENT/);
  const ctl = new AbortController();
  const p = execBounded('sleep', ['5'], { timeoutMs: 5000, signal: ctl.signal });
  ctl.abort(new Error('cut off'));
  await assert.rejects(p, /cut off/);
});

test('statfs of / answers in time', async () => {
  const s = await statfs('/', 2000);
  assert.ok(s.blocks > 0 && s.bavail <= s.bfree);
});
