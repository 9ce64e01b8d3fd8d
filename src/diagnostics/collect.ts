/**
 * The capture itself: runs the collectors of the requested categories one after another, each
 * under its own timeout and size cap, within the capture's time bound and total size cap; redacts
 * every text output; writes manifest.json; packs the lot into a .tar.gz with node-tar. A collector
 * that fails, hangs or finds nothing is recorded in the manifest and never fails the bundle.
 *
 * This runs in the capture child (collect-child.ts, started by captureInChild at low CPU and I/O
 * priority), never in the agent's process. One at a time on purpose: a capture is a background
 * job and should cost the node one core at most.
 *
 * Bundle layout: `manifest.json` first, then `<category>/<file>` for every collector that wrote
 * something (kernel/kmsg.log, gpu/nvml.json, vigil/state.json, network/routes.txt, ...).
 */
import { mkdir, mkdtemp, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { create as createTar } from 'tar';
import { loadConfig, parseConfig, type VigilConfig } from '../settings/index.ts';
import { execBounded, hostPath, readFileSmall } from '../sources/host/index.ts';
import { parseDuration } from '../util/duration.ts';
import { errorCode, errorMessage, VigilError } from '../util/errors.ts';
import { makeDirs } from '../util/make-dirs.ts';
import { VERSION } from '../util/version.ts';
import {
  DIAGNOSTIC_CATEGORIES,
  type BundleManifest,
  type CaptureOptions,
  type CaptureResult,
  type CollectorResult,
  type DiagnosticCategory,
  type PriorityInfo,
} from './bundle.ts';
import { commandCollector } from './collectors/common.ts';
import { gpuCollectors } from './collectors/gpu.ts';
import { kernelCollectors } from './collectors/kernel.ts';
import { networkCollectors } from './collectors/network.ts';
import { runtimeCollectors } from './collectors/runtime.ts';
import { storageCollectors } from './collectors/storage.ts';
import { systemCollectors } from './collectors/system.ts';
import { MissingToolError, type Collector, type CollectorContext, type CollectorOutput, type ResolvedCapture } from './collectors/types.ts';
import { vigilCollectors } from './collectors/vigil.ts';
import { redactText } from './redact.ts';

export const CAPTURE_DEFAULTS = {
  timeoutMs: 10 * 60_000,
  collectorTimeoutMs: 30_000,
  maxBytes: 256 * 1024 * 1024,
  collectorMaxBytes: 32 * 1024 * 1024,
  since: '2h',
} as const;

/**
 * JSON `{"<collector name>": ["program", "arg", ...]}`: replaces a collector's commands, or adds
 * a command collector when the name is new (`system/slow-tool`; the part before `/` must be a
 * category). For tests (a collector that hangs) and for a site's own tool; CaptureOptions.commands
 * takes precedence.
 */
export const COMMANDS_ENV = 'VIGIL_DIAGNOSE_COMMANDS';

/** Every collector, in bundle order. */
export function allCollectors(): Collector[] {
  return [
    ...kernelCollectors(),
    ...gpuCollectors(),
    ...vigilCollectors(),
    ...networkCollectors(),
    ...storageCollectors(),
    ...runtimeCollectors(),
    ...systemCollectors(),
  ];
}

/** Throws with the bad value named; the CLI turns that into exit 2. */
export function parseCategories(list: readonly string[]): DiagnosticCategory[] {
  const bad = list.filter((c) => !(DIAGNOSTIC_CATEGORIES as readonly string[]).includes(c));
  if (bad.length)
    throw new VigilError(
      'VIGIL_E_DIAGNOSTICS_REQUEST',
      `unknown categor${bad.length > 1 ? 'ies' : 'y'} ${bad.join(', ')}; known: ${DIAGNOSTIC_CATEGORIES.join(', ')}`,
    );
  return DIAGNOSTIC_CATEGORIES.filter((c) => list.includes(c));
}

function commandsFromEnv(): Record<string, string[]> {
  const text = process.env[COMMANDS_ENV];
  if (!text) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new VigilError('VIGIL_E_DIAGNOSTICS_REQUEST', `${COMMANDS_ENV}: not valid JSON: ${errorMessage(err)}`, { cause: err });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new VigilError('VIGIL_E_DIAGNOSTICS_REQUEST', `${COMMANDS_ENV}: expected an object of name -> argv`);
  const out: Record<string, string[]> = {};
  for (const [name, argv] of Object.entries(parsed)) {
    if (!Array.isArray(argv) || !argv.length || !argv.every((a) => typeof a === 'string'))
      throw new VigilError('VIGIL_E_DIAGNOSTICS_REQUEST', `${COMMANDS_ENV}: ${name}: expected a non-empty array of strings`);
    out[name] = argv;
  }
  return out;
}

/** Fills in the defaults: the agent's configuration (when it loads) gives the state dir, host root and kernel log path. */
export function resolveCapture(opts: CaptureOptions, scratchDir: string): ResolvedCapture {
  let config: VigilConfig;
  let configError: string | undefined;
  try {
    config = loadConfig(opts.configPath);
  } catch (err) {
    // A configuration the agent would refuse is still worth a bundle (redacted as it is).
    configError = errorMessage(err);
    config = parseConfig('{}', 'defaults');
  }
  const sinceMs = parseDuration(opts.since ?? CAPTURE_DEFAULTS.since);
  if (sinceMs === undefined)
    throw new VigilError('VIGIL_E_DIAGNOSTICS_REQUEST', `since: ${JSON.stringify(opts.since)} is not a duration (e.g. 30m, 2h)`);
  const commands = { ...commandsFromEnv(), ...opts.commands };
  for (const name of Object.keys(commands)) {
    const category = name.split('/')[0];
    if (!(DIAGNOSTIC_CATEGORIES as readonly string[]).includes(category))
      throw new VigilError(
        'VIGIL_E_DIAGNOSTICS_REQUEST',
        `command override ${name}: the name must start with a category (${DIAGNOSTIC_CATEGORIES.join(', ')})`,
      );
  }
  const hostRoot = opts.hostRoot ?? config.monitors.hostRoot;
  return {
    categories: opts.categories?.length ? parseCategories(opts.categories) : [...DIAGNOSTIC_CATEGORIES],
    node: opts.node ?? config.nodeName ?? process.env.NODE_NAME ?? os.hostname(),
    hostRoot,
    stateDir: opts.stateDir ?? config.stateDir,
    ...(opts.configPath ? { configPath: opts.configPath } : {}),
    config,
    ...(configError ? { configError } : {}),
    kernelLogPath: opts.kernelLogPath ?? config.kernelLog.path,
    sinceMs,
    collectorTimeoutMs: opts.collectorTimeoutMs ?? CAPTURE_DEFAULTS.collectorTimeoutMs,
    collectorMaxBytes: opts.collectorMaxBytes ?? CAPTURE_DEFAULTS.collectorMaxBytes,
    commands,
    includeFiles: opts.includeFiles ?? [],
    scratchDir,
  };
}

/** The collectors to run: the categories' own, with command overrides applied (new names added). */
export function plan(capture: ResolvedCapture): Collector[] {
  const all = allCollectors();
  const known = new Set(all.map((c) => c.name));
  const extra = Object.keys(capture.commands)
    .filter((n) => !known.has(n))
    .map((n) => commandCollector(n, n.split('/')[0] as DiagnosticCategory, `${n}.txt`, [capture.commands[n]]));
  return [...all, ...extra]
    .filter((c) => capture.categories.includes(c.category))
    .map((c) => {
      const argv = capture.commands[c.name];
      return argv && known.has(c.name) ? commandCollector(c.name, c.category, c.file, [argv], undefined, c.timeoutScale) : c;
    })
    .sort((a, b) => capture.categories.indexOf(a.category) - capture.categories.indexOf(b.category));
}

/** Programs live in sbin on most distributions; a container's PATH may not name it. */
const EXEC_ENV = {
  ...process.env,
  LC_ALL: 'C',
  PATH: `${process.env.PATH ?? '/usr/bin:/bin'}:/usr/local/sbin:/usr/sbin:/sbin`,
};

/** After a collector's timeout, how long its in-process work may take to notice before the runner moves on. */
const ABANDON_GRACE_MS = 1500;

function timeoutError(ms: number): Error {
  const e = new Error(`timed out after ${ms} ms`);
  e.name = 'TimeoutError';
  return e;
}

async function runOne(
  c: Collector,
  capture: ResolvedCapture,
  timeoutMs: number,
  maxBytes: number,
  outer: AbortSignal | undefined,
): Promise<CollectorOutput> {
  const ac = new AbortController();
  const started = Date.now();
  const onOuter = () => ac.abort(outer?.reason);
  outer?.addEventListener('abort', onOuter, { once: true });
  let timer: NodeJS.Timeout | undefined;
  // Commands end at timeoutMs on their own (execBounded kills the group and keeps the partial
  // output); this later abort is for in-process work that does not stop by itself (a hung NVML call).
  const abandoned = new Promise<never>((_, reject) => {
    timer = setTimeout(() => ac.abort(timeoutError(timeoutMs)), timeoutMs + ABANDON_GRACE_MS);
    ac.signal.addEventListener('abort', () => reject(ac.signal.reason instanceof Error ? ac.signal.reason : timeoutError(timeoutMs)), {
      once: true,
    });
  });
  abandoned.catch(() => {});
  const remainingMs = () => Math.max(0, started + timeoutMs - Date.now());
  const ctx: CollectorContext = {
    capture,
    signal: ac.signal,
    maxBytes,
    remainingMs,
    host: (p) => hostPath(capture.hostRoot, p),
    exec: async (argv, o) => {
      try {
        return await execBounded(argv[0], argv.slice(1), {
          timeoutMs: Math.max(1, remainingMs()),
          maxBytes: Math.max(1, Math.min(maxBytes, o?.maxBytes ?? maxBytes)),
          signal: ac.signal,
          env: EXEC_ENV,
        });
      } catch (err) {
        if (errorCode(err) === 'ENOENT') throw new MissingToolError(argv[0]);
        throw err;
      }
    },
  };
  try {
    return await Promise.race([c.run(ctx), abandoned]);
  } catch (err) {
    if (outer?.aborted) throw err;
    if (err instanceof Error && err.name === 'TimeoutError')
      return { timedOut: true, error: `${err.message}; abandoned (its work did not stop at the timeout)` };
    if (err instanceof MissingToolError) return { skipped: err.message };
    return { error: errorMessage(err) };
  } finally {
    clearTimeout(timer);
    outer?.removeEventListener('abort', onOuter);
    ac.abort(new Error('collector finished'));
  }
}

/** Cuts a buffer at `max` bytes. */
function capped(buf: Buffer, max: number): { buf: Buffer; truncated: boolean } {
  return buf.length > max ? { buf: buf.subarray(0, max), truncated: true } : { buf, truncated: false };
}

const STAGING_PREFIX = '.vigil-diagnose-';

/** Staging directories of captures killed before they could clean up (SIGKILL, a node reboot), older than any live capture. */
async function removeStaleStaging(dir: string, timeoutMs: number): Promise<void> {
  const cutoff = Date.now() - Math.max(timeoutMs * 2, 60 * 60_000);
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    if (!name.startsWith(STAGING_PREFIX)) continue;
    const p = path.join(dir, name);
    const st = await stat(p).catch(() => undefined);
    if (st?.isDirectory() && st.mtimeMs < cutoff) await rm(p, { recursive: true, force: true }).catch(() => {});
  }
}

