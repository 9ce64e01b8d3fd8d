/**
 * State that survives, or says why not, with the real agent process and the real /dev/kmsg: a
 * failed state write is shown on /healthz and in metrics and retried until it succeeds; a second
 * agent on the same state directory is refused and leaves the first one's state alone; state lost
 * on the same boot brings back an untilReboot fault older than the lookback.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startAgent, uniquePci, writeKmsg, type AgentProcess } from '../helpers/agent-process.ts';
import { StateStore } from '../../src/state/index.ts';
import { tempDir } from '../helpers/temp-dir.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

interface Healthz {
  status: string;
  components: Record<string, { state: string; message: string }>;
}
interface Conditions {
  conditions: { type: string; status: string; active: { reason: string; entity: string }[] }[];
}

function tmp(t: { after: (fn: () => void) => void }): string {
  const dir = tempDir('vigil-state-');
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Only the kernel log runs (host checks off); `extra` is more YAML (the lookback, the engine tick). */
function config(dir: string, extra: string): string {
  const file = path.join(dir, 'vigil.yaml');
  writeFileSync(
    file,
    `monitors:\n  kernel: {enabled: false}\n  networking: {enabled: false}\n  storage: {enabled: false}\n  runtime: {enabled: false}\n${extra}`,
  );
  return file;
}

async function agent(t: { after: (fn: () => Promise<void>) => void }, args: string[]): Promise<AgentProcess> {
  const a = await startAgent(['--standalone', ...args]);
  t.after(async () => void (await a.stop()));
  return a;
}

async function until<T>(probe: () => T | undefined | Promise<T | undefined>, what: string, timeoutMs = 30_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const xid79 = (pci: string) => `NVRM: Xid (PCI:${pci}): 79, pid=4321, name=python3, GPU has fallen off the bus.`;

async function healthz(a: AgentProcess): Promise<{ status: number; body: Healthz }> {
  const h = await a.fetch('/healthz');
  return { status: h.status, body: h.body as Healthz };
}

async function writeFailures(a: AgentProcess): Promise<number> {
  const m = /^vigil_state_write_failures_total (\d+)/m.exec(String(await a.get('/metrics')));
  return Number(m?.[1] ?? 0);
}

const vigilRun = [process.execPath, path.join(root, 'bin/vigil.js'), 'run', '--standalone'];

/** Runs `vigil run` (or `wrap` around it) to its end, for one that is expected not to start; with its output. */
function runToExit(args: string[], wrap: string[] = []): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const [cmd, ...rest] = [...wrap, ...vigilRun, ...args];
    const child = spawn(cmd, rest, {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`vigil run did not exit: ${output.slice(-2000)}`));
    }, 60_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

test('a failed state write fails /healthz, is counted and retried, and recovers once state.json can be written', async (t) => {
  const dir = tmp(t);
  const a = await agent(t, ['--state-dir', dir, '--config', config(dir, 'kernelLog: {lookback: "0"}\n')]);
  const file = path.join(dir, 'state.json');
  // state.json becomes a directory: the rename onto it fails (root ignores permissions, not this).
  await until(() => {
    rmSync(file, { force: true });
    try {
      mkdirSync(file);
      return true;
    } catch {
      return undefined; // a save landed in between; try again
    }
  }, 'state.json is a directory');
  const pci = uniquePci();
  writeKmsg(xid79(pci));
  await a.waitFor((l) => l.reason === 'NvidiaXID79Error' && l.entity === `gpu:${pci}`);

  const failed = await until(async () => {
    const h = await healthz(a);
    return h.body.components.state?.state === 'failed' ? h : undefined;
  }, '/healthz shows the state store failed');
  assert.equal(failed.status, 503);
  assert.equal(failed.body.status, 'failed');
  assert.match(failed.body.components.state.message, /cannot save .*state\.json: EISDIR.*next try in/);
  assert.ok((await writeFailures(a)) >= 1, 'vigil_state_write_failures_total counts the failure');
  await a.waitFor((l) => l.event === 'health' && l.component === 'state' && l.state === 'failed');

  rmSync(file, { recursive: true });
  const ok = await until(async () => {
    const h = await healthz(a);
    return h.body.components.state?.state === 'ok' ? h : undefined;
  }, 'the retry saves the state');
  assert.equal(ok.status, 200);
  assert.match(ok.body.components.state.message, /again after \d+ failed writes/);
  assert.ok(statSync(file).isFile());
  assert.ok(readFileSync(file, 'utf8').includes(`gpu:${pci}`), 'the state written after the recovery holds the finding');
  assert.ok(
    readdirSync(dir).every((f) => !f.endsWith('.tmp')),
    'no temp file is left behind',
  );
});

