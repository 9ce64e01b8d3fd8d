/**
 * A blind source is retried with backoff (sourceRetry) and its condition leaves Unknown on its own
 * once it can see: a kernel log that appears, a kernel log the agent is then allowed to read, and
 * an NVML library that appears or a driver that starts initialising. Real agent processes, real
 * FIFOs and file modes, NVML through koffi into the compiled fake.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, closeSync, mkdirSync, mkdtempSync, openSync, rmSync, statSync, symlinkSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startAgent, uniquePci, type AgentProcess } from '../helpers/agent-process.ts';
import { Registry } from 'prom-client';
import { GpuMonitor } from '../../src/monitors/index.ts';
import { FakeNvmlEnv, RecordingSink } from './nvml-helpers.ts';

interface Condition {
  type: string;
  status: string;
  reason: string;
  message: string;
}

/** Retries every 100-400 ms, so a test sees several failed tries and the recovery within a second. */
const FAST_RETRY = 'sourceRetry: {initial: 100ms, max: 400ms}\n';
const HOST_CHECKS_OFF =
  'monitors:\n  kernel: {enabled: false}\n  networking: {enabled: false}\n  storage: {enabled: false}\n  runtime: {enabled: false}\n';

/** Agents of the running test: stopped before its directories are removed (they write state until they exit). */
const running = new Set<AgentProcess>();

async function stopAgents(): Promise<void> {
  for (const a of running) await a.stop();
  running.clear();
}

