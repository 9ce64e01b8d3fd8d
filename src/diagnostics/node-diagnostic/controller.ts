/**
 * Diagnostic captures beside the detection path: on request (a NodeDiagnostic resource named after
 * this node, watched by field selector so the agent sees no other node's) and, when configured, on
 * a Fatal finding. Captures run one at a time in a child process (captureInChild); handle() only
 * queues, so the engine's sinks never wait on a capture. Bundles are uploaded by HTTP PUT or kept
 * on the node and served by the agent's HTTP server through the API server's node proxy, only to
 * the holder of the request's token. A request's upload URL arrives sealed to a key made for that
 * request (access.ts); the NodeDiagnostic itself carries no secret and names no destination.
 */
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { EmittedFinding, EngineEvent, Sink } from '../../api/types.ts';
import type { VigilConfig } from '../../settings/index.ts';
import { Backoff } from '../../util/backoff.ts';
import * as k8s from '@kubernetes/client-node';
import { MERGE_PATCH, toFailure, withDeadline, type KubeClients } from '../../kube/client.ts';
import type { NodeEventRecorder } from '../../kube/client.ts';
import { writeAtomic } from '../../state/store.ts';
import { errorMessage, toError } from '../../util/errors.ts';
import { formatDuration } from '../../util/duration.ts';
import { DIAGNOSTIC_CATEGORIES, captureInChild, type CaptureOptions, type CaptureResult } from '../bundle.ts';
import {
  COLLECTION_PATH,
  GROUP,
  PLURAL,
  TERMINAL,
  VERSION,
  nodeProxyPath,
  parseSpec,
  redactUrl,
  summarize,
  type CaptureRequest,
  type NodeDiagnostic,
  type NodeDiagnosticStatus,
} from './resource.ts';
import { BundleStore, type KeptBundle } from './store.ts';
import { uploadFile, type UploadOptions } from './upload.ts';
import { newDestinationKey, openDestination, tokenMatches, type DestinationKey } from './access.ts';
import { checkDestination, DestinationRefused, type DestinationPolicy } from './destination.ts';
import { UserRegex } from '../../config/regex.ts';

/** Event reasons on the Node for automatic captures (not findings: they name what Vigil did). */
export const EVENT_REASONS = {
  started: 'DiagnosticCaptureStarted',
  uploaded: 'DiagnosticBundleUploaded',
  captureFailed: 'DiagnosticCaptureFailed',
  uploadFailed: 'DiagnosticUploadFailed',
} as const;

type Trigger = 'request' | 'fatal';

/** Default wait before looking again for a NodeDiagnostic CRD that was not installed. */
const CRD_RECHECK_MS = 10 * 60_000;
/** How long an upload request waits for its sealed destination. */
const DESTINATION_WAIT_MS = 5 * 60_000;

export interface DiagnosticsControllerOptions {
  nodeName: string;
  log: Logger;
  registry: Registry;
  stateDir: string;
  config: VigilConfig['diagnostics'];
  /** Passed to the capture (its vigil category reads them). */
  configPath?: string;
  kernelLogPath?: string;
  /** Absent when standalone: no NodeDiagnostic watch, no Events. */
  clients?: KubeClients;
  events?: NodeEventRecorder;
  capture?: (opts: CaptureOptions, signal?: AbortSignal) => Promise<CaptureResult>;
  upload?: Omit<UploadOptions, 'signal' | 'onRetry' | 'attempts' | 'policy'>;
  /** How long an upload request waits for `vigil logs` to send its sealed destination (default 5 min). */
  destinationWaitMs?: number;
  /** Backoff of the watch after a failure (default 1 s doubling to 60 s). */
  watchRetry?: { baseMs: number; maxMs: number };
  /** While the API server has no NodeDiagnostic resource (the CRD is not installed), how often to look again (default 10 min). */
  crdRecheckMs?: number;
  now?: () => number;
}

interface Job {
  trigger: Trigger;
  /** The NodeDiagnostic's uid (requests only). */
  uid?: string;
  request: CaptureRequest;
  /** What started it (automatic captures): reason and entity. */
  cause?: string;
}

/** An upload request waiting for its sealed destination. */
interface Awaiting {
  key: DestinationKey;
  request: CaptureRequest;
  timer: NodeJS.Timeout;
}

