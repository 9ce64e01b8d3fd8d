/**
 * Spawning a process, for the few answers no file gives (ethtool -S, systemctl show): a hard
 * timeout, bounded output, killed on abort. No shell.
 */
import { spawn } from 'node:child_process';
import { abortReason } from '../../util/errors.ts';

export interface ExecOptions {
  timeoutMs: number;
  /** stdout beyond this is dropped and the child killed. */
  maxBytes?: number;
  signal?: AbortSignal;
  env?: NodeJS.ProcessEnv;
}

export interface ExecResult {
  code: number | null;
  stdout: string;
  /** First 4 KiB of stderr, for messages. */
  stderr: string;
  truncated: boolean;
  timedOut: boolean;
}

export type ExecFn = (file: string, args: readonly string[], opts: ExecOptions) => Promise<ExecResult>;

const STDERR_MAX = 4096;

/** Rejects only when the program cannot be started (ENOENT, EACCES) or on abort. */
export const execBounded: ExecFn = (file, args, opts) =>
  new Promise((resolve, reject) => {
    const maxBytes = opts.maxBytes ?? 256 * 1024;
    if (opts.signal?.aborted) return reject(abortReason(opts.signal));
    // Own process group, so a kill also reaches grandchildren that would keep the pipes open.
    const child = spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'], env: opts.env ?? process.env, detached: true });
    const out: Buffer[] = [];
    let outLen = 0;
    let err = '';
    let truncated = false;
    let timedOut = false;
    let settled = false;
    let killed = false;
    const kill = () => {
      if (killed || child.pid === undefined) return;
      killed = true;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, opts.timeoutMs);
    const onAbort = () => {
      kill();
      finish(() => reject(abortReason(opts.signal!)));
    };
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    const finish = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      fn();
    };
    child.stdout.on('data', (chunk: Buffer) => {
      if (truncated) return;
      const room = maxBytes - outLen;
      if (chunk.length > room) {
        out.push(chunk.subarray(0, room));
        outLen = maxBytes;
        truncated = true;
        kill();
      } else {
        out.push(chunk);
        outLen += chunk.length;
      }
    });
    child.stderr.on('data', (chunk: Buffer) => {
      if (err.length < STDERR_MAX) err += chunk.toString('utf8', 0, STDERR_MAX - err.length);
    });
    child.on('error', (e) => finish(() => reject(e)));
    const done = (code: number | null) =>
      finish(() => resolve({ code, stdout: Buffer.concat(out, outLen).toString('utf8'), stderr: err, truncated, timedOut }));
    child.on('close', done);
    // After a kill, do not wait for pipes that something else may still hold.
    child.on('exit', (code) => {
      if (!killed) return;
      child.stdout.destroy();
      child.stderr.destroy();
      done(code);
    });
  });
