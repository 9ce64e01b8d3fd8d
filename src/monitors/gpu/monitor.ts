/**
 * NVIDIA GPU monitor: NVML events (push) plus periodic health polls, published as findings and
 * healthy signals. NVML runs only in worker threads (sources/nvml); this class decides what the
 * readings mean and owns the lifecycle: start, poll, re-initialise after a lost GPU, stop.
 *
 * Wiring: `new GpuMonitor({config, registry})`, then the agent calls `start(sink)` and `stop()`.
 * With the shared scheduler, pass `ownTimer: false` and schedule `pollOnce()` every
 * `pollIntervalMs`; without it the monitor runs its own jittered timer.
 */
import path from 'node:path';
import type { Worker } from 'node:worker_threads';
import type { Registry } from 'prom-client';
import type { Finding, FindingSink, Monitor } from '../../api/types.ts';
import { lookupReason } from '../../catalog/index.ts';
import { errorMessage } from '../../util/errors.ts';
import { Backoff } from '../../util/backoff.ts';
import { readBootId } from '../../util/boot-id.ts';
import { scanProcesses } from '../../sources/host/procs.ts';
import { NvmlPollClient, NvmlEventClient, nvmlThreadsLeft, type HangReport, type LogFn } from '../../sources/nvml/client.ts';
import {
  NvmlError,
  NvmlLoadError,
  NvmlTimeoutError,
  NVML_RETURN,
  RC_MISSING_SYMBOL,
  isGpuGone,
  nvmlReturnName,
} from '../../sources/nvml/errors.ts';
import { NvmlMetrics } from '../../sources/nvml/metrics.ts';
import {
  DEFAULT_EVENT_MASK,
  EVENT_BITS,
  type EventDevice,
  type GpuSample,
  type NvmlEvent,
  type PollResult,
} from '../../sources/nvml/protocol.ts';
import { aerDevices, checkAer, readAer, type AerHistory } from './aer.ts';
import { DcgmChannel, type DcgmStatus } from './dcgm.ts';
import { exportBaselines, importBaselines, type PersistedGpuBaselines } from './baselines.ts';
import {
  checkDeviceCount,
  checkFabricManager,
  driverLoaded,
  evaluateGpu,
  eventFindings,
  gpuGone,
  initFailureDetail,
  inFabric,
  initialCheckState,
  nvmlTimeout,
  type CheckResult,
  type GpuCheckState,
} from './checks.ts';
import { gpuConfigSchema, type GpuConfig, type GpuConfigInput } from './config.ts';
import {
  GpuInventory,
  countNvSwitches,
  detectNvidiaPciFunctions,
  entityOf,
  normalizePci,
  type GpuInfo,
  type PciFunction,
} from './inventory.ts';

export interface GpuMonitorOptions {
  /** The `gpu` config section, parsed or not. */
  config?: GpuConfigInput | GpuConfig;
  registry: Registry;
  log?: LogFn;
  /** Root of sysfs, for finding NVIDIA PCI functions (tests point it at a fixture). */
  sysRoot?: string;
  now?: () => number;
  /** Run a fallback poll timer (default true). Set false when the shared scheduler calls pollOnce(). */
  ownTimer?: boolean;
  /** Root of the host's / for /proc (fabric manager process); default: the parent of sysRoot. */
  hostRoot?: string;
  /** Counter baselines persisted by an earlier run (state file key `gpu`); checked, never trusted. */
  restoredBaselines?: unknown;
  /** This boot's id (baselines from another boot are dropped); default /proc/sys/kernel/random/boot_id. */
  bootId?: string;
  /** Called after a poll changed the counter baselines, so the agent saves them. */
  onBaselines?: () => void;
  /**
   * While NVML cannot be loaded or initialised, polls are tried again after `initialMs`, doubling
   * to `maxMs` (jittered), not only every pollInterval (config sourceRetry; default 1 s to 5 min).
   */
  retry?: { initialMs: number; maxMs: number };
  /** How long the poll worker stays after a poll while the event worker runs (default 10 s; test seam). */
  pollWorkerIdleMs?: number;
}

export type GpuMonitorState = 'new' | 'off' | 'running' | 'stopped';