interface Metrics {
  captures: Counter<'trigger' | 'result'>;
  uploads: Counter<'trigger' | 'result'>;
  skipped: Counter<'why'>;
  watchFailures: Counter<'status'>;
  bytes: Gauge;
  seconds: Gauge;
  lastAuto: Gauge;
}

export class DiagnosticsController implements Sink {
  readonly name = 'diagnostics';
  readonly store: BundleStore;
  private readonly m: Metrics;
  private readonly now: () => number;
  private readonly capture: (opts: CaptureOptions, signal?: AbortSignal) => Promise<CaptureResult>;
  private readonly autoFile: string;
  private readonly autoMatch: UserRegex | undefined;
  private lastAutoAt: number | undefined;
  private autoQueued = false;
  private chain: Promise<void> = Promise.resolve();
  private readonly queuedUids = new Set<string>();
  private current: { job: Job; abort: AbortController } | undefined;
  private stopped = false;
  private watchAbort: AbortController | undefined;
  private wake: (() => void) | undefined;
  private listen: { address: string; port: number } | undefined;
  private readonly reported = new Set<string>();
  private readonly awaiting = new Map<string, Awaiting>();
  /** Kept bundle name to the hash of the token that may fetch it (in memory: lost on restart). */
  private readonly grants = new Map<string, string>();
  private readonly policy: DestinationPolicy;

  constructor(private readonly o: DiagnosticsControllerOptions) {
    this.now = o.now ?? Date.now;
    this.capture = o.capture ?? captureInChild;
    const keep = o.config.keep;
    this.store = new BundleStore(
      o.stateDir,
      { maxCount: keep.maxBundles, maxBytes: keep.maxBytes, retentionMs: keep.retention },
      o.registry,
      o.log,
    );
    const r = [o.registry];
    this.m = {
      captures: new Counter({
        name: 'vigil_diagnostics_captures_total',
        help: 'Diagnostic captures by trigger (request: a NodeDiagnostic; fatal: a Fatal finding) and result (ok, failed).',
        labelNames: ['trigger', 'result'],
        registers: r,
      }),
      uploads: new Counter({
        name: 'vigil_diagnostics_uploads_total',
        help: 'Diagnostic bundle uploads by trigger and result (ok; failed: the bundle is kept on the node).',
        labelNames: ['trigger', 'result'],
        registers: r,
      }),
      watchFailures: new Counter({
        name: 'vigil_diagnostics_watch_failures_total',
        help: 'Failed lists or watches of NodeDiagnostic resources, by HTTP status (0: unreachable).',
        labelNames: ['status'],
        registers: r,
      }),
      skipped: new Counter({
        name: 'vigil_diagnostics_auto_skipped_total',
        help: 'Fatal findings that did not start an automatic capture, by why (rate_limited, busy).',
        labelNames: ['why'],
        registers: r,
      }),
      bytes: new Gauge({ name: 'vigil_diagnostics_last_bundle_bytes', help: 'Size of the last diagnostic bundle.', registers: r }),
      seconds: new Gauge({
        name: 'vigil_diagnostics_last_capture_seconds',
        help: 'How long the last diagnostic capture took.',
        registers: r,
      }),
      lastAuto: new Gauge({
        name: 'vigil_diagnostics_last_auto_capture_timestamp_seconds',
        help: 'When the last automatic capture started (persisted: the rate limit survives restarts).',
        registers: r,
      }),
    };
    this.autoMatch = o.config.autoCapture.match ? UserRegex.compile(o.config.autoCapture.match) : undefined;
    this.autoFile = path.join(o.stateDir, 'diagnostics', 'auto-capture.json');
    this.policy = {
      allowedHosts: o.config.upload.allowedHosts,
      allowHttp: o.config.upload.allowHttp,
      ...(o.clients?.kc.getCurrentCluster()?.server ? { apiServer: o.clients.kc.getCurrentCluster()!.server } : {}),
    };
    this.lastAutoAt = this.readLastAuto();
    if (this.lastAutoAt !== undefined) this.m.lastAuto.set(this.lastAutoAt / 1000);
  }

  /** Starts the NodeDiagnostic watch (with Kubernetes) once the agent serves on `listen`. */
  start(listen: { address: string; port: number }): void {
    this.listen = listen;
    this.store.prune();
    if (this.o.clients && this.o.config.requests.enabled) void this.watchLoop(this.o.clients);
  }