function tmp(t: { after: (fn: () => Promise<void>) => void }): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'vigil-recover-'));
  t.after(async () => {
    await stopAgents();
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

async function agent(
  t: { after: (fn: () => Promise<void>) => void },
  dir: string,
  yaml: string,
  env: NodeJS.ProcessEnv = {},
  opts: { uid?: number; gid?: number } = {},
): Promise<AgentProcess> {
  const config = path.join(dir, 'vigil.yaml');
  writeFileSync(config, yaml);
  const a = await startAgent(['--standalone', '--state-dir', dir, '--config', config], env, opts);
  running.add(a);
  t.after(stopAgents);
  return a;
}

async function condition(a: AgentProcess, type: string): Promise<Condition | undefined> {
  const c = (await a.get('/conditions')) as { conditions: Condition[] };
  return c.conditions.find((x) => x.type === type);
}

async function until<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One kmsg-format record into the FIFO the agent reads (facility 0, level 3). */
function writeRecord(fifo: string, seq: number, message: string): void {
  const fd = openSync(fifo, 'w');
  try {
    writeSync(fd, `3,${seq},1000,-;${message}\n`);
  } finally {
    closeSync(fd);
  }
}

test('a kernelLog.path that appears after start (a FIFO created later): KernelReady leaves Unknown without a restart, the recovery is logged once, and its records are classified', async (t) => {
  const dir = tmp(t);
  const fifo = path.join(dir, 'kmsg-later');
  const a = await agent(t, dir, `${HOST_CHECKS_OFF}${FAST_RETRY}kernelLog: {path: ${fifo}, lookback: 0s}\n`);
  const blind = await condition(a, 'KernelReady');
  assert.equal(blind?.status, 'Unknown');
  assert.equal(blind?.reason, 'KernelLogUnavailable');
  assert.match(blind?.message ?? '', /ENOENT/);
  // Several tries fail meanwhile (100-400 ms apart); the failure is still logged once.
  await sleep(1500);
  assert.equal((await a.fetch('/healthz')).status, 503);
  assert.equal(a.lines.filter((l) => l.event === 'health' && l.component === 'kernel-log' && l.state === 'failed').length, 1);

  execFileSync('mkfifo', [fifo]);
  const recovered = await a.waitFor((l) => l.event === 'source_recovered' && l.monitor === 'kernel-log', 5_000);
  assert.ok(Number(recovered.attempts) >= 2, `retried ${String(recovered.attempts)} times`);
  assert.ok(Number(recovered.blindForMs) >= 1500);
  const kr = await until('KernelReady True', async () => {
    const c = await condition(a, 'KernelReady');
    return c?.status === 'True' ? c : undefined;
  });
  assert.equal(kr.reason, 'KernelIsReady');
  const h = await a.fetch('/healthz');
  assert.equal(h.status, 200);
  assert.match(String(await a.get('/metrics')), /vigil_source_up\{monitor="kernel-log"\} 1/);
  assert.equal(a.lines.filter((l) => l.event === 'source_recovered').length, 1);

  // It really reads the path now: a fault written there is classified.
  const pci = uniquePci();
  writeRecord(fifo, 1, `NVRM: Xid (PCI:${pci}): 79, pid=1, name=probe, GPU has fallen off the bus.`);
  await a.waitFor((l) => l.reason === 'NvidiaXID79Error' && l.entity === `gpu:${pci}`, 5_000);
});

test('a kernel log the agent may not read (uid 65534, FIFO mode 0600): KernelReady Unknown naming EACCES; once granted (mode 0644) it leaves Unknown without a restart', async (t) => {
  const dir = tmp(t);
  chmodSync(dir, 0o777);
  // The agent runs as nobody: every directory above the checkout must let others through.
  for (let d = path.resolve(import.meta.dirname, '..', '..'); d !== path.dirname(d); d = path.dirname(d)) {
    const mode = statSync(d).mode & 0o777;
    assert.ok(mode & 0o001, `${d} has mode ${mode.toString(8)}: uid 65534 cannot reach the code (clone into a directory with mode 755)`);
  }
  const fifo = path.join(dir, 'kmsg-root-only');
  execFileSync('mkfifo', ['-m', '600', fifo]);
  const a = await agent(
    t,
    dir,
    `${HOST_CHECKS_OFF}${FAST_RETRY}kernelLog: {path: ${fifo}, lookback: 0s}\n`,
    {},
    { uid: 65534, gid: 65534 },
  );
  const blind = await condition(a, 'KernelReady');
  assert.equal(blind?.status, 'Unknown');
  assert.equal(blind?.reason, 'KernelLogUnavailable');
  assert.match(blind?.message ?? '', /EACCES/);
  await sleep(1000);
  assert.equal((await condition(a, 'KernelReady'))?.status, 'Unknown', 'still not allowed: still Unknown');

  chmodSync(fifo, 0o644);
  await a.waitFor((l) => l.event === 'source_recovered' && l.monitor === 'kernel-log', 5_000);
  await until('KernelReady True', async () => ((await condition(a, 'KernelReady'))?.status === 'True' ? true : undefined));
  assert.equal((await a.fetch('/healthz')).status, 200);
  const pci = uniquePci();
  writeRecord(fifo, 1, `NVRM: Xid (PCI:${pci}): 79, pid=1, name=probe, GPU has fallen off the bus.`);
  await a.waitFor((l) => l.reason === 'NvidiaXID79Error' && l.entity === `gpu:${pci}`, 5_000);
});

test('an NVML library that is not there at start and appears later: AcceleratedHardwareReady leaves Unknown within the retry backoff, long before the next 5-minute poll', async (t) => {
  const env = new FakeNvmlEnv(2);
  t.after(async () => {
    await stopAgents();
    env.cleanup();
  });
  const libDir = path.join(env.dir, 'driver-not-mounted-yet');
  const library = path.join(libDir, 'libnvidia-ml.so.1');
  const stateDir = path.join(env.dir, 'state');
  mkdirSync(stateDir);
  const a = await agent(
    t,
    stateDir,
    // gpu.pollInterval stays at its default (5m): only the blind retry can bring NVML back here.
    `${HOST_CHECKS_OFF}  hostRoot: ${env.dir}\n${FAST_RETRY}kernelLog: {enabled: false}\ngpu: {libraryPath: ${library}, watchdog: 2s}\n`,
    { FAKE_NVML_CONFIG: env.configPath },
  );
  const blind = await until('AcceleratedHardwareReady Unknown', async () => {
    const c = await condition(a, 'AcceleratedHardwareReady');
    return c?.status === 'Unknown' ? c : undefined;
  });
  assert.equal(blind.reason, 'NvidiaMonitoringUnavailable');
  assert.match(blind.message, /NVML cannot be loaded/);
  assert.equal((await a.fetch('/healthz')).status, 503);
  await sleep(1000);
  assert.equal(a.lines.filter((l) => l.event === 'health' && l.component === 'gpu' && l.state === 'failed').length, 1, 'logged once');

  mkdirSync(libDir);
  symlinkSync(env.libraryPath, library);
  const recovered = await a.waitFor((l) => l.event === 'source_recovered' && l.monitor === 'gpu', 5_000);
  assert.ok(Number(recovered.attempts) >= 2, `retried ${String(recovered.attempts)} times`);
  const c = await until('AcceleratedHardwareReady True', async () => {
    const x = await condition(a, 'AcceleratedHardwareReady');
    return x?.status === 'True' ? x : undefined;
  });
  assert.equal(c.status, 'True');
  assert.equal((await a.fetch('/healthz')).status, 200);
});

test('NVML init failing (driver not loaded) is retried on its own with backoff: once the driver initialises, the source reports up without a poll from the scheduler', async () => {
  const env = new FakeNvmlEnv(2);
  try {
    env.cfg.rc = { nvmlInit_v2: 9 }; // NVML_ERROR_DRIVER_NOT_LOADED
    env.write();
    // ownTimer false: nothing but the blind retry polls.
    const logs: { obj: Record<string, unknown>; msg: string }[] = [];
    const monitor = new GpuMonitor({
      config: { libraryPath: env.libraryPath, watchdog: 2_000, events: false },
      registry: new Registry(),
      sysRoot: env.sysRoot,
      ownTimer: false,
      log: (obj, msg) => logs.push({ obj, msg }),
      retry: { initialMs: 50, maxMs: 200 },
    });
    const sink = new RecordingSink();
    try {
      await monitor.start(sink);
      assert.deepEqual(
        sink.sources.map((s) => s.up),
        [false],
      );
      await sleep(800);
      assert.equal(sink.sources.length, 1, 'the same failure retried says nothing new');
      delete env.cfg.rc;
      env.write();
      await until('the source up', () => Promise.resolve(sink.sources.at(-1)?.up ? true : undefined), 3_000);
      assert.deepEqual(
        sink.sources.map((s) => s.up),
        [false, true],
      );
      assert.equal(monitor.inventory().length, 2);
      const line = logs.find((l) => l.obj.event === 'source_recovered');
      assert.ok(line, 'the recovery is logged');
      assert.ok(Number(line.obj.attempts) >= 2);
    } finally {
      await monitor.stop();
    }
  } finally {
    env.cleanup();
  }
});