/** Everything the monitor knows right now; what `vigil gpu` prints. */
export interface GpuSnapshot {
  state: GpuMonitorState;
  library: string;
  driverVersion: string | null;
  missingSymbols: string[];
  pciFunctions: PciFunction[];
  expectedCount: number | null;
  nvmlCount: number | null;
  gpus: GpuInfo[];
  samples: Record<number, GpuSample>;
  events: { status: 'off' | 'starting' | 'running' | 'failed'; detail: string | null; devices: EventDevice[] };
  checks: CheckResult[];
  lastPollAt: number | null;
  /** Whether NVML can see: false when it cannot be loaded (the condition is Unknown), null before the first try. */
  nvmlUsable: boolean | null;
  /** Why NVML cannot see (the message of the Unknown condition), null while it can. */
  nvmlUnusableReason: string | null;
  /** NVSwitch functions on the PCI bus (0 on PCIe and NVL5 nodes). */
  nvswitches: number;
  /** Where pushed faults come from (gpu.source), why, and DCGM's state when it is in use. */
  push?: { source: 'nvml' | 'dcgm'; why: string; dcgm: DcgmStatus | null };
}

const MAX_EVENT_BACKOFF_MS = 60_000;

export class GpuMonitor implements Monitor {
  readonly name = 'gpu';
  readonly config: GpuConfig;
  private readonly metrics: NvmlMetrics;
  private readonly log: LogFn;
  private readonly sysRoot: string;
  private readonly now: () => number;
  private readonly ownTimer: boolean;
  private readonly pollClient: NvmlPollClient;
  private eventClient: NvmlEventClient | null = null;

  private state: GpuMonitorState = 'new';
  private sourceUp: boolean | undefined;
  private out: FindingSink | null = null;
  private pciFunctions: PciFunction[] = [];
  private inv = new GpuInventory();
  private driverVersion: string | null = null;
  private missing: string[] = [];
  private nvmlCount: number | null = null;
  private samples: Record<number, GpuSample> = {};
  private checkState = new Map<string, GpuCheckState>();
  private results: CheckResult[] = [];
  private lastPollAt: number | null = null;
  /** Entities already reported lost/reset: a new one triggers re-initialisation. */
  private gone = new Set<string>();
  /** GPU indexes with a call still stuck in an abandoned worker: polls skip them meanwhile. */
  private hung = new Map<number, HangReport>();
  private polling: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  /** An early poll asked for by events: when the last ran, and the one pending. */
  private eventPollAt = -Infinity;
  private eventPollTimer: NodeJS.Timeout | null = null;
  private eventStatus: GpuSnapshot['events'] = { status: 'off', detail: null, devices: [] };
  private eventBackoffMs = 1_000;
  private eventTimer: NodeJS.Timeout | null = null;
  /** NVML initialised at least once (events start only then). */
  private nvmlUp = false;
  /** start() has finished (it starts events itself the first time). */
  private booted = false;
  /** Event workers abandoned in a hung call that have not exited yet. */
  private readonly eventStuck = new Set<Worker>();
  private readonly hostRoot: string;
  private readonly bootId: string;
  private readonly onBaselines: () => void;
  private aerHistory: AerHistory = new Map();
  private nvswitches = 0;
  private unusableReason: string | null = null;
  private dcgm: DcgmChannel | null = null;
  private push: { source: 'nvml' | 'dcgm'; why: string } = { source: 'nvml', why: 'gpu.source is nvml' };
  /** Retries while NVML cannot see: the backoff, the pending retry, since when and how many. */
  private readonly blindBackoff: Backoff;
  private blindTimer: NodeJS.Timeout | null = null;
  private blindSince = 0;
  private blindRetries = 0;

  constructor(opts: GpuMonitorOptions) {
    this.config = gpuConfigSchema.parse(opts.config ?? {});
    this.metrics = new NvmlMetrics(opts.registry);
    this.log = opts.log ?? (() => {});
    this.sysRoot = opts.sysRoot ?? '/sys';
    this.now = opts.now ?? Date.now;
    this.ownTimer = opts.ownTimer ?? true;
    this.hostRoot = opts.hostRoot ?? path.dirname(this.sysRoot);
    this.bootId = opts.bootId ?? safeBootId();
    this.onBaselines = opts.onBaselines ?? (() => {});
    this.blindBackoff = new Backoff(opts.retry?.initialMs ?? 1_000, opts.retry?.maxMs ?? 300_000);
    const restored = importBaselines(opts.restoredBaselines, this.bootId, this.now(), this.config.counterWindow);
    this.checkState = restored.states;
    this.aerHistory = restored.aer;
    if (restored.note) this.log({}, restored.note);
    else if (restored.states.size || restored.aer.size)
      this.log({ gpus: restored.states.size, aerDevices: restored.aer.size }, 'GPU counter baselines restored from the state file');
    this.pollClient = new NvmlPollClient({
      libraryPath: this.config.libraryPath,
      watchdogMs: this.config.watchdog,
      metrics: this.metrics,
      log: this.log,
      // Between polls (minutes apart) the poll worker's thread (~9 MiB) is ended while the event
      // worker keeps NVML initialised; without it, NVML would be set up afresh on every poll.
      retireWhen: () => this.eventClient?.running === true,
      ...(opts.pollWorkerIdleMs !== undefined ? { retireAfterMs: opts.pollWorkerIdleMs } : {}),
    });
  }

