/**
 * `vigil diagnose`: writes a diagnostic bundle (.tar.gz with manifest.json) of this node, collected
 * in a low-priority child process. Progress on stderr, one line per collector; the bundle's path
 * and a summary on stdout (`--json`: the manifest). Exit 0 when the bundle is written (collectors
 * that failed are in the manifest), 1 when no bundle could be written (the --timeout reached
 * included: the command never runs past it), 2 on bad arguments or an --output it cannot write.
 */
import { closeSync, openSync, statSync, unlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { nodeNameProblem } from '../config/node-name.ts';
import { captureInChild, type CaptureOptions, type CollectorResult } from '../diagnostics/bundle.ts';
import { CAPTURE_DEFAULTS, parseCategories } from '../diagnostics/collect.ts';
import { parseDuration, timerLimitProblem } from '../util/duration.ts';
import { errorMessage, messageWithCode } from '../util/errors.ts';
import { makeDirs } from '../util/make-dirs.ts';

export interface DiagnoseOptions {
  categories?: string;
  output?: string;
  config?: string;
  stateDir?: string;
  nodeName?: string;
  since?: string;
  timeout?: string;
  collectorTimeout?: string;
  maxSize?: string;
  collectorMaxSize?: string;
  includeFile?: string[];
  hostRoot?: string;
  json?: boolean;
  quiet?: boolean;
}

const SIZE = /^(\d+(?:\.\d+)?)\s*(k|ki|kib|m|mi|mib|g|gi|gib|b)?$/i;
const SIZE_UNIT: Record<string, number> = { b: 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 };

/** Bytes from `65536`, `512K`, `64MiB`, `1G` (binary units); undefined when not a size. */
export function parseSize(text: string): number | undefined {
  const m = SIZE.exec(text.trim());
  if (!m) return undefined;
  const n = Math.floor(Number(m[1]) * SIZE_UNIT[(m[2] ?? 'b')[0].toLowerCase()]);
  return n > 0 ? n : undefined;
}

function defaultOutput(node: string): string {
  const stamp = new Date()
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
  return `vigil-diagnose-${node}-${stamp}.tar.gz`;
}

function progressLine(r: CollectorResult): string {
  const what = r.error ? `ERROR ${r.error}` : r.skipped ? `skipped: ${r.skipped}` : `${r.bytes} bytes${r.truncated ? ' (truncated)' : ''}`;
  return `  ${r.name.padEnd(28)} ${String(r.durationMs).padStart(6)} ms  ${what}\n`;
}

/** The options as CaptureOptions, or a message naming the bad one. */
export function captureOptions(opts: DiagnoseOptions): CaptureOptions | string {
  const out: Partial<CaptureOptions> = {};
  if (opts.categories !== undefined) {
    try {
      out.categories = parseCategories(
        opts.categories
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean),
      );
    } catch (err) {
      return `--categories: ${messageWithCode(err)}`;
    }
    if (!out.categories.length) return '--categories: name at least one category';
  }
  const durations = [
    ['--timeout', opts.timeout, 'timeoutMs'],
    ['--collector-timeout', opts.collectorTimeout, 'collectorTimeoutMs'],
  ] as const;
  for (const [flag, value, key] of durations) {
    if (value === undefined) continue;
    const ms = parseDuration(value);
    if (!ms) return `${flag}: expected a duration such as 30s or 5m, not ${JSON.stringify(value)}`;
    const tooLong = timerLimitProblem(ms);
    if (tooLong) return `${flag}: ${tooLong}`;
    out[key] = ms;
  }
  if (opts.since !== undefined && !parseDuration(opts.since))
    return `--since: expected a duration such as 30m or 2h, not ${JSON.stringify(opts.since)}`;
  const sizes = [
    ['--max-size', opts.maxSize, 'maxBytes'],
    ['--collector-max-size', opts.collectorMaxSize, 'collectorMaxBytes'],
  ] as const;
  for (const [flag, value, key] of sizes) {
    if (value === undefined) continue;
    const n = parseSize(value);
    if (!n) return `${flag}: expected a size such as 64M, 1G or 65536 (bytes), not ${JSON.stringify(value)}`;
    out[key] = n;
  }
  if (opts.hostRoot !== undefined && !opts.hostRoot.startsWith('/')) return '--host-root: expected an absolute path';
  const badName = opts.nodeName !== undefined ? nodeNameProblem(opts.nodeName) : undefined;
  if (badName) return `--node-name: ${badName}`;
  const node = opts.nodeName ?? process.env.NODE_NAME ?? os.hostname();
  return {
    ...out,
    output: opts.output ?? defaultOutput(node),
    // Without --node-name the configuration's nodeName wins over the host name (resolved in the child).
    ...(opts.nodeName ? { node: opts.nodeName } : {}),
    ...(opts.config ? { configPath: opts.config } : {}),
    ...(opts.stateDir ? { stateDir: opts.stateDir } : {}),
    ...(opts.since ? { since: opts.since } : {}),
    ...(opts.hostRoot ? { hostRoot: opts.hostRoot } : {}),
    ...(opts.includeFile?.length ? { includeFiles: opts.includeFile } : {}),
  };
}