test('a second agent on a locked state directory is refused, names the directory and pid, and leaves the state alone', async (t) => {
  const dir = tmp(t);
  // No kernel log: after its first save (at the first engine tick) the first agent's state stays put,
  // so any change to state.json would be the second agent's.
  const cfg = config(dir, 'engine: {tick: 200ms}\nkernelLog: {enabled: false}\n');
  const first = await agent(t, ['--state-dir', dir, '--config', cfg]);
  const file = path.join(dir, 'state.json');
  await until(() => (existsSync(file) ? true : undefined), 'the first agent saved');
  await new Promise((r) => setTimeout(r, 500));
  const before = readFileSync(file, 'utf8');
  const mtime = statSync(file).mtimeMs;
  const files = readdirSync(dir).sort();

  const second = await runToExit(['--listen', '127.0.0.1:0', '--state-dir', dir, '--config', cfg]);
  assert.equal(second.code, 2, second.output);
  assert.ok(second.output.includes(`state directory ${dir} is in use by another Vigil agent`), second.output);
  assert.ok(second.output.includes(`pid ${first.child.pid}`), second.output);
  assert.equal(readFileSync(file, 'utf8'), before, "the first agent's state.json is unchanged");
  assert.equal(statSync(file).mtimeMs, mtime, 'and was not rewritten');
  assert.deepEqual(readdirSync(dir).sort(), files, 'the refused agent wrote nothing in the directory');

  // An agent that cannot listen (the first one's port) writes no state either.
  const other = tmp(t);
  const busy = await runToExit(['--listen', `127.0.0.1:${first.port}`, '--state-dir', other, '--config', cfg]);
  assert.equal(busy.code, 2, busy.output);
  assert.equal(existsSync(path.join(other, 'state.json')), false, 'a failed start does not save state on stop');

  const h = await first.fetch('/healthz');
  assert.equal(h.status, 200, 'the first agent runs on');
});

test('state lost on the same boot: the first read goes back to the start of the ring and an untilReboot fault older than the lookback is kept', async (t) => {
  const dir = tmp(t);
  const cfg = config(dir, 'kernelLog: {lookback: 2s}\n');
  const args = ['--state-dir', dir, '--config', cfg];
  const pci = uniquePci();
  const entity = `gpu:${pci}`;
  const hasFault = async (a: AgentProcess) => {
    const c = (await a.get('/conditions')) as Conditions;
    const accel = c.conditions.find((x) => x.type === 'AcceleratedHardwareReady');
    return accel?.status === 'False' && accel.active.some((p) => p.reason === 'NvidiaXID79Error' && p.entity === entity);
  };

  const first = await startAgent(['--standalone', ...args]);
  try {
    writeKmsg(xid79(pci));
    await first.waitFor((l) => l.reason === 'NvidiaXID79Error' && l.entity === entity);
    assert.ok(await hasFault(first));
  } finally {
    assert.equal(await first.stop(), 0);
  }
  // Older than the lookback: a first start in a fresh directory no longer sees it.
  await new Promise((r) => setTimeout(r, 4000));
  const freshDir = tmp(t);
  const fresh = await agent(t, ['--state-dir', freshDir, '--config', cfg]);
  assert.equal(await hasFault(fresh), false, 'the fault is older than the lookback');
  await fresh.stop();

  rmSync(path.join(dir, 'state.json'));
  const second = await agent(t, args);
  await second.waitFor((l) => l.event === 'state' && String(l.msg).includes('start of the ring'));
  await until(async () => ((await hasFault(second)) ? true : undefined), 'the old Xid 79 is found again');
});

test('an unreadable boot id stops the agent at start with a message naming /proc/sys/kernel/random/boot_id', async (t) => {
  // A private mount namespace hides the boot id behind an empty file for this agent only.
  const probe = spawnSync('unshare', ['-m', 'sh', '-c', 'mount --bind /dev/null /proc/sys/kernel/random/boot_id'], { stdio: 'ignore' });
  if (probe.status !== 0) return t.skip('needs unshare and mount (root with CAP_SYS_ADMIN)');
  const dir = tmp(t);
  const hide = 'mount --bind /dev/null /proc/sys/kernel/random/boot_id && exec "$@"';
  const run = await runToExit(['--listen', '127.0.0.1:0', '--state-dir', dir], ['unshare', '-m', 'sh', '-c', hide, 'sh']);
  assert.equal(run.code, 2, run.output);
  assert.match(run.output, /vigil cannot start: the boot id in \/proc\/sys\/kernel\/random\/boot_id is empty/);
  assert.equal(existsSync(path.join(dir, 'state.json')), false);
});