  /** The poll worker: whether its thread runs now, and how many were retired while idle. */
  pollWorker(): { running: boolean; retired: number } {
    return { running: this.pollClient.workerRunning, retired: this.pollClient.retired };
  }

  /** Poll interval for an external scheduler. */
  get pollIntervalMs(): number {
    return this.config.pollInterval;
  }

  /** The GPU at a PCI address (any form: `PCI:0000:B3:00`, `00000000:B3:00.0`), for attributing kernel-log findings. */
  gpuByPci(pci: string): GpuInfo | undefined {
    return this.inv.byPci(pci);
  }

  inventory(): readonly GpuInfo[] {
    return this.inv.gpus;
  }

  async start(out: FindingSink): Promise<void> {
    if (this.state !== 'new') return;
    this.out = out;
    this.pciFunctions = this.config.enabled ? await detectNvidiaPciFunctions(this.sysRoot) : [];
    if (this.pciFunctions.length === 0) {
      // No NVIDIA GPU: stay silent, so AcceleratedHardwareReady is neither set healthy nor failed.
      this.state = 'off';
      this.log(
        { sysRoot: this.sysRoot, enabled: this.config.enabled },
        'no NVIDIA GPU on the PCI bus (or GPU monitor disabled); GPU monitor off',
      );
      return;
    }
    this.state = 'running';
    this.nvswitches = await countNvSwitches(this.sysRoot);
    this.log({ pciGpus: this.pciFunctions.length, nvswitches: this.nvswitches }, 'NVIDIA GPUs found on the PCI bus; starting GPU monitor');
    await this.pollOnce();
    // Events that happen before registration are never delivered, so return only once registered
    // (bounded: a failing event worker retries in the background).
    await this.choosePush();
    const ready = this.maybeStartEvents();
    if (ready) await Promise.race([ready, new Promise((r) => setTimeout(r, this.config.watchdog + 2_000).unref())]);
    this.booted = true;
    if (this.ownTimer) this.scheduleNext();
  }

  async stop(): Promise<void> {
    if (this.state === 'running') this.state = 'stopped';
    if (this.timer) clearTimeout(this.timer);
    if (this.eventTimer) clearTimeout(this.eventTimer);
    if (this.eventPollTimer) clearTimeout(this.eventPollTimer);
    if (this.blindTimer) clearTimeout(this.blindTimer);
    this.timer = this.eventTimer = this.blindTimer = null;
    await Promise.all([this.eventClient?.stop(), this.pollClient.close(), this.dcgm?.stop()]);
    this.eventClient = null;
    const left = nvmlThreadsLeft();
    if (left > 0)
      this.log({ threads: left }, 'NVML calls still hung after stop; the process cannot exit normally until they return (use exitNow())');
  }

  /** Worker threads still stuck in hung NVML calls (process-wide); see exitNow(). */
  get stuckNvmlThreads(): number {
    return nvmlThreadsLeft();
  }

  /** One poll cycle (init if needed, inventory, every check). Overlapping calls share one cycle. */
  pollOnce(): Promise<void> {
    if (this.state !== 'running') return Promise.resolve();
    this.polling ??= this.doPoll().finally(() => (this.polling = null));
    return this.polling;
  }

  snapshot(): GpuSnapshot {
    return {
      state: this.state,
      library: this.config.libraryPath,
      driverVersion: this.driverVersion,
      missingSymbols: [...this.missing],
      pciFunctions: [...this.pciFunctions],
      expectedCount: this.state === 'off' ? null : this.expected().count,
      nvmlCount: this.nvmlCount,
      gpus: [...this.inv.gpus],
      samples: { ...this.samples },
      events: { ...this.eventStatus, devices: [...this.eventStatus.devices] },
      checks: [...this.results],
      lastPollAt: this.lastPollAt,
      nvmlUsable: this.sourceUp ?? null,
      nvmlUnusableReason: this.sourceUp === false ? this.unusableReason : null,
      nvswitches: this.nvswitches,
      push: { ...this.push, dcgm: this.dcgm ? { ...this.dcgm.status } : null },
    };
  }