/**
 * Why the bundle cannot be written to `output`, found before any collector runs: its directory is
 * created (see makeDirs: Node's own recursive mkdir spins on /proc/nope) and a file made in it.
 */
export function outputProblem(output: string): string | undefined {
  const dir = path.dirname(path.resolve(output));
  try {
    makeDirs(dir);
    if (statSync(output, { throwIfNoEntry: false })?.isDirectory()) return `${output} is a directory`;
    const probe = path.join(dir, `.vigil-diagnose-probe-${process.pid}`);
    closeSync(openSync(probe, 'wx'));
    unlinkSync(probe);
  } catch (err) {
    return `cannot write ${output}: ${errorMessage(err)}`;
  }
  return undefined;
}

export async function runDiagnoseCommand(opts: DiagnoseOptions): Promise<number> {
  const capture = captureOptions(opts);
  if (typeof capture === 'string') {
    process.stderr.write(`vigil diagnose: ${capture}\n`);
    return 2;
  }
  const badOutput = outputProblem(capture.output);
  if (badOutput) {
    process.stderr.write(`vigil diagnose: --output: ${badOutput}\n`);
    return 2;
  }
  // --timeout bounds the whole command, counted from its start: the capture child is killed then,
  // whatever it is doing (captureInChild), and plans its collectors to end before (runCapture).
  const timeoutMs = capture.timeoutMs ?? CAPTURE_DEFAULTS.timeoutMs;
  capture.deadline = performance.timeOrigin + timeoutMs;
  if (!opts.quiet) {
    process.stderr.write(
      `vigil diagnose: collecting ${capture.categories?.join(', ') ?? 'every category'} (at most ${
        timeoutMs / 1000
      } s, ${capture.maxBytes ?? CAPTURE_DEFAULTS.maxBytes} bytes)\n`,
    );
    capture.onCollector = (r) => void process.stderr.write(progressLine(r));
  }
  // Ctrl-C stops the child and its collectors instead of leaving them running.
  const ac = new AbortController();
  const stop = () => ac.abort(new Error('interrupted'));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    const result = await captureInChild(capture, ac.signal);
    const m = result.manifest;
    if (opts.json) process.stdout.write(`${JSON.stringify({ path: result.path, bytes: result.bytes, manifest: m }, null, 2)}\n`);
    else {
      const skipped = m.collectors.filter((c) => c.skipped !== undefined).length;
      process.stdout.write(
        `${result.path}: ${result.bytes} bytes (${m.totalBytes} collected from ${m.collectors.length - skipped - m.errors} collectors; ` +
          `${m.errors} failed, ${skipped} skipped${m.truncated ? ', size cap reached' : ''}${m.timedOut ? ', time bound reached' : ''})\n`,
      );
    }
    return 0;
  } catch (err) {
    process.stderr.write(`vigil diagnose: ${messageWithCode(err)}\n`);
    return 1;
  } finally {
    process.removeListener('SIGINT', stop);
    process.removeListener('SIGTERM', stop);
  }
}