  /**
   * A kept bundle by file name, for the HTTP route: only bundles this agent made, only to the token
   * of the NodeDiagnostic that produced (or was granted) it. 'forbidden' for any other token or name.
   */
  bundle(name: string, token: string): KeptBundle | 'forbidden' | undefined {
    const grant = this.grants.get(name);
    if (!grant || !tokenMatches(token, grant)) return 'forbidden';
    return this.store.get(name);
  }

  private grant(name: string, sha: string | undefined): void {
    if (!sha) return;
    for (const n of this.grants.keys()) if (!this.store.get(n)) this.grants.delete(n);
    this.grants.set(name, sha);
  }

  handle(event: EngineEvent): void {
    if (event.kind !== 'finding' || event.finding.severity !== 'Fatal' || !this.o.config.autoCapture.enabled || this.stopped) return;
    // Off the engine's call: reading the rate limit and queueing touch the disk.
    const f = event.finding;
    if (this.autoMatch && !this.autoMatch.test(f.reason)) return;
    setImmediate(() => this.auto(f));
  }

  async close(): Promise<void> {
    this.stopped = true;
    for (const a of this.awaiting.values()) clearTimeout(a.timer);
    this.awaiting.clear();
    this.watchAbort?.abort();
    this.wake?.();
    this.current?.abort.abort(new Error('the agent is stopping'));
    await Promise.race([this.chain, new Promise((r) => setTimeout(r, 5000).unref())]);
  }

  // ---- automatic capture on a Fatal finding ----

  private auto(f: EmittedFinding): void {
    if (this.stopped) return;
    const cfg = this.o.config.autoCapture;
    const now = this.now();
    const last = this.lastAutoAt;
    if (last !== undefined && now - last < cfg.minInterval && now >= last) {
      this.m.skipped.inc({ why: 'rate_limited' });
      this.o.log.info(
        { event: 'diagnostics', reason: f.reason, lastCapture: new Date(last).toISOString() },
        `no automatic capture for ${f.reason}: one ran ${formatDuration(now - last)} ago (at most one per ${formatDuration(cfg.minInterval)})`,
      );
      return;
    }
    if (this.autoQueued) {
      this.m.skipped.inc({ why: 'busy' });
      return;
    }
    // Recorded before the capture: an agent that crashes while capturing must not capture again on restart.
    this.lastAutoAt = now;
    this.m.lastAuto.set(now / 1000);
    try {
      mkdirSync(path.dirname(this.autoFile), { recursive: true, mode: 0o700 });
      writeAtomic(this.autoFile, JSON.stringify({ lastCaptureAt: new Date(now).toISOString(), reason: f.reason }) + '\n');
    } catch (err) {
      this.o.log.warn(
        { event: 'diagnostics' },
        `cannot persist the automatic capture time (the rate limit will not survive a restart): ${errorMessage(err)}`,
      );
    }
    const cause = `${f.reason}${f.entity ? ` (${f.entity})` : ''}`;
    const categories = cfg.categories.length ? [...cfg.categories] : [...DIAGNOSTIC_CATEGORIES];
    this.autoQueued = true;
    this.o.events?.record(EVENT_REASONS.started, `Fatal ${cause}: collecting a diagnostic bundle (${categories.join(', ')})`);
    this.o.log.info(
      { event: 'diagnostics', trigger: 'fatal', reason: f.reason },
      `Fatal ${cause}: starting an automatic diagnostic capture`,
    );
    this.enqueue({ trigger: 'fatal', cause, request: { categories, delivery: { kind: 'upload', url: cfg.uploadUrl ?? '' } } });
  }

  private readLastAuto(): number | undefined {
    try {
      const doc = JSON.parse(readFileSync(this.autoFile, 'utf8')) as { lastCaptureAt?: unknown };
      const t = typeof doc.lastCaptureAt === 'string' ? Date.parse(doc.lastCaptureAt) : NaN;
      return Number.isFinite(t) ? t : undefined;
    } catch {
      return undefined;
    }
  }

  // ---- the NodeDiagnostic watch ----