  /** The counter baselines to persist (state file key `gpu`). */
  baselines(): PersistedGpuBaselines {
    return exportBaselines(this.bootId, this.checkState, this.aerHistory);
  }

  // ---------------------------------------------------------------- polling

  private expected(): { count: number; from: string } {
    if (this.config.expectedCount !== null) return { count: this.config.expectedCount, from: 'configured' };
    const n = this.pciFunctions.length;
    return { count: n, from: `${n} NVIDIA PCI function${n === 1 ? '' : 's'} in sysfs` };
  }

  private scheduleNext(): void {
    if (this.state !== 'running') return;
    const j = this.config.pollJitter;
    const delay = Math.max(1_000, this.config.pollInterval * (1 + j * (Math.random() * 2 - 1)));
    this.timer = setTimeout(() => void this.pollOnce().finally(() => this.scheduleNext()), delay);
    this.timer.unref();
  }

  private async doPoll(): Promise<void> {
    const started = performance.now();
    try {
      if (this.nvswitches > 0) await this.scanFabricManager();
      const results = await this.collect();
      if (this.state !== 'running') return;
      // AER counters come from sysfs: they are read even while NVML is unusable.
      if (this.config.aer) results.push(...this.aerResults(this.now()));
      this.publish(results);
      this.onBaselines();
      // NVML came up after start (driver loaded late): subscribe to events now.
      if (this.booted && this.eventStatus.status === 'off') void this.maybeStartEvents();
    } catch (err) {
      this.log({ err: errorMessage(err) }, 'GPU poll failed');
    } finally {
      this.metrics.pollDuration.observe((performance.now() - started) / 1000);
      this.retryWhileBlind();
    }
  }

  /**
   * NVML could not be loaded or initialised (a driver installed or a library mounted late): poll
   * again after the next backoff step instead of waiting for the next regular poll. A retry is one
   * dlopen or nvmlInit_v2 in the poll worker.
   */
  private retryWhileBlind(): void {
    if (this.state !== 'running' || this.sourceUp !== false) {
      this.blindBackoff.reset();
      return;
    }
    if (this.blindTimer) return;
    this.blindTimer = setTimeout(() => {
      this.blindTimer = null;
      this.blindRetries++;
      void this.pollOnce();
    }, this.blindBackoff.next());
    this.blindTimer.unref();
  }

  /** Runs NVML and the checks; returns the results to publish. */
  private async collect(): Promise<CheckResult[]> {
    const now = this.now();
    const cfg = this.config;
    // Two attempts: when one GPU hangs, the retry skips it so the others are still checked now.
    for (let attempt = 0; ; attempt++) {
      if (this.pollClient.stuckWorkers === 0) this.hung.clear();
      if (!this.pollClient.initialised) {
        if (this.pollClient.stuckWorkers >= cfg.maxStuckWorkers) {
          // Every recent worker is still stuck in NVML: don't pile up more threads.
          const h = [...this.hung.values()][0] ?? this.pollClient.lastHang;
          const gpu = h?.gpuIndex != null ? this.gpuAt(h.gpuIndex) : undefined;
          return [
            nvmlTimeout(
              h?.fn ?? 'NVML',
              h?.afterMs ?? cfg.watchdog,
              gpu,
              now,
              `${this.pollClient.stuckWorkers} worker threads are still stuck, so this poll was skipped`,
            ),
          ];
        }
        try {
          const init = await this.pollClient.init();
          // Said once: a poll worker retired between polls initialises again on the next.
          const told = this.nvmlUp && init.missing.join() === this.missing.join();
          this.nvmlUp = true;
          this.driverVersion = init.driverVersion;
          this.missing = init.missing;
          if (init.missing.length && !told)
            this.log({ missing: init.missing }, 'NVML library lacks some symbols (older driver); the checks that need them are skipped');
        } catch (err) {
          return [this.failure(err, now)];
        }
      }
      try {
        const res = await this.pollClient.poll({ skip: [...this.hung.keys()], maxNvLinks: cfg.maxNvLinks, samples: true });
        this.lastPollAt = now;
        this.reportSource(true);
        return this.judge(res, now);
      } catch (err) {
        const r = this.failure(err, now);
        if (attempt === 0 && err instanceof NvmlTimeoutError && err.gpuIndex !== null) continue; // judge() reports the skipped GPU
        return [r];
      }
    }
  }

