/**
 * Diagnostic bundles: the API the CLI (`vigil diagnose`), the NodeDiagnostic watcher and the
 * automatic capture share. A capture runs in a separate child process (collect-child.ts) started
 * under `chrt --idle 0` (SCHED_IDLE: a CPU only when nothing else wants one), `nice -n 19` and
 * `ionice -c3` (idle I/O class) where those programs exist, so the agent's detection path keeps
 * its latency (on a node whose CPUs are all busy, the capture may then reach its time bound: the
 * manifest says so); collect.ts is what the child runs. The bundle is a .tar.gz:
 * manifest.json first, then `<category>/<file>` per collector that wrote something.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const DIAGNOSTIC_CATEGORIES = ['kernel', 'gpu', 'vigil', 'network', 'storage', 'runtime', 'system'] as const;
export type DiagnosticCategory = (typeof DIAGNOSTIC_CATEGORIES)[number];

export interface CollectorResult {
  name: string;
  category: DiagnosticCategory;
  /** Path inside the bundle; absent when the collector wrote nothing. */
  file?: string;
  bytes: number;
  durationMs: number;
  truncated: boolean;
  error?: string;
  timedOut?: boolean;
  /** Nothing to collect here (a tool not installed, a file absent, a cap reached first): not an error. */
  skipped?: string;
  /** A fact about what was collected (records lost, NVML state, a fallback used). */
  note?: string;
  /** Secrets replaced in this collector's output. */
  redactions?: number;
}

/** How the capture process was de-prioritised. */
export interface PriorityInfo {
  /** The capture process's nice value as it read it (19 when lowered). */
  nice: number | null;
  /** 'idle' when started under `ionice -c3`; null when ionice is not installed. */
  ioClass: 'idle' | null;
  /** How: ['chrt --idle 0', 'nice -n 19', 'ionice -c3'], or ['setpriority(19)'] without the nice program. */
  via: string[];
}

export interface BundleManifest {
  version: 1;
  node?: string;
  startedAt: string;
  endedAt: string;
  categories: DiagnosticCategory[];
  collectors: CollectorResult[];
  /** Bytes of collected files (manifest.json not included), before compression. */
  totalBytes: number;
  truncated: boolean;
  /** Collectors that ended with an error (timeouts included). */
  errors: number;
  vigilVersion?: string;
  bootId?: string | null;
  /** The capture's time bound was reached: later collectors were skipped. */
  timedOut?: boolean;
  /** Secrets replaced in the whole bundle. */
  redactions?: number;
  limits?: { timeoutMs: number; collectorTimeoutMs: number; maxBytes: number; collectorMaxBytes: number; sinceMs: number };
  priority?: PriorityInfo;
}

export interface CaptureOptions {
  categories?: DiagnosticCategory[];
  /** The .tar.gz to write (its directory is created; written atomically). */
  output: string;
  node?: string;
  stateDir?: string;
  configPath?: string;
  kernelLogPath?: string;
  /** The whole capture (default 10 min). */
  timeoutMs?: number;
  /**
   * Epoch ms by which the capture must be over, packing included (`vigil diagnose`, whose
   * --timeout bounds the whole command): collectors end earlier, and captureInChild kills the
   * child at this instant and fails. Without it the child gets a grace period past timeoutMs.
   */
  deadline?: number;
  /** Each collector (default 30 s; nvidia-bug-report.sh gets 6 times this). */
  collectorTimeoutMs?: number;
  /** All collected files together (default 256 MiB). */
  maxBytes?: number;
  /** One collector's output (default 32 MiB). */
  collectorMaxBytes?: number;
  /** Journal span for the runtime journals, a duration such as 30m or 2h (default 2h). */
  since?: string;
  /** Where the host's / is mounted (default: the configuration's monitors.hostRoot). */
  hostRoot?: string;
  /** More configuration files (or directories) to include in the runtime category, redacted. */
  includeFiles?: string[];
  /**
   * Collector name -> argv replacing its commands, or a new command collector when the name is
   * new (`system/my-tool`). Merged over the VIGIL_DIAGNOSE_COMMANDS environment variable (JSON of
   * the same shape, which is how tests make a collector hang).
   */
  commands?: Record<string, string[]>;
  /** Called as each collector finishes (not sent to the child). */
  onCollector?: (r: CollectorResult) => void;
}

export interface CaptureResult {
  path: string;
  /** Size of the archive. */
  bytes: number;
  manifest: BundleManifest;
}

/** Lines the capture child writes on stdout. */
export const CHILD_RESULT = 'VIGIL_CAPTURE_RESULT ';
export const CHILD_COLLECTOR = 'VIGIL_CAPTURE_COLLECTOR ';
export const CHILD_ERROR = 'VIGIL_CAPTURE_ERROR ';
/** Tells the child how the parent lowered its priority (JSON PriorityInfo without `nice`). */
export const PRIORITY_ENV = 'VIGIL_CAPTURE_PRIORITY';

/** After the capture's own bound, the child gets this long to finish packing before SIGTERM. */
const HARD_LIMIT_GRACE_MS = 60_000;
/** Between SIGTERM and SIGKILL. */
const KILL_GRACE_MS = 5_000;
/** With a deadline: SIGTERM this long before it (the child kills its collectors' process groups), SIGKILL at it. */
const DEADLINE_TERM_MS = 250;
const DEFAULT_TIMEOUT_MS = 10 * 60_000;

