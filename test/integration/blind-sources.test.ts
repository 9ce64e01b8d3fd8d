/**
 * An agent that cannot see says so: a kernel log it cannot read (a bad path, or EPERM when not
 * root) makes KernelReady Unknown with KernelLogUnavailable, fails /healthz and is logged once; a
 * GPU monitor that is off claims nothing in vigil_source_up; records lost to a ring overrun are
 * logged with their count and shown as degraded on /healthz.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, closeSync, constants, openSync, readSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { startAgent, writeKmsg, type AgentProcess } from '../helpers/agent-process.ts';
import { tempDir } from '../helpers/temp-dir.ts';

interface Healthz {
  status: string;
  components: Record<string, { state: string; message: string }>;
}
interface Conditions {
  conditions: { type: string; status: string; reason: string; message: string }[];
}

function tmp(t: { after: (fn: () => void) => void }): string {
  const dir = tempDir('vigil-blind-');
  // The agent may still be writing its state as the test ends: retry rather than fail on ENOTEMPTY.
  t.after(() => rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 }));
  return dir;
}

/**
 * Host checks off: only the kernel log (and the GPU monitor, off without a GPU) run. No lookback:
 * faults other tests wrote to the shared ring must not decide KernelReady here.
 */
function config(dir: string, extra = 'kernelLog: {lookback: 0s}\n'): string {
  const file = path.join(dir, 'vigil.yaml');
  writeFileSync(
    file,
    `monitors:\n  kernel: {enabled: false}\n  networking: {enabled: false}\n  storage: {enabled: false}\n  runtime: {enabled: false}\n${extra}`,
  );
  return file;
}

async function agent(t: { after: (fn: () => Promise<void>) => void }, args: string[], opts = {}): Promise<AgentProcess> {
  const a = await startAgent(['--standalone', ...args], {}, opts);
  t.after(async () => void (await a.stop()));
  return a;
}

async function kernelReady(a: AgentProcess) {
  const c = (await a.get('/conditions')) as Conditions;
  return c.conditions.find((x) => x.type === 'KernelReady');
}

test('a kernelLog.path that does not exist: KernelReady Unknown (KernelLogUnavailable), /healthz 503, logged once', async (t) => {
  const dir = tmp(t);
  const missing = path.join(dir, 'no-such-kmsg');
  const a = await agent(t, ['--state-dir', dir, '--config', config(dir, `kernelLog: {path: ${missing}}\n`)]);
  const kr = await kernelReady(a);
  assert.equal(kr?.status, 'Unknown');
  assert.equal(kr?.reason, 'KernelLogUnavailable');
  assert.match(kr?.message ?? '', /no-such-kmsg/);
  assert.match(kr?.message ?? '', /ENOENT/);
  for (let i = 0; i < 3; i++) {
    const h = await a.fetch('/healthz');
    assert.equal(h.status, 503);
    const body = h.body as Healthz;
    assert.equal(body.status, 'failed');
    assert.equal(body.components['kernel-log']?.state, 'failed');
    assert.match(body.components['kernel-log']?.message ?? '', /no-such-kmsg/);
  }
  const logged = a.lines.filter((l) => l.event === 'health' && l.component === 'kernel-log' && l.state === 'failed');
  assert.equal(logged.length, 1, 'the failure is logged once, not on every /healthz');
  assert.equal((await a.fetch('/livez')).status, 200, 'liveness stays up: restarting a blind agent does not help it see');
  const metrics = String(await a.get('/metrics'));
  assert.match(metrics, /vigil_source_up\{monitor="kernel-log"\} 0/);
  assert.match(metrics, /vigil_condition_status\{condition="KernelReady"\} -1/);
});

test('not root (EPERM on /dev/kmsg): KernelReady Unknown naming EPERM, /healthz 503', async (t) => {
  const dir = tmp(t);
  chmodSync(dir, 0o777);
  // The agent runs as nobody: every directory above the checkout must let others through.
  for (let d = path.resolve(import.meta.dirname, '..', '..'); d !== path.dirname(d); d = path.dirname(d)) {
    const mode = statSync(d).mode & 0o777;
    assert.ok(mode & 0o001, `${d} has mode ${mode.toString(8)}: uid 65534 cannot reach the code (clone into a directory with mode 755)`);
  }
  const a = await agent(t, ['--state-dir', dir, '--config', config(dir)], { uid: 65534, gid: 65534 });
  const kr = await kernelReady(a);
  assert.equal(kr?.status, 'Unknown');
  assert.equal(kr?.reason, 'KernelLogUnavailable');
  assert.match(kr?.message ?? '', /EPERM/);
  const h = await a.fetch('/healthz');
  assert.equal(h.status, 503);
  assert.match((h.body as Healthz).components['kernel-log']?.message ?? '', /EPERM/);
});