  /** Says whether NVML can see (the agent makes AcceleratedHardwareReady Unknown while it cannot). */
  private reportSource(up: boolean, message?: string): void {
    // Down again for another cause (DRIVER_NOT_LOADED, then LIB_RM_VERSION_MISMATCH): say so.
    const changed = !up && this.sourceUp === false && (message ?? 'NVML is unusable') !== this.unusableReason;
    if (!up) this.unusableReason = message ?? 'NVML is unusable';
    if (up === this.sourceUp && !changed) return;
    if (up && this.sourceUp === false) {
      this.log(
        { event: 'source_recovered', attempts: this.blindRetries, blindForMs: this.now() - this.blindSince },
        'NVML can see again; AcceleratedHardwareReady no longer Unknown',
      );
    } else if (!up && this.sourceUp !== false) {
      this.blindSince = this.now();
      this.blindRetries = 0;
    }
    this.sourceUp = up;
    this.out?.source({
      component: 'gpu',
      conditions: ['AcceleratedHardwareReady'],
      up,
      at: this.now(),
      ...(up ? {} : { reason: 'NvidiaMonitoringUnavailable', message: message ?? 'NVML is unusable' }),
    });
  }

  /** Whether NVML can see, for /healthz (undefined before the first poll). */
  get sees(): boolean | undefined {
    return this.sourceUp;
  }

  /** Turns a failed init or poll into a result (and bookkeeping for hangs). */
  private failure(err: unknown, now: number): CheckResult {
    if (err instanceof NvmlTimeoutError) {
      if (err.gpuIndex !== null) this.hung.set(err.gpuIndex, { fn: err.fn, gpuIndex: err.gpuIndex, afterMs: err.afterMs });
      return nvmlTimeout(err.fn, err.afterMs, err.gpuIndex !== null ? this.gpuAt(err.gpuIndex) : undefined, now);
    }
    const n = this.pciFunctions.length;
    if (err instanceof NvmlLoadError) {
      // The library cannot be loaded (not mounted, wrong path): Vigil is blind, which is not a GPU
      // fault, so AcceleratedHardwareReady goes Unknown rather than False (no node replaced for it).
      this.reportSource(false, `${n} NVIDIA GPU${n === 1 ? ' is' : 's are'} on the PCI bus but NVML cannot be loaded: ${err.message}`);
      return { check: 'driver', gpu: null, entity: '', reason: '', status: 'skip', message: `NVML unusable: ${err.message}` };
    }
    if (
      err instanceof NvmlError &&
      (err.fn === 'nvmlInit_v2' || err.rc === NVML_RETURN.UNINITIALIZED || err.rc === NVML_RETURN.DRIVER_NOT_LOADED)
    ) {
      // Init failing (driver not loaded, or upgraded without a reboot: LIB_RM_VERSION_MISMATCH) is
      // a monitoring failure, not a GPU fault: Unknown with the cause, never False (no node
      // replaced for a fleet-wide driver rollout). Each poll tries again.
      this.pollClient.reset('init-failed');
      const detail = err.fn === 'nvmlInit_v2' ? initFailureDetail(err.rc) : err.message;
      const message = `${n} NVIDIA GPU${n === 1 ? ' is' : 's are'} on the PCI bus but NVML cannot be initialised: ${detail}`;
      if (this.unusableReason !== message || this.sourceUp !== false) this.log({ err: detail }, 'NVML unusable');
      this.reportSource(false, message);
      return { check: 'driver', gpu: null, entity: '', reason: '', status: 'skip', message: `NVML unusable: ${detail}` };
    }
    this.log({ err: errorMessage(err) }, 'NVML poll failed');
    return { check: 'poll', gpu: null, entity: '', reason: '', status: 'skip', message: `poll failed: ${errorMessage(err)}` };
  }