  private async watchLoop(clients: KubeClients): Promise<void> {
    const backoff = new Backoff(this.o.watchRetry?.baseMs ?? 1000, this.o.watchRetry?.maxMs ?? 60_000);
    const fieldSelector = `metadata.name=${this.o.nodeName}`;
    while (!this.stopped) {
      let missing = false;
      try {
        const list = (await withDeadline(30_000, 'LIST nodediagnostics', (opts) =>
          clients.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL, fieldSelector }, opts),
        )) as { metadata?: { resourceVersion?: string }; items?: NodeDiagnostic[] };
        const items = (list.items ?? []).filter((i) => i.metadata?.name === this.o.nodeName);
        if (this.reported.size) this.o.log.info({ event: 'diagnostics' }, 'watching NodeDiagnostic resources again');
        this.reported.clear();
        const uid = this.current?.job.uid;
        if (uid && !items.some((i) => i.metadata?.uid === uid)) this.cancel(uid);
        for (const item of items) await this.reconcile(item, true);
        const began = this.now();
        await this.watchOnce(clients, fieldSelector, list.metadata?.resourceVersion);
        if (this.now() - began > 10_000) backoff.reset();
      } catch (err) {
        const f = toFailure(err);
        const key = `${f.status}`;
        this.m.watchFailures.inc({ status: key });
        // No such resource: the CRD is not installed, which a quick retry will not change.
        missing = f.status === 404;
        if (!this.reported.has(key)) {
          this.reported.add(key);
          const hint =
            f.status === 404
              ? ` (is the NodeDiagnostic CRD installed? deploy/crds/nodediagnostic.yaml; looking again every ${Math.round((this.o.crdRecheckMs ?? CRD_RECHECK_MS) / 1000)} s)`
              : f.status === 403
                ? ' (RBAC: the agent needs get, list and watch on nodediagnostics.vigil.dev)'
                : '';
          this.o.log.warn(
            { event: 'diagnostics', status: f.status },
            `cannot watch NodeDiagnostic resources: ${f.message}${hint}; retrying`,
          );
        }
      }
      if (this.stopped) break;
      await new Promise<void>((resolve) => {
        const delay = backoff.next();
        const t = setTimeout(resolve, missing ? Math.max(delay, this.o.crdRecheckMs ?? CRD_RECHECK_MS) : delay);
        t.unref();
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
    }
  }

