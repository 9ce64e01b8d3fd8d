/**
 * Runs the real `vigil` binary as a child process for end-to-end tests, collecting its JSON log
 * lines and finding the port it listens on.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { openSync, writeSync, closeSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface AgentProcess {
  child: ChildProcess;
  port: number;
  /** Every JSON log line so far. */
  lines: Record<string, unknown>[];
  get(pathname: string): Promise<unknown>;
  /** GET with the HTTP status, for /healthz. */
  fetch(pathname: string): Promise<{ status: number; body: unknown }>;
  waitFor(pred: (line: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>;
  stop(): Promise<number | null>;
}

export async function startAgent(
  args: string[],
  env: NodeJS.ProcessEnv = {},
  opts: { uid?: number; gid?: number } = {},
): Promise<AgentProcess> {
  const child = spawn(process.execPath, [path.join(root, 'bin/vigil.js'), 'run', '--listen', '127.0.0.1:0', ...args], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    ...opts,
  });
  const lines: Record<string, unknown>[] = [];
  const waiters: { pred: (l: Record<string, unknown>) => boolean; resolve: (l: Record<string, unknown>) => void }[] = [];
  let buf = '';
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  child.stdout.on('data', (d: Buffer) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const text = buf.slice(0, i);
      buf = buf.slice(i + 1);
      let line: Record<string, unknown>;
      try {
        line = JSON.parse(text) as Record<string, unknown>;
      } catch {
        continue;
      }
      lines.push(line);
      for (const w of [...waiters]) {
        if (w.pred(line)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(line);
        }
      }
    }
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const waitFor = (pred: (l: Record<string, unknown>) => boolean, timeoutMs = 15_000) => {
    const hit = lines.find(pred);
    if (hit) return Promise.resolve(hit);
    return new Promise<Record<string, unknown>>((resolve, reject) => {
      const t = setTimeout(
        () =>
          reject(
            new Error(`timed out waiting for a log line; stderr: ${stderr.slice(-2000)}; last lines: ${JSON.stringify(lines.slice(-5))}`),
          ),
        timeoutMs,
      );
      waiters.push({
        pred,
        resolve: (l) => {
          clearTimeout(t);
          resolve(l);
        },
      });
      void exited.then((code) => {
        clearTimeout(t);
        reject(new Error(`agent exited with ${code}: ${stderr.slice(-2000)}`));
      });
    });
  };
  const started = await waitFor((l) => l.event === 'started', 30_000);
  const port = Number(String(started.listen).split(':').pop());
  return {
    child,
    port,
    lines,
    waitFor,
    async get(pathname: string) {
      const res = await fetch(`http://127.0.0.1:${port}${pathname}`);
      const text = await res.text();
      return res.headers.get('content-type')?.includes('json') ? (JSON.parse(text) as unknown) : text;
    },
    async fetch(pathname: string) {
      const res = await fetch(`http://127.0.0.1:${port}${pathname}`);
      const text = await res.text();
      return { status: res.status, body: res.headers.get('content-type')?.includes('json') ? JSON.parse(text) : text };
    },
    async stop() {
      if (child.exitCode !== null) return child.exitCode;
      child.kill('SIGTERM');
      return exited;
    },
  };
}

/**
 * Appends one record to the real kernel log. Opens the device per write: user writes are
 * rate-limited per open file (10 per 5 s while printk_devkmsg is `ratelimit`).
 */
export function writeKmsg(message: string, level = 3): void {
  const fd = openSync('/dev/kmsg', 'w');
  try {
    writeSync(fd, `<${level}>${message}\n`);
  } finally {
    closeSync(fd);
  }
}

/** A random PCI address on a bus nothing else uses, so concurrent tests never see each other's faults. */
export function uniquePci(): string {
  const bus = (0x40 + Math.floor(Math.random() * 0xb0)).toString(16);
  const dom = (0x1000 + Math.floor(Math.random() * 0xe000)).toString(16);
  return `${dom}:${bus}:00`;
}

/**
 * YAML for an agent that watches only the kernel log (host checks and NVML off) and skips the
 * records already in the ring (lookback 0: those are other tests' faults). `extra` adds top-level
 * sections (`kubernetes:`, `xid:`), one YAML line per item.
 */
export function kernelLogOnlyConfig(extra: string[] = []): string {
  return ['kernelLog:', '  lookback: "0"', ...hostChecksOff(), 'gpu:', '  enabled: false', ...extra, ''].join('\n');
}

/** `vigil run` arguments for an agent reporting to a cluster as `node`. */
export function kubeAgentArgs(kubeconfig: string, node: string, stateDir: string, config: string): string[] {
  return ['--kubeconfig', kubeconfig, '--node-name', node, '--state-dir', stateDir, '--config', config];
}

/** YAML lines of a `monitors:` section with every host check off (and the fake host's root, when given). */
export function hostChecksOff(hostRoot?: string): string[] {
  return [
    'monitors:',
    ...(hostRoot ? [`  hostRoot: ${hostRoot}`] : []),
    '  kernel: {enabled: false}',
    '  networking: {enabled: false}',
    '  storage: {enabled: false}',
    '  runtime: {enabled: false}',
  ];
}

/**
 * Writes `<dir>/vigil.yaml` for an agent that watches the fake GPUs under `dir` (its host root):
 * `gpu` lines go under `gpu:` (libraryPath first), the host checks are off, and the kernel log is
 * off or, with `kernelLog`, read from now on only. Returns the file's path.
 */
export function writeGpuConfig(dir: string, libraryPath: string, gpu: string[], o: { kernelLog?: boolean } = {}): string {
  const file = path.join(dir, 'vigil.yaml');
  const kernelLog = o.kernelLog ? ['kernelLog:', '  lookback: "0"'] : ['kernelLog: {enabled: false}'];
  writeFileSync(
    file,
    [...kernelLog, 'gpu:', `  libraryPath: ${libraryPath}`, ...gpu.map((l) => `  ${l}`), ...hostChecksOff(dir), ''].join('\n'),
  );
  return file;
}