  private judge(res: PollResult, now: number): CheckResult[] {
    const cfg = this.config;
    this.driverVersion = res.driverVersion ?? this.driverVersion;
    this.nvmlCount = res.count;
    // A GPU skipped because a call on it hung: name it from what the worker read before the hang.
    for (const g of res.gpus) if (g.skipped && !g.identity) g.identity = this.pollClient.identityAt(g.index) ?? null;
    const inv = GpuInventory.fromPoll(res.gpus, this.driverVersion, this.inv);
    if (!inv.sameAs(this.inv)) {
      this.log(
        { gpus: inv.gpus.map((g) => ({ index: g.index, uuid: g.uuid, pci: g.pci })) },
        this.inv.gpus.length ? 'GPU inventory changed' : 'GPU inventory',
      );
      if (this.inv.gpus.length && this.eventClient) this.restartEvents('inventory-changed', 0);
    }
    this.inv = inv;
    const expected = this.expected();
    this.metrics.gpuCount.set({ source: 'nvml' }, res.count);
    this.metrics.gpuCount.set({ source: 'expected' }, expected.count);

    const results: CheckResult[] = [
      driverLoaded(this.driverVersion, cfg.libraryPath),
      checkDeviceCount(res.count, expected.count, expected.from, now),
    ];
    let reinit = false;
    const samples: Record<number, GpuSample> = {};
    for (const g of res.gpus) {
      const gpu = inv.byIndex(g.index)!;
      if (g.skipped) {
        const h = this.hung.get(g.index);
        results.push(nvmlTimeout(h?.fn ?? 'NVML', h?.afterMs ?? cfg.watchdog, gpu, now, 'this GPU is skipped until the call returns'));
        continue;
      }
      if (g.gone) {
        results.push(gpuGone(gpu, g.gone.fn, g.gone.rc, now));
        if (!this.gone.has(entityOf(gpu))) reinit = true;
        this.gone.add(entityOf(gpu));
        continue;
      }
      if (g.handleRc !== 0) {
        results.push({
          check: 'gpuLost',
          gpu: g.index,
          entity: entityOf(gpu),
          reason: '',
          status: 'skip',
          message: `GPU ${g.index}: nvmlDeviceGetHandleByIndex_v2 returned ${nvmlReturnName(g.handleRc)}`,
        });
        continue;
      }
      if (!g.sample) continue;
      samples[g.index] = g.sample;
      const key = gpu.uuid ?? entityOf(gpu);
      const { results: r, state } = evaluateGpu(gpu, g.sample, this.checkState.get(key) ?? initialCheckState(), cfg, now);
      this.checkState.set(key, state);
      results.push(...r);
    }
    this.samples = samples;
    results.push(this.fabricManagerResult(samples, now));
    if (reinit) {
      // A GPU was just lost or needs a reset: re-initialise NVML and re-register events.
      this.log({}, 'GPU lost or needs reset; re-initialising NVML');
      this.pollClient.reset('gpu-lost');
      if (this.eventClient) this.restartEvents('gpu-lost', 0);
    }
    return results;
  }

  /** Sends findings, and healthy signals for whenHealthy reasons no other check failed on. */
  private publish(results: CheckResult[]): void {
    this.results = results;
    const out = this.out;
    if (!out) return;
    const key = (r: CheckResult) => `${r.reason}\u0000${r.entity}`;
    const failing = new Set(results.filter((r) => r.status === 'fail').map(key));
    const sent = new Set<string>();
    const at = this.now();
    for (const r of results) {
      if (r.reason)
        this.metrics.checkFailing.set({ check: r.check, gpu: r.gpu === null ? '' : String(r.gpu) }, r.status === 'fail' ? 1 : 0);
      if (r.status === 'fail' && r.finding) out.finding(r.finding);
      if (r.status !== 'ok' || failing.has(key(r)) || sent.has(key(r))) continue;
      if (!r.reason || lookupReason(r.reason)?.recovery.kind !== 'whenHealthy') continue;
      sent.add(key(r));
      out.healthy({ reasons: [r.reason], entity: r.entity, source: 'nvml', at });
    }
  }

  /** The fabric manager check, run only where NVSwitches are on the bus and GPUs are in a fabric. */
  private fabricManagerResult(samples: Record<number, GpuSample>, now: number): CheckResult {
    const fabricGpus = Object.values(samples).filter(inFabric).length;
    // Read /proc only when it matters (an NVSwitch system with GPUs in the fabric).
    const fm = this.nvswitches > 0 && fabricGpus > 0 ? this.fabricManager : null;
    return checkFabricManager(this.nvswitches, fabricGpus, fm, now);
  }

  private fabricManager: { running: boolean; pids: number[] } | null = null;

  /** Looks for the nv-fabricmanager process (comm is cut to 15 characters: "nv-fabricmanage"). */
  private async scanFabricManager(): Promise<void> {
    try {
      const procs = await scanProcesses(this.hostRoot);
      const pids = procs.filter((p) => p.comm.startsWith('nv-fabricmanage') && p.state !== 'Z').map((p) => p.pid);
      this.fabricManager = { running: pids.length > 0, pids };
    } catch (err) {
      this.log({ err: errorMessage(err) }, 'cannot scan /proc for nv-fabricmanager');
      this.fabricManager = null;
    }
  }