test('a readable kernel log: KernelReady True, /healthz 200 ok, and the GPU monitor that is off claims no source', async (t) => {
  const dir = tmp(t);
  const a = await agent(t, ['--state-dir', dir, '--config', config(dir)]);
  const kr = await kernelReady(a);
  assert.equal(kr?.status, 'True');
  const h = await a.fetch('/healthz');
  assert.equal(h.status, 200);
  const body = h.body as Healthz;
  assert.equal(body.status, 'ok');
  assert.equal(body.components['kernel-log']?.state, 'ok');
  assert.equal(body.components.gpu?.state, 'off', 'no NVIDIA GPU on this machine');
  const metrics = String(await a.get('/metrics'));
  assert.match(metrics, /vigil_source_up\{monitor="kernel-log"\} 1/);
  assert.doesNotMatch(metrics, /vigil_source_up\{monitor="gpu"\}/, 'a monitor that is off must not read as up');
});

/** The sequence number of the oldest record still in the kernel ring. */
function oldestSeq(): number {
  const fd = openSync('/dev/kmsg', 'r');
  try {
    const buf = Buffer.alloc(8192);
    for (;;) {
      try {
        const n = readSync(fd, buf, 0, buf.length, null);
        return Number(buf.subarray(0, n).toString().split(',')[1]);
      } catch (err) {
        // EPIPE: the record at the cursor was overwritten while opening; read the next one.
        if ((err as NodeJS.ErrnoException).code !== 'EPIPE') throw err;
      }
    }
  } finally {
    closeSync(fd);
  }
}

/** The sequence number of a marker record just written (the newest record carrying it). */
function seqOf(token: string): number {
  const fd = openSync('/dev/kmsg', constants.O_RDONLY | constants.O_NONBLOCK);
  let seq = -1;
  try {
    const buf = Buffer.alloc(8192);
    for (;;) {
      let n: number;
      try {
        n = readSync(fd, buf, 0, buf.length, null);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'EPIPE') continue;
        if (code === 'EAGAIN') break;
        throw err;
      }
      const rec = buf.subarray(0, n).toString();
      if (rec.includes(token)) seq = Number(rec.split(',')[1]);
    }
  } finally {
    closeSync(fd);
  }
  return seq;
}

test('records lost to a ring overrun are logged once with the count and shown degraded on /healthz', async (t) => {
  const dir = tmp(t);
  const a = await agent(t, ['--state-dir', dir, '--config', config(dir)]);
  assert.equal((await a.fetch('/healthz')).status, 200);
  // Stop the agent and write records until the first one written while it slept is gone from the ring.
  const token = randomUUID();
  a.child.kill('SIGSTOP');
  try {
    writeKmsg(`vigil-test overrun marker ${token}`, 6);
    const first = seqOfNonBlocking(token);
    const fd = openSync('/dev/kmsg', 'w');
    try {
      const filler = 'x'.repeat(900);
      for (let i = 0; oldestSeq() <= first; i++) {
        for (let j = 0; j < 200; j++) writeSync(fd, `<7>vigil-test overrun filler ${token} ${i}.${j} ${filler}\n`);
      }
    } finally {
      closeSync(fd);
    }
  } finally {
    a.child.kill('SIGCONT');
  }
  const line = await a.waitFor((l) => l.event === 'kmsg_lost', 20_000);
  assert.ok(Number(line.lost) > 0);
  assert.ok(Number(line.total) >= Number(line.lost));
  const h = await a.fetch('/healthz');
  assert.equal(h.status, 200, 'lost records degrade /healthz; they do not fail it');
  const body = h.body as Healthz;
  assert.equal(body.status, 'degraded');
  assert.equal(body.components['kernel-log']?.state, 'degraded');
  assert.match(body.components['kernel-log']?.message ?? '', /\d+ records lost to kernel ring overruns/);
  // One line per loss the reader met (a long flood can be met more than once), each with its count.
  const losses = a.lines.filter((l) => l.event === 'kmsg_lost');
  const sum = losses.reduce((n, l) => n + Number(l.lost), 0);
  assert.equal(sum, Number(losses.at(-1)?.total), 'the counts logged add up to the total: no loss unlogged');
});

function seqOfNonBlocking(token: string): number {
  const seq = seqOf(token);
  assert.ok(seq >= 0, 'marker record found in the ring');
  return seq;
}