function findProgram(name: string): string | undefined {
  const dirs = `${process.env.PATH ?? ''}:/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin`.split(':').filter(Boolean);
  for (const dir of dirs) {
    const p = path.join(dir, name);
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      /* next */
    }
  }
  return undefined;
}

/** node (with tsx when running from source) and the child entry next to this file. */
function childCommand(): string[] {
  const here = fileURLToPath(import.meta.url);
  const fromSource = here.endsWith('.ts');
  const entry = path.join(path.dirname(here), fromSource ? 'collect-child.ts' : 'collect-child.js');
  return fromSource ? [process.execPath, '--import', import.meta.resolve('tsx'), entry] : [process.execPath, entry];
}

/** Runs the capture in a separate child process at low CPU and I/O priority; resolves when the archive is written. */
export function captureInChild(opts: CaptureOptions, signal?: AbortSignal): Promise<CaptureResult> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason instanceof Error ? signal.reason : new Error('capture aborted'));
    const { onCollector, ...sendable } = opts;
    const prefix: string[] = [];
    const via: string[] = [];
    // SCHED_IDLE: the capture gets a CPU only when nothing else wants it (no privilege needed).
    const chrt = findProgram('chrt');
    if (chrt) {
      prefix.push(chrt, '--idle', '0');
      via.push('chrt --idle 0');
    }
    const nice = findProgram('nice');
    if (nice) {
      prefix.push(nice, '-n', '19');
      via.push('nice -n 19');
    }
    const ionice = findProgram('ionice');
    if (ionice) {
      // -t: run the capture anyway where the I/O class cannot be set.
      prefix.push(ionice, '-c3', '-t');
      via.push('ionice -c3');
    }
    const argv = [...prefix, ...childCommand(), JSON.stringify(sendable)];
    const child = spawn(argv[0], argv.slice(1), {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, [PRIORITY_ENV]: JSON.stringify({ ioClass: ionice ? 'idle' : null, via }) },
    });
    let result: CaptureResult | undefined;
    let childError: string | undefined;
    let stderr = '';
    let pending = '';
    let settled = false;
    let killTimer: NodeJS.Timeout | undefined;
    const stop = () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      killTimer ??= setTimeout(() => child.kill('SIGKILL'), KILL_GRACE_MS);
    };
    const overrun = () => {
      childError ??= `the capture child ran past its time bound and was stopped`;
      stop();
    };
    const hardLimit = opts.deadline
      ? setTimeout(overrun, opts.deadline - DEADLINE_TERM_MS - Date.now())
      : setTimeout(overrun, (opts.timeoutMs ?? DEFAULT_TIMEOUT_MS) + HARD_LIMIT_GRACE_MS);
    // At the deadline the child is killed and the capture fails then, without waiting for an exit
    // that may never come (a read blocked on a FIFO or a hung mount, in uninterruptible sleep).
    const deadlineTimer =
      opts.deadline === undefined
        ? undefined
        : setTimeout(() => {
            child.kill('SIGKILL');
            child.stdout.destroy();
            child.stderr.destroy();
            child.unref();
            finish(
              new Error(`the capture did not finish within its time bound (${opts.timeoutMs ?? DEFAULT_TIMEOUT_MS} ms) and was killed`),
            );
          }, opts.deadline - Date.now());
    const onAbort = () => stop();
    signal?.addEventListener('abort', onAbort, { once: true });
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      pending += chunk;
      let nl: number;
      while ((nl = pending.indexOf('\n')) >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        try {
          if (line.startsWith(CHILD_RESULT)) result = JSON.parse(line.slice(CHILD_RESULT.length)) as CaptureResult;
          else if (line.startsWith(CHILD_ERROR)) childError ??= (JSON.parse(line.slice(CHILD_ERROR.length)) as { error: string }).error;
          else if (line.startsWith(CHILD_COLLECTOR)) onCollector?.(JSON.parse(line.slice(CHILD_COLLECTOR.length)) as CollectorResult);
        } catch {
          /* a line that is not ours */
        }
      }
      // Guard against a child that prints without newlines.
      if (pending.length > 1024 * 1024) pending = '';
    });
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => {
      stderr = (stderr + chunk).slice(-8192);
    });
    const finish = (err: Error | undefined) => {
      if (settled) return;
      settled = true;
      clearTimeout(hardLimit);
      clearTimeout(deadlineTimer);
      clearTimeout(killTimer);
      signal?.removeEventListener('abort', onAbort);
      if (err) reject(err);
      else resolve(result!);
    };
    child.on('error', (err) => finish(new Error(`cannot start the capture child (${argv[0]}): ${err.message}`)));
    child.on('close', (code, sig) => {
      if (signal?.aborted) return finish(signal.reason instanceof Error ? signal.reason : new Error('capture aborted'));
      if (result && code === 0) return finish(undefined);
      const why = childError ?? (stderr.trim().split('\n').slice(-5).join('\n') || 'no output');
      finish(new Error(`diagnostic capture failed (child exited ${code ?? sig}): ${why}`));
    });
  });
}