  /** AER counters of every GPU function in sysfs and the ports above it. */
  private aerResults(now: number): CheckResult[] {
    const t = this.config.thresholds;
    const devices = aerDevices(
      this.sysRoot,
      this.pciFunctions.map((f) => f.address),
    );
    const next: AerHistory = new Map();
    const results: CheckResult[] = [];
    for (const d of devices) {
      const gpuIndex = this.inv.byPci(d.gpu)?.index ?? null;
      const r = checkAer(
        d,
        gpuIndex,
        readAer(this.sysRoot, d.bdf),
        this.aerHistory.get(d.bdf) ?? [],
        {
          correctedCount: t.aerCorrectedCount,
          correctedWindowMs: t.aerCorrectedWindowMs,
        },
        now,
      );
      if (r.history.length) next.set(d.bdf, r.history);
      results.push(...r.results);
    }
    this.aerHistory = next;
    return results;
  }

  // ---------------------------------------------------------------- events

  /** Starts the event worker once NVML has initialised; resolves when events are registered. */
  private maybeStartEvents(): Promise<void> | null {
    if (!this.config.events || this.push.source === 'dcgm' || !this.nvmlUp || this.eventClient || this.eventTimer) return null;
    return this.startEvents();
  }

  /** gpu.source: nvml, dcgm, or auto (DCGM when its library loads and the host engine answers, else NVML); logged. */
  private async choosePush(): Promise<void> {
    const src = this.config.source;
    if (src === 'nvml') return;
    const dcgm = new DcgmChannel({
      config: this.config,
      log: this.log,
      out: () => (this.state === 'running' ? this.out : null),
      gpuByPci: (pci) => this.inv.byPci(pci),
      now: this.now,
      probeOnly: src === 'auto',
    });
    const failure = await dcgm.start();
    if (failure && src === 'auto') {
      await dcgm.stop();
      this.push = { source: 'nvml', why: `gpu.source auto: DCGM unusable (${failure.message}), so NVML events` };
    } else {
      this.dcgm = dcgm;
      const why = failure ? `not connected yet: ${failure.message}` : 'policy callbacks registered';
      this.push = { source: 'dcgm', why: `gpu.source ${src}: DCGM, ${why}` };
    }
    this.log({ push: this.push.source, why: this.push.why }, 'GPU push channel chosen');
  }

  private startEvents(): Promise<void> | null {
    if (this.state !== 'running' || this.eventClient) return null;
    let readyNow: () => void = () => {};
    const ready = new Promise<void>((r) => (readyNow = r));
    this.eventStatus = { status: 'starting', detail: null, devices: [] };
    const client = new NvmlEventClient(
      {
        libraryPath: this.config.libraryPath,
        watchdogMs: this.config.watchdog,
        metrics: this.metrics,
        log: this.log,
        waitMs: this.config.eventWait,
        mask: DEFAULT_EVENT_MASK,
        stuck: this.eventStuck,
      },
      {
        ready: (devices, missing) => {
          readyNow();
          this.eventBackoffMs = 1_000;
          this.eventStatus = { status: 'running', detail: null, devices };
          const unregistered = devices.filter((d) => d.rc !== 0);
          this.log(
            { devices: devices.map((d) => ({ index: d.index, mask: `0x${d.mask.toString(16)}`, rc: nvmlReturnName(d.rc) })), missing },
            'NVML events registered',
          );
          if (unregistered.length)
            this.log({ gpus: unregistered.map((d) => d.index) }, 'some GPUs do not support NVML events; only polls cover them');
        },
        event: (e) => this.onEvent(e),
        waitError: (rc, g) => {
          readyNow();
          this.eventClient = null;
          this.eventStatus = { ...this.eventStatus, status: 'failed', detail: `nvmlEventSetWait_v2 returned ${nvmlReturnName(rc)}` };
          this.log({ rc: nvmlReturnName(rc), gpu: g.index }, 'NVML event wait failed');
          if (isGpuGone(rc) && g.index !== null) {
            const gpu = this.gpuFor(g.index, g.uuid, g.busId);
            const r = gpuGone(gpu, 'nvmlEventSetWait_v2', rc, this.now());
            this.gone.add(entityOf(gpu));
            if (r.finding) this.out?.finding(r.finding);
          }
          // Find out what else changed, then re-register (the poll re-initialises NVML if needed).
          void this.pollOnce();
          this.restartEvents('wait-error', this.eventBackoffMs);
        },
        failed: (err) => {
          readyNow();
          this.eventClient = null;
          this.eventStatus = { ...this.eventStatus, status: 'failed', detail: err.message };
          if (err instanceof NvmlError && err.rc === RC_MISSING_SYMBOL) {
            // Symbols missing from an older driver: polls still run; no point retrying.
            this.log({ err: err.message }, 'NVML events unavailable in this library; relying on polls');
            return;
          }
          this.log({ err: err.message }, 'NVML event worker failed');
          this.restartEvents('failed', this.eventBackoffMs);
        },
        hang: (h) => {
          readyNow();
          this.eventClient = null;
          this.eventStatus = { ...this.eventStatus, status: 'failed', detail: `${h.fn} hung` };
          const gpu = h.gpuIndex !== null ? this.inv.byIndex(h.gpuIndex) : undefined;
          const r = nvmlTimeout(h.fn, h.afterMs, gpu, this.now(), 'the event worker was replaced');
          if (r.finding) this.out?.finding(r.finding);
          this.restartEvents('hang', Math.max(this.eventBackoffMs, this.config.watchdog));
        },
      },
    );
    this.eventClient = client;
    client.start();
    return ready;
  }