test('a full state disk at start: the agent runs and detects, /healthz is 503 and the failure counted, and the state is saved once there is room', async (t) => {
  const dir = tempDir('vigil-state-');
  const mnt = path.join(dir, 'disk');
  mkdirSync(mnt);
  const running: AgentProcess[] = [];
  // One hook, in this order: the agent holds files on the disk, the disk is in the directory.
  t.after(async () => {
    for (const r of running) await r.stop();
    spawnSync('umount', [mnt], { stdio: 'ignore' });
    rmSync(dir, { recursive: true, force: true });
  });
  if (spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', mnt], { stdio: 'ignore' }).status !== 0) {
    return t.skip('needs mount (root with CAP_SYS_ADMIN)');
  }
  // Filled to the last block: no file can take a byte (dd stops at ENOSPC, exit 1).
  spawnSync('dd', ['if=/dev/zero', `of=${path.join(mnt, 'fill')}`, 'bs=4k'], { stdio: 'ignore' });
  const stateDir = path.join(mnt, 'state');
  const a = await startAgent(['--standalone', '--state-dir', stateDir, '--config', config(dir, 'kernelLog: {lookback: "0"}\n')]);
  running.push(a);

  const failed = await until(async () => {
    const h = await healthz(a);
    return h.body.components.state?.state === 'failed' ? h : undefined;
  }, '/healthz shows the state store failed');
  assert.equal(failed.status, 503);
  assert.match(failed.body.components.state.message, /ENOSPC.*next try in/);
  assert.ok((await writeFailures(a)) >= 1, 'vigil_state_write_failures_total counts it');

  const pci = uniquePci();
  writeKmsg(xid79(pci));
  await until(async () => {
    const c = (await a.get('/conditions')) as Conditions;
    return c.conditions.some((x) => x.active.some((p) => p.entity === `gpu:${pci}`)) ? true : undefined;
  }, 'the fault is detected and served while the disk is full');

  rmSync(path.join(mnt, 'fill'));
  await until(async () => ((await healthz(a)).body.components.state?.state === 'ok' ? true : undefined), 'a retry saves the state');
  assert.ok(readFileSync(path.join(stateDir, 'state.json'), 'utf8').includes(`gpu:${pci}`), 'the fault is in the saved state');
  assert.ok(readFileSync(path.join(stateDir, 'vigil.lock'), 'utf8').includes(String(a.child.pid)), 'the lock names the agent');
});

test('a state directory deleted under a running agent and taken by another: the running agent writes nothing into it and says who holds it', async (t) => {
  const dir = tmp(t);
  const stateDir = path.join(dir, 'state');
  const a = await agent(t, ['--state-dir', stateDir, '--config', config(dir, 'engine: {tick: 200ms}\nkernelLog: {lookback: "0"}\n')]);
  await until(() => (existsSync(path.join(stateDir, 'state.json')) ? true : undefined), 'the agent saved');
  // The other agent's part is played by a StateStore in this process (the same lock code); it takes
  // the new directory at once, before the running agent's next write.
  rmSync(stateDir, { recursive: true });
  const other = new StateStore(stateDir, {
    bootId: 'other',
    checkMs: 0,
    collect: () => ({ version: 1, kmsgCursor: { bootId: 'other', seq: 1 } }),
  });
  let otherOpen = true;
  t.after(() => void (otherOpen && other.close()));
  other.load();
  assert.ok(other.flush());
  const others = readFileSync(other.file, 'utf8');

  // A change the running agent must save.
  const pci = uniquePci();
  writeKmsg(xid79(pci));
  await a.waitFor((l) => l.reason === 'NvidiaXID79Error' && l.entity === `gpu:${pci}`);
  const failed = await until(async () => {
    const h = await healthz(a);
    return h.body.components.state?.state === 'failed' ? h : undefined;
  }, '/healthz shows the state store cannot save');
  assert.equal(failed.status, 503);
  assert.match(failed.body.components.state.message, new RegExp(`in use by another Vigil agent \\(pid ${process.pid}`));
  await new Promise((r) => setTimeout(r, 500)); // engine ticks: more tries to save
  assert.equal(readFileSync(other.file, 'utf8'), others, "the other's state.json was never written by the running agent");

  other.close();
  otherOpen = false;
  await until(async () => ((await healthz(a)).body.components.state?.state === 'ok' ? true : undefined), 'the agent takes it back');
  assert.ok(readFileSync(path.join(stateDir, 'state.json'), 'utf8').includes(`gpu:${pci}`));
});
