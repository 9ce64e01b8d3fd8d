/**
 * Where an idle agent's memory goes, and what the optimizing compilers buy. `npm run bench -- memory`.
 *
 * Idle RSS (VmRSS of the agent process, every thread): the agent from dist/ (`vigil run
 * --standalone`, as operators start it), kernel-log lookback 0 (the ring holds other benches'
 * records: reading them at start is a burst, not idle), every other default; the highest of
 * samples every 2 s over BENCH_MEMORY_SECONDS (20) after BENCH_MEMORY_SETTLE_SECONDS (20). Run one
 * after the other, each a fresh process:
 *
 * - idle_rss_mib_gpu_off: the GPU monitor off.
 * - idle_rss_mib_gpu_double_events_off: on, against the NVML C double (native/fake-nvml) with 8
 *   GPUs in a host root whose sysfs shows them; NVML events off: NVML loaded and initialised in
 *   the poll worker (its thread), no event worker.
 * - idle_rss_mib_gpu_double: on with events (the default): the event worker, which waits in
 *   nvmlEventSetWait_v2, and the poll worker only during a poll (retired after 10 s idle, so not in
 *   the window; src/sources/nvml/client.ts). This is the figure operators see on a GPU node, less the
 *   real libnvidia-ml's own allocations (about 17 MiB at nvmlInit on an H200 node; the double
 *   allocates next to nothing).
 * - idle_rss_mib_gpu_double_kubernetes: that plus the Kubernetes sink (its client loaded, pointed
 *   at an API server that refuses connections, so it holds no watch data and keeps retrying).
 * - idle_rss_mib_gpu_double_after_burst: the default GPU agent 20 s after a 5,000-record burst,
 *   which starts the kernel-log read thread (it stays): the thread's isolate plus what the burst
 *   left in the heaps.
 * - idle_rss_mib_gpu_double_opt: the default GPU agent with the optimizing compilers on (`node
 *   --opt --sparkplug bin/vigil.js`; the agent turns them off unless a flag says otherwise).
 * - idle_rss_mib_gpu_double_sparkplug: the same with only the baseline compiler on (`--sparkplug`).
 *
 * The parts (each the difference of two of the above, so a few tenths of a MiB is noise):
 * rss_part_nvml_poll_worker_mib (events off: the one NVML worker thread with NVML loaded and initialised),
 * rss_part_nvml_event_worker_mib (events on rather than off: the event worker in place of the retired
 * poll worker, plus what the retired one left in the process's allocator),
 * rss_part_kubernetes_client_mib, rss_part_kmsg_read_thread_after_burst_mib, rss_part_optimizing_compilers_mib.
 *
 * Classification speed per compiler setting, the same run: bench/kmsg.ts (1,000,000 lines through
 * the built-in rules, one process each, pinned to one CPU with taskset when there is one):
 * kmsg_classify_records_per_s_interpreter (--no-opt --no-sparkplug, as the agent ships),
 * kmsg_classify_records_per_s_sparkplug (--no-opt), kmsg_classify_records_per_s_optimizing (V8's defaults).
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildFakeNvml, fakeGpus, writeFakeConfig } from '../native/fake-nvml/build.ts';
import { makeSysfs } from '../test/integration/nvml-helpers.ts';
import { rssMiB } from './idle.ts';
import { ringLock } from './ring-lock.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SETTLE_S = Number(process.env.BENCH_MEMORY_SETTLE_SECONDS ?? 20);
const WINDOW_S = Number(process.env.BENCH_MEMORY_SECONDS ?? 20);
const GPUS = 8;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Running {
  pid: number;
  stop(): Promise<void>;
}

/** `node <flags> bin/vigil.js run ...`; resolves once it logs that it started. */
async function startAgent(flags: string[], args: string[], env: NodeJS.ProcessEnv): Promise<Running> {
  const child = spawn(process.execPath, [...flags, path.join(ROOT, 'bin/vigil.js'), 'run', '--listen', '127.0.0.1:0', ...args], {
    cwd: ROOT,
    env: { ...process.env, VIGIL_FROM_SOURCE: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`agent did not start in 60 s: ${err.slice(-1000)} ${out.slice(-1000)}`)), 60_000);
    child.stdout.on('data', (d) => {
      out = (out + d).slice(-20_000);
      if (out.includes('"event":"started"')) {
        clearTimeout(t);
        resolve();
      }
    });
    void exited.then(() => {
      clearTimeout(t);
      reject(new Error(`agent exited: ${err.slice(-1000)}`));
    });
  });
  return {
    pid: child.pid!,
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

/** Highest VmRSS over the window, after the settle time. */
async function idleRss(pid: number): Promise<number> {
  await sleep(SETTLE_S * 1000);
  let max = rssMiB(pid);
  for (const end = Date.now() + WINDOW_S * 1000; Date.now() < end;) {
    await sleep(2000);
    max = Math.max(max, rssMiB(pid));
  }
  return max;
}

/** A host root that is the real host but for a sysfs PCI bus showing the double's 8 GPUs. */
function fakeGpuHost(dir: string): string {
  const host = path.join(dir, 'host');
  mkdirSync(host);
  for (const e of readdirSync('/')) if (e !== 'sys') symlinkSync(path.join('/', e), path.join(host, e));
  const sys = path.join(host, 'sys');
  mkdirSync(sys);
  for (const e of readdirSync('/sys')) if (e !== 'bus') symlinkSync(path.join('/sys', e), path.join(sys, e));
  mkdirSync(path.join(sys, 'bus'));
  for (const e of readdirSync('/sys/bus')) if (e !== 'pci') symlinkSync(path.join('/sys/bus', e), path.join(sys, 'bus', e));
  makeSysfs(sys, GPUS);
  return host;
}

/** One burst of `n` records (noise) to /dev/kmsg, as fast as one open file takes them, holding the ring lock. */
async function burst(n: number): Promise<void> {
  const lock = await ringLock();
  try {
    burstNow(n);
  } finally {
    await lock.release();
  }
}

function burstNow(n: number): void {
  const script = `const fs=require('node:fs');const fd=fs.openSync('/dev/kmsg','w');for(let i=0;i<${n};i++)fs.writeSync(fd,'<6>memory bench burst '+i+'\\n');`;
  const devkmsg = '/proc/sys/kernel/printk_devkmsg';
  const before = spawnSync('cat', [devkmsg], { encoding: 'utf8' }).stdout.trim();
  writeFileSync(devkmsg, 'on\n');
  try {
    spawnSync(process.execPath, ['-e', script], { stdio: 'inherit' });
  } finally {
    writeFileSync(devkmsg, `${before}\n`);
  }
}

/** bench/kmsg.ts in a child with these V8 flags, pinned to the last CPU. */
function classifyRate(flags: string[]): number {
  const cpu = os.availableParallelism() - 1;
  const cmd = [process.execPath, ...flags, '--import', 'tsx', path.join(ROOT, 'bench/kmsg.ts')];
  const r = spawnSync(cpu > 0 ? 'taskset' : cmd[0], cpu > 0 ? ['-c', String(cpu), ...cmd] : cmd.slice(1), { cwd: ROOT, encoding: 'utf8' });
  const m = /kmsg_classify_records_per_s: (\d+)/.exec(r.stdout);
  if (!m) throw new Error(`bench/kmsg.ts ${flags.join(' ')}: ${r.stderr.slice(-1000)}`);
  return Number(m[1]);
}

export async function benchMemory(): Promise<Record<string, number>> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-memory-'));
  const nvmlConfig = path.join(dir, 'nvml.json');
  writeFakeConfig(nvmlConfig, { driverVersion: '550.54.15', gpus: fakeGpus(GPUS), events: [] });
  const library = buildFakeNvml();
  const host = fakeGpuHost(dir);
  const kubeconfig = path.join(dir, 'kubeconfig');
  writeFileSync(
    kubeconfig,
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]',
      'users: [{name: u, user: {token: bench}}]',
      'contexts: [{name: x, context: {cluster: c, user: u}}]',
      'current-context: x',
      '',
    ].join('\n'),
  );
  const env = { FAKE_NVML_CONFIG: nvmlConfig };
  const config = (name: string, gpu: string[]) => {
    const file = path.join(dir, `${name}.yaml`);
    writeFileSync(file, ['kernelLog:', '  lookback: "0"', 'monitors:', `  hostRoot: ${host}`, 'gpu:', ...gpu, ''].join('\n'));
    return file;
  };
  const gpuOn = [`  libraryPath: ${library}`];
  const measure = async (name: string, flags: string[], args: string[], after?: (pid: number) => Promise<void>) => {
    const stateDir = mkdtempSync(path.join(dir, 'state-'));
    const agent = await startAgent(flags, ['--state-dir', stateDir, ...args], env);
    try {
      if (after) await after(agent.pid);
      const rss = await idleRss(agent.pid);
      process.stderr.write(`  ${name}: ${rss.toFixed(1)} MiB (load ${os.loadavg()[0].toFixed(2)})\n`);
      return rss;
    } finally {
      await agent.stop();
    }
  };
  try {
    const standalone = (cfg: string) => ['--standalone', '--config', cfg];
    const off = await measure('gpu off', [], standalone(config('off', ['  enabled: false'])));
    const noEvents = await measure('gpu double, events off', [], standalone(config('noevents', [...gpuOn, '  events: false'])));
    const gpu = await measure('gpu double', [], standalone(config('gpu', gpuOn)));
    const kube = await measure(
      'gpu double + kubernetes',
      [],
      ['--kubeconfig', kubeconfig, '--node-name', 'bench', '--config', config('kube', gpuOn)],
    );
    const afterBurst = await measure('gpu double after a burst', [], standalone(config('burst', gpuOn)), async () => {
      await sleep(2000);
      await burst(5000);
    });
    const opt = await measure('gpu double, optimizing compilers on', ['--opt', '--sparkplug'], standalone(config('opt', gpuOn)));
    const baseline = await measure('gpu double, Sparkplug on', ['--sparkplug'], standalone(config('sparkplug', gpuOn)));
    const interp = classifyRate(['--no-opt', '--no-sparkplug']);
    const sparkplug = classifyRate(['--no-opt']);
    const optimizing = classifyRate([]);
    return {
      idle_rss_mib_gpu_off: off,
      idle_rss_mib_gpu_double_events_off: noEvents,
      idle_rss_mib_gpu_double: gpu,
      idle_rss_mib_gpu_double_kubernetes: kube,
      idle_rss_mib_gpu_double_after_burst: afterBurst,
      idle_rss_mib_gpu_double_opt: opt,
      idle_rss_mib_gpu_double_sparkplug: baseline,
      rss_part_nvml_poll_worker_mib: noEvents - off,
      rss_part_nvml_event_worker_mib: gpu - noEvents,
      rss_part_kubernetes_client_mib: kube - gpu,
      rss_part_kmsg_read_thread_after_burst_mib: afterBurst - gpu,
      rss_part_optimizing_compilers_mib: opt - gpu,
      kmsg_classify_records_per_s_interpreter: interp,
      kmsg_classify_records_per_s_sparkplug: sparkplug,
      kmsg_classify_records_per_s_optimizing: optimizing,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