  private restartEvents(why: string, delayMs: number): void {
    if (this.state !== 'running' || this.eventTimer) return;
    this.metrics.workerRestarts.inc({ role: 'events', why });
    const old = this.eventClient;
    this.eventClient = null;
    this.eventBackoffMs = Math.min(MAX_EVENT_BACKOFF_MS, this.eventBackoffMs * 2);
    this.eventTimer = setTimeout(() => {
      this.eventTimer = null;
      if (this.eventStuck.size >= this.config.maxStuckWorkers) {
        // Earlier event workers are still stuck in NVML: don't pile up threads; look again later.
        this.restartEvents('still-stuck', MAX_EVENT_BACKOFF_MS);
        return;
      }
      void (old?.stop() ?? Promise.resolve()).then(() => this.startEvents());
    }, delayMs);
    this.eventTimer.unref();
  }

  private onEvent(e: NvmlEvent): void {
    const gpu = this.gpuFor(e.index, e.uuid, e.busId);
    for (const f of eventFindings(e, gpu, this.config)) this.emit(f);
    // A GPU that just became unusable: let the poll confirm it and re-initialise, at once.
    if (e.eventType & EVENT_BITS.GpuUnavailableError) void this.pollOnce();
    // A retirement event: read the remapped rows before the next regular poll, at most once per
    // eventPollMinInterval. (Clock events are not subscribed: DEFAULT_EVENT_MASK.)
    else if (e.eventType & EVENT_BITS.DramRetirementEvent) this.pollEarly();
  }

  private pollEarly(): void {
    if (this.eventPollTimer) return;
    const run = () => {
      this.eventPollTimer = null;
      this.eventPollAt = performance.now();
      void this.pollOnce();
    };
    const wait = this.eventPollAt + this.config.eventPollMinInterval - performance.now();
    if (wait <= 0) return run();
    this.eventPollTimer = setTimeout(run, wait);
    this.eventPollTimer.unref();
  }

  /** The GPU at an NVML index: from the inventory, or from what the poll worker read before it hung. */
  private gpuAt(index: number): GpuInfo | undefined {
    const known = this.inv.byIndex(index);
    if (known?.uuid) return known;
    const id = this.pollClient.identityAt(index);
    if (!id) return known;
    return {
      index,
      uuid: id.uuid,
      name: id.name,
      pci: id.busId ? normalizePci(id.busId) : null,
      busId: id.busId,
      serial: id.serial,
      driverVersion: this.driverVersion,
    };
  }

  /** The GPU an event or error names, from the event worker's own data or the inventory. */
  private gpuFor(index: number | null, uuid: string | null, busId: string | null): GpuInfo {
    const known =
      (uuid && this.inv.byUuid(uuid)) || (busId && this.inv.byPci(busId)) || (index !== null ? this.inv.byIndex(index) : undefined);
    if (known) return known;
    return {
      index: index ?? -1,
      uuid,
      name: null,
      pci: busId ? normalizePci(busId) : null,
      busId,
      serial: null,
      driverVersion: this.driverVersion,
    };
  }

  private emit(f: Finding): void {
    if (this.state === 'running') this.out?.finding(f);
  }
}

/** The boot id, or a per-process one when unreadable (then persisted baselines are simply not reused). */
function safeBootId(): string {
  try {
    return readBootId();
  } catch {
    return `unknown-${process.pid}-${Date.now()}`;
  }
}