export interface RunCaptureExtras {
  priority?: PriorityInfo;
  /** Progress, one line per collector (the CLI prints it on stderr). */
  onCollector?: (r: CollectorResult) => void;
  /** Run these instead of plan()'s (tests: in-process collectors that hang or throw). */
  collectors?: Collector[];
}

/** Runs the capture in this process; captureInChild is what callers use. Rejects only when the archive cannot be written or on abort. */
export async function runCapture(opts: CaptureOptions, signal?: AbortSignal, extras: RunCaptureExtras = {}): Promise<CaptureResult> {
  const startedAt = new Date();
  const timeoutMs = opts.timeoutMs ?? CAPTURE_DEFAULTS.timeoutMs;
  const maxBytes = opts.maxBytes ?? CAPTURE_DEFAULTS.maxBytes;
  const output = path.resolve(opts.output);
  // Not mkdir({ recursive: true }): it spins forever on a path such as /proc/nope/x.tar.gz.
  makeDirs(path.dirname(output));
  await removeStaleStaging(path.dirname(output), timeoutMs);
  const staging = await mkdtemp(path.join(path.dirname(output), STAGING_PREFIX));
  try {
    const bundleDir = path.join(staging, 'bundle');
    const scratch = path.join(staging, 'scratch');
    await mkdir(bundleDir);
    await mkdir(scratch);
    const capture = resolveCapture(opts, scratch);
    // Packing needs time too: collectors stop a little before the bound (or the caller's deadline,
    // which counts from an earlier start and after which the child is killed).
    const end = opts.deadline ?? startedAt.getTime() + timeoutMs;
    const deadline = end - Math.min(30_000, Math.max(1000, Math.floor(timeoutMs / 10)));
    const results: CollectorResult[] = [];
    const files: string[] = [];
    let used = 0;
    let truncatedAny = false;
    let timedOut = false;
    let redactions = 0;
    for (const c of extras.collectors ?? plan(capture)) {
      if (signal?.aborted) throw signal.reason instanceof Error ? signal.reason : new Error('capture aborted');
      const base = { name: c.name, category: c.category, bytes: 0, durationMs: 0, truncated: false };
      const left = deadline - Date.now();
      const budget = Math.min(capture.collectorMaxBytes, maxBytes - used);
      let result: CollectorResult;
      if (left <= 0) {
        timedOut = true;
        result = { ...base, timedOut: true, skipped: `the capture's time bound (${timeoutMs} ms) was reached first` };
      } else if (budget <= 0) {
        truncatedAny = true;
        result = { ...base, truncated: true, skipped: `the total size cap (${maxBytes} bytes) was reached first` };
      } else {
        const t0 = Date.now();
        const ms = Math.min(capture.collectorTimeoutMs * (c.timeoutScale ?? 1), left);
        const out = await runOne(c, capture, ms, budget, signal);
        result = { ...base, durationMs: Date.now() - t0 };
        if (out.data !== undefined && (out.data.length > 0 || out.error === undefined)) {
          let buf: Buffer;
          if (typeof out.data === 'string') {
            const r = redactText(out.data);
            if (r.count) result.redactions = r.count;
            redactions += r.count;
            buf = Buffer.from(r.text);
          } else buf = out.data;
          const cut = capped(buf, budget);
          const dest = path.join(bundleDir, c.file);
          await mkdir(path.dirname(dest), { recursive: true });
          await writeFile(dest, cut.buf);
          files.push(c.file);
          used += cut.buf.length;
          result.file = c.file;
          result.bytes = cut.buf.length;
          result.truncated = cut.truncated || Boolean(out.truncated);
        }
        if (out.timedOut) result.timedOut = true;
        if (out.error !== undefined) result.error = out.error;
        if (out.skipped !== undefined) result.skipped = out.skipped;
        if (out.note !== undefined) result.note = out.note;
        if (result.timedOut && result.error === undefined) result.error = `timed out after ${ms} ms`;
        truncatedAny ||= result.truncated;
      }
      results.push(result);
      extras.onCollector?.(result);
    }
    const manifest: BundleManifest = {
      version: 1,
      node: capture.node,
      startedAt: startedAt.toISOString(),
      endedAt: new Date().toISOString(),
      categories: capture.categories,
      collectors: results,
      totalBytes: used,
      truncated: truncatedAny,
      errors: results.filter((r) => r.error !== undefined).length,
      vigilVersion: VERSION,
      bootId: readFileSmall(hostPath(capture.hostRoot, '/proc/sys/kernel/random/boot_id'))?.trim() ?? null,
      timedOut,
      redactions,
      limits: {
        timeoutMs,
        collectorTimeoutMs: capture.collectorTimeoutMs,
        maxBytes,
        collectorMaxBytes: capture.collectorMaxBytes,
        sinceMs: capture.sinceMs,
      },
      ...(extras.priority ? { priority: extras.priority } : {}),
    };
    await writeFile(path.join(bundleDir, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    const partial = path.join(staging, 'bundle.tar.gz');
    await createTar({ gzip: { level: 6 }, file: partial, cwd: bundleDir, portable: true }, ['manifest.json', ...files]);
    await rename(partial, output);
    return { path: output, bytes: (await stat(output)).size, manifest };
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}