  private watchOnce(clients: KubeClients, fieldSelector: string, resourceVersion: string | undefined): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let settled = false;
      const end = (err?: unknown) => {
        if (settled) return;
        settled = true;
        // A watch that ends cleanly (server timeout) or with 410 Gone is simply listed again.
        if (err && !(err instanceof Error && /aborted/i.test(err.message)) && toFailure(err).status !== 410) reject(toError(err));
        else resolve();
      };
      new k8s.Watch(clients.kc)
        .watch(
          COLLECTION_PATH,
          { fieldSelector, allowWatchBookmarks: true, ...(resourceVersion ? { resourceVersion } : {}) },
          (type: string, obj: NodeDiagnostic & { code?: number; message?: string }) => {
            if (type === 'ERROR') return end(obj.code === 410 ? undefined : new Error(`watch error: ${obj.message ?? 'unknown'}`));
            if (type === 'BOOKMARK' || obj.metadata?.name !== this.o.nodeName) return;
            if (type === 'DELETED') {
              if (obj.metadata?.uid) this.cancel(obj.metadata.uid);
              return;
            }
            void this.reconcile(obj, false);
          },
          (err: unknown) => end(err),
        )
        .then(
          (ac) => {
            this.watchAbort = ac;
            if (this.stopped) ac.abort();
          },
          (err: unknown) => end(err),
        );
    });
  }

  private cancel(uid: string): void {
    this.queuedUids.delete(uid);
    const a = this.awaiting.get(uid);
    if (a) clearTimeout(a.timer);
    this.awaiting.delete(uid);
    if (this.current?.job.uid === uid) {
      this.o.log.info({ event: 'diagnostics', uid }, 'NodeDiagnostic deleted: stopping its capture');
      this.current.abort.abort(new Error('the NodeDiagnostic was deleted'));
    }
  }

  private async reconcile(obj: NodeDiagnostic, listed: boolean): Promise<void> {
    const uid = obj.metadata?.uid;
    if (!uid || obj.metadata?.deletionTimestamp || this.stopped) return;
    const st = obj.status ?? {};
    if (st.observedUID === uid) {
      if (st.phase && TERMINAL.includes(st.phase)) return;
      if (this.queuedUids.has(uid) || this.current?.job.uid === uid) return;
      const waiting = this.awaiting.get(uid);
      if (waiting) return this.destinationArrived(uid, waiting, obj.spec?.sealedDestination);
      // Started by an earlier run of the agent that stopped before finishing.
      if (listed) {
        await this.patchStatus(uid, {
          phase: 'Failed',
          message: 'interrupted: the agent restarted during the capture; delete and create the NodeDiagnostic to capture again',
          completionTime: new Date(this.now()).toISOString(),
        });
      }
      return;
    }
    if (this.queuedUids.has(uid) || this.current?.job.uid === uid) return;
    const parsed = parseSpec(obj.spec);
    if (!parsed.ok) {
      await this.patchStatus(uid, { phase: 'Failed', message: parsed.error, completionTime: new Date(this.now()).toISOString() });
      return;
    }
    if (parsed.request.bundle) return this.grantKept(uid, parsed.request);
    if (parsed.request.delivery.kind === 'upload') {
      // Registered before the status write: the watch may bring the sealed destination at once.
      const key = newDestinationKey();
      const waitMs = this.o.destinationWaitMs ?? DESTINATION_WAIT_MS;
      const timer = setTimeout(() => {
        if (!this.awaiting.delete(uid)) return;
        void this.patchStatus(uid, {
          phase: 'Failed',
          message: `no upload destination arrived within ${formatDuration(waitMs)} (\`vigil logs --upload-url\` sends it)`,
          completionTime: new Date(this.now()).toISOString(),
        });
      }, waitMs);
      timer.unref();
      this.awaiting.set(uid, { key, request: parsed.request, timer });
      await this.patchStatus(uid, {
        phase: 'Pending',
        message: 'waiting for the upload destination, sealed to status.destinationKey',
        destinationKey: key.publicKey,
        errors: [],
      });
      return;
    }
    this.queuedUids.add(uid);
    const busy = this.current !== undefined;
    await this.patchStatus(uid, {
      phase: 'Pending',
      message: busy ? 'waiting for the capture in progress on this node' : 'accepted',
      errors: [],
    });
    this.enqueue({ trigger: 'request', uid, request: parsed.request });
  }

  /** An upload request's spec changed: open its sealed destination, check it, then capture. */
  private async destinationArrived(uid: string, waiting: Awaiting, sealed: string | undefined): Promise<void> {
    if (!sealed) return;
    this.awaiting.delete(uid);
    clearTimeout(waiting.timer);
    const fail = (message: string) =>
      this.patchStatus(uid, { phase: 'Failed', message, completionTime: new Date(this.now()).toISOString() });
    const url = openDestination(waiting.key, uid, sealed);
    if (url === undefined) return void (await fail("spec.sealedDestination: not sealed to this request's destinationKey"));
    try {
      // Checked now, before a capture that could not be delivered; checked again (and the
      // connection pinned) when uploading.
      await checkDestination(url, this.policy, this.o.upload?.resolve);
    } catch (err) {
      if (!(err instanceof DestinationRefused)) throw err;
      this.o.log.warn({ event: 'diagnostics', uid, destination: redactUrl(url) }, `upload destination refused: ${err.message}`);
      return void (await fail(`upload refused: ${err.message}`));
    }
    this.queuedUids.add(uid);
    const busy = this.current !== undefined;
    await this.patchStatus(uid, { phase: 'Pending', message: busy ? 'waiting for the capture in progress on this node' : 'accepted' });
    this.enqueue({ trigger: 'request', uid, request: { ...waiting.request, delivery: { kind: 'upload', url } } });
  }

  /** spec.bundle: the token may now fetch a bundle already kept (an automatic capture's, a failed upload's). */
  private async grantKept(uid: string, request: CaptureRequest): Promise<void> {
    const b = request.bundle ? this.store.get(request.bundle) : undefined;
    const completionTime = new Date(this.now()).toISOString();
    if (!b || !this.listen) {
      await this.patchStatus(uid, {
        phase: 'Failed',
        message: b ? 'the agent has no HTTP port to serve it from' : 'spec.bundle: no such bundle is kept on this node',
        completionTime,
      });
      return;
    }
    this.grant(b.name, request.tokenSHA256);
    await this.patchStatus(uid, {
      phase: 'Succeeded',
      message: "kept bundle granted to this request's token",
      location: nodeProxyPath(this.o.nodeName, this.listen.port, b.name),
      keptOnNode: true,
      bytes: b.bytes,
      completionTime,
    });
  }

  // ---- running a capture ----

  private enqueue(job: Job): void {
    this.chain = this.chain
      .then(() => this.run(job))
      .catch((err: unknown) => this.o.log.error({ err, event: 'diagnostics' }, 'diagnostic capture failed'));
  }

  private async run(job: Job): Promise<void> {
    if (job.uid && !this.queuedUids.has(job.uid)) return; // deleted while queued
    if (this.stopped) return;
    const abort = new AbortController();
    this.current = { job, abort };
    try {
      await this.runCapture(job, abort.signal);
    } finally {
      this.current = undefined;
      if (job.uid) this.queuedUids.delete(job.uid);
      if (job.trigger === 'fatal') this.autoQueued = false;
    }
  }

  private async runCapture(job: Job, signal: AbortSignal): Promise<void> {
    const { log, nodeName } = this.o;
    const status = (s: NodeDiagnosticStatus) => (job.uid ? this.patchStatus(job.uid, s) : Promise.resolve(true));
    const startTime = new Date(this.now()).toISOString();
    const started = this.now();
    if (!(await status({ phase: 'Collecting', message: `collecting ${job.request.categories.join(', ')}`, startTime }))) return;
    const { name, partial } = this.store.reserve(nodeName);
    let result: CaptureResult;
    try {
      result = await this.capture(
        {
          categories: job.request.categories,
          output: partial,
          node: nodeName,
          stateDir: this.o.stateDir,
          collectorTimeoutMs: this.o.config.collectorTimeout,
          ...(this.o.configPath ? { configPath: this.o.configPath } : {}),
          ...(this.o.kernelLogPath ? { kernelLogPath: this.o.kernelLogPath } : {}),
          ...(job.request.since ? { since: job.request.since } : {}),
        },
        signal,
      );
    } catch (err) {
      rmSync(partial, { force: true });
      const message = `capture failed: ${signal.aborted ? errorMessage(signal.reason) : errorMessage(err)}`;
      this.m.captures.inc({ trigger: job.trigger, result: 'failed' });
      log.warn({ event: 'diagnostics', trigger: job.trigger }, message);
      if (job.trigger === 'fatal') this.o.events?.record(EVENT_REASONS.captureFailed, `${job.cause}: ${message}`, 'Warning');
      await status({ phase: 'Failed', message, completionTime: new Date(this.now()).toISOString() });
      return;
    }
    this.m.captures.inc({ trigger: job.trigger, result: 'ok' });
    this.m.seconds.set((this.now() - started) / 1000);
    const kept = this.store.keep(name, result.path);
    this.m.bytes.set(kept.bytes);
    const manifest = summarize(result.manifest);
    const collectorErrors = result.manifest.collectors
      .filter((c) => c.error !== undefined || c.timedOut)
      .map((c) => `${c.name}: ${c.error ?? 'timed out'}`);
    const served = this.listen ? nodeProxyPath(nodeName, this.listen.port, name) : `(not served: the agent has no HTTP port) ${kept.path}`;
    const keptNote =
      this.listen && /^127\.|^::1$/.test(this.listen.address)
        ? ` (the agent listens on ${this.listen.address} only: the node proxy cannot reach it)`
        : '';
    log.info(
      { event: 'diagnostics', trigger: job.trigger, bundle: name, bytes: kept.bytes, errors: collectorErrors.length },
      'diagnostic bundle captured',
    );
    const done = { bytes: kept.bytes, manifest, errors: collectorErrors.slice(0, 60) };
    this.grant(name, job.request.tokenSHA256);

    if (job.request.delivery.kind === 'node') {
      await status({
        ...done,
        phase: 'Succeeded',
        message: `bundle kept on the node for ${formatDuration(this.o.config.keep.retention)}${keptNote}`,
        location: served,
        keptOnNode: true,
        completionTime: new Date(this.now()).toISOString(),
      });
      return;
    }
    const url = expandUrl(job.request.delivery.url, nodeName, name, this.now());
    // Logs and Events (automatic: a configured URL) may name it; a status every agent reads may not.
    const shown = redactUrl(url);
    const where = job.trigger === 'fatal' ? shown : 'the upload destination';
    if (!(await status({ ...done, phase: 'Uploading', message: `uploading ${kept.bytes} bytes to the upload destination` }))) return;
    const up = await uploadFile(kept.path, url, {
      ...this.o.upload,
      policy: this.policy,
      attempts: this.o.config.uploadAttempts,
      signal,
      onRetry: (attempt, error, delayMs) =>
        log.warn({ event: 'diagnostics', attempt, delayMs }, `diagnostic upload failed, retrying in ${delayMs} ms: ${error}`),
    });
    if (up.ok) {
      this.store.remove(kept.path);
      this.m.uploads.inc({ trigger: job.trigger, result: 'ok' });
      log.info(
        { event: 'diagnostics', trigger: job.trigger, bytes: kept.bytes, attempts: up.attempts },
        `diagnostic bundle uploaded to ${shown}`,
      );
      if (job.trigger === 'fatal')
        this.o.events?.record(EVENT_REASONS.uploaded, `${job.cause}: diagnostic bundle (${kept.bytes} bytes) uploaded to ${shown}`);
      await status({
        phase: 'Succeeded',
        message: `uploaded in ${up.attempts} attempt(s)`,
        ...(job.trigger === 'fatal' ? { location: shown } : {}),
        keptOnNode: false,
        completionTime: new Date(this.now()).toISOString(),
      });
      return;
    }
    this.m.uploads.inc({ trigger: job.trigger, result: 'failed' });
    const last = up.errors.at(-1) ?? (signal.aborted ? errorMessage(signal.reason) : 'aborted');
    const message =
      (up.refused
        ? `upload to ${where} refused: ${up.refused}; `
        : `upload to ${where} failed after ${up.attempts} attempt(s) (${last}); `) +
      `the bundle is kept on the node for ${formatDuration(this.o.config.keep.retention)}: ${served}${keptNote}`;
    log.warn({ event: 'diagnostics', trigger: job.trigger, bundle: name }, message);
    if (job.trigger === 'fatal') this.o.events?.record(EVENT_REASONS.uploadFailed, `${job.cause}: ${message}`, 'Warning');
    await status({
      phase: 'Failed',
      message,
      location: served,
      keptOnNode: true,
      errors: [...done.errors, ...up.errors].slice(-64),
      completionTime: new Date(this.now()).toISOString(),
    });
  }

  /**
   * Merge-patches the status of this node's NodeDiagnostic. metadata.uid in the patch is a
   * precondition: a resource deleted and created again (409) is not written with an old capture's
   * status. False when the resource is gone or replaced, or the write is refused.
   */
  private async patchStatus(uid: string, status: NodeDiagnosticStatus): Promise<boolean> {
    const clients = this.o.clients;
    if (!clients) return false;
    const body = { metadata: { uid }, status: { ...status, observedUID: uid } };
    const backoff = new Backoff(500, 10_000);
    for (let attempt = 1; ; attempt++) {
      try {
        await withDeadline(
          10_000,
          'PATCH nodediagnostics/status',
          (opts) =>
            clients.custom.patchClusterCustomObjectStatus(
              { group: GROUP, version: VERSION, plural: PLURAL, name: this.o.nodeName, body },
              opts,
            ),
          MERGE_PATCH,
        );
        return true;
      } catch (err) {
        const f = toFailure(err);
        if (f.status === 404 || f.status === 409) {
          this.cancel(uid);
          return false;
        }
        const permanent = f.status === 403 || f.status === 422 || f.status === 400;
        if (permanent || attempt >= 6 || this.stopped) {
          this.o.log.warn(
            { event: 'diagnostics', status: f.status },
            `cannot write the NodeDiagnostic status (${status.phase ?? 'update'}): ${f.message}` +
              (f.status === 403
                ? ' (RBAC: the agent needs update/patch on nodediagnostics/status; the admission policy allows only its own node)'
                : ''),
          );
          return !permanent;
        }
        await new Promise((r) => setTimeout(r, f.retryAfterMs ?? backoff.next()));
      }
    }
  }
}

/** {node}, {time} and {name} in an upload URL, so one configured URL serves a fleet. */
export function expandUrl(url: string, node: string, name: string, now: number): string {
  const time = new Date(now)
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
  return url.replaceAll('{node}', encodeURIComponent(node)).replaceAll('{time}', time).replaceAll('{name}', encodeURIComponent(name));
}
