/**
 * Composition root: wires sources and monitors into the engine, the engine into the sinks, and
 * the state store around it. Wiring only; each part's behaviour lives in its own folder.
 */
import type { Logger } from 'pino';
import { Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { ConditionType, EngineEvent, FindingSink, NodeHealth, Sink } from '../api/types.ts';
import { CONDITIONS } from '../catalog/index.ts';
import type { VigilConfig } from '../settings/index.ts';
import type { Engine } from '../engine/engine.ts';
import { createEngine } from './engine.ts';
import { warmUp } from './warm-up.ts';
import { conditionTables } from '../pipeline/settings.ts';
import { adoptLate, adoptNodeConditions, type AdoptingSink } from './adopt.ts';
import { StateStore, type PersistedState } from '../state/store.ts';
import { LogSink } from '../sinks/log/log-sink.ts';
import { HttpServer } from '../sinks/http/server.ts';
import { readBootId } from '../util/boot-id.ts';
import { HealthBoard } from '../health/index.ts';
import { UNUSED_RESOLUTION_MS, registerEventLoopLag } from './event-loop-lag.ts';
import { errorMessage } from '../util/errors.ts';
import { Backoff } from '../util/backoff.ts';
import type { MonitorPart } from '../monitors/module.ts';

/** A sink plus the part of the state file it keeps. */
export interface SinkEntry {
  sink: Sink;
  persist?: (state: PersistedState) => void;
  /** The sink writes a Node's conditions: once serving, the engine adopts what the Node shows, then the sink writes. */
  adopts?: AdoptingSink;
  /** Called once the monitors have started, with the health they show (the quarantine's first decision). */
  start?: (health: NodeHealth) => void;
}

/** A monitor plus what the agent needs to know about it (built from the registry's modules). */
export type MonitorEntry = MonitorPart;

export interface AgentDeps {
  config: VigilConfig;
  log: Logger;
  registry?: Registry;
  bootId?: string;
  /** Builds the monitors from the restored state (the kmsg cursor). */
  monitors: (ctx: {
    restored: PersistedState | undefined;
    registry: Registry;
    markDirty: () => void;
    manage: (type: ConditionType) => void;
    health: HealthBoard;
  }) => MonitorEntry[];
  /** Serves a kept diagnostic bundle on GET /diagnostics/<name> (src/diagnostics/node-diagnostic). */
  diagnosticBundle?: (name: string, token: string) => { path: string; bytes: number } | 'forbidden' | undefined;
  /** Extra sinks (Kubernetes), built once the engine exists. */
  sinks?: (ctx: { registry: Registry; restored: PersistedState | undefined; markDirty: () => void }) => SinkEntry[];
}

export class Agent {
  readonly registry: Registry;
  readonly engine: Engine;
  private readonly store: StateStore;
  private readonly entries: MonitorEntry[];
  private readonly sinks: Sink[];
  private readonly sinkEntries: SinkEntry[];
  private readonly http: HttpServer;
  private readonly health: HealthBoard;
  private readonly failedToStart = new Set<string>();
  /** Retries of blind monitors' start(), by monitor name. */
  private readonly retries = new Map<string, NodeJS.Timeout>();
  private stopping = false;
  private tickTimer: NodeJS.Timeout | undefined;
  private savedVersion = -1;
  /** Set once serving: an agent that failed to start (port in use) must not write the state on stop. */
  private started = false;
  /** Events held (in order) until a status change is on disk; releaseHeld writes it and publishes them. */
  private held: { event: EngineEvent; health: NodeHealth }[] | undefined;
  private releaseHeld: () => void = () => {};

  constructor(private readonly deps: AgentDeps) {
    const { config, log } = deps;
    this.registry = deps.registry ?? new Registry();
    collectDefaultMetrics({ register: this.registry, prefix: 'vigil_', eventLoopMonitoringPrecision: UNUSED_RESOLUTION_MS });
    // A 1 s event-loop sampling period, not prom-client's 10 ms: 100 wake-ups a second would be most
    // of the idle agent's CPU. Its gauges report the lag past that period, not the period itself.
    registerEventLoopLag(this.registry, 'vigil_', 1000);
    this.health = new HealthBoard(log, this.registry);
    const bootId = deps.bootId ?? readBootId();
    // Takes the state directory's lock before reading it: a second agent on it stops here.
    this.store = new StateStore(config.stateDir, {
      bootId,
      collect: () => this.collectState(),
      registry: this.registry,
      onHealth: (state, message) => this.health.set('state', state, message),
      // Saved only once written: a failed write keeps the version unsaved, and the store retries it.
      onSaved: () => (this.savedVersion = this.engine.stateVersion),
    });
    const { state, warning } = this.store.load();
    if (warning) log.warn({ event: 'state' }, warning);
    this.entries = deps.monitors({
      restored: state,
      registry: this.registry,
      markDirty: () => this.store.schedule(),
      manage: (type) => this.manage(type),
      health: this.health,
    });
    const managed = new Set(this.entries.flatMap((e) => e.conditions));
    const declared = this.entries.flatMap((e) => e.extraConditions ?? []);
    const { conditions, late: lateConditions } = conditionTables(config, declared, managed);
    this.engine = createEngine(config, { bootId, conditions, lateConditions, registry: this.registry, restored: state?.engine });
    this.sinkEntries = deps.sinks?.({ registry: this.registry, restored: state, markDirty: () => this.store.schedule() }) ?? [];
    // The Kubernetes sink first: its Event leaves in the turn that found the fault (a ready request), so
    // what the other sinks do in that turn comes after it, not before.
    this.sinks = [...this.sinkEntries.map((e) => e.sink), new LogSink(log)];
    const publish = (event: EngineEvent, health: NodeHealth): void => {
      for (const s of this.sinks) {
        try {
          s.handle(event, health);
        } catch (err) {
          log.error({ err, sink: s.name }, 'sink failed to handle an event');
        }
      }
      this.store.schedule();
    };
    const adopting = this.sinkEntries.flatMap((e) => (e.adopts ? [e.adopts] : []));
    this.engine.on((event: EngineEvent, health: NodeHealth) => {
      if (adopting.length) health = adoptLate(this.engine, adopting, event) ?? health;
      if (this.held) {
        this.held.push({ event, health });
        return;
      }
      // Durable before published: a status change is on disk before any sink shows it, so a crash
      // right after cannot bring the condition back with the restart's time as its
      // lastTransitionTime (a repair engine's toleration clock). Status changes are rare; other
      // events keep the coalesced save. A failed write still publishes (the store retries it).
      // The write (an fsync, milliseconds) waits for the end of this turn of the event loop, and
      // this event and those after it wait with it, in order: what the sinks already started in
      // this turn (the Event of the finding that caused the change) goes out first instead of
      // waiting behind the fsync (a fresh agent's first signal was 5 ms slower than NPD's for it).
      if (this.started && event.kind === 'condition' && event.condition.status !== event.previous) {
        const held = (this.held = [{ event, health }]);
        this.releaseHeld = () => {
          if (this.held !== held) return;
          this.held = undefined;
          this.store.flush();
          for (const h of held) publish(h.event, h.health);
        };
        setImmediate(this.releaseHeld);
        return;
      }
      publish(event, health);
    });
    this.http = new HttpServer(this.registry, {
      health: () => this.engine.health(),
      agentHealth: () => {
        this.refreshHealth();
        return { status: this.health.overall(), components: this.health.snapshot() };
      },
      diagnosticBundle: (name, token) => deps.diagnosticBundle?.(name, token),
    });
    this.sourceUp = new Gauge({
      name: 'vigil_source_up',
      help: '1 while a monitor can see, 0 while it cannot (its conditions are Unknown); absent while the monitor is off.',
      labelNames: ['monitor'],
      registers: [this.registry],
    });
  }

  private readonly sourceUp: Gauge<'monitor'>;

  /**
   * Feeds a part beside the flow (diagnostic captures) the engine's events like a sink, under the
   * same per-sink guard. Attach before start(), so a fault found at start reaches it.
   */
  attach(sink: Sink): void {
    this.sinks.push(sink);
  }

  /**
   * Brings /healthz up to date from the monitors' own status (a source that reported itself blind
   * keeps that state until it reports it can see again). Runs on every /healthz and engine tick.
   */
  private refreshHealth(): void {
    const blind = this.engine.blindSources();
    for (const e of this.entries) {
      const name = e.monitor.name;
      if (this.failedToStart.has(name)) continue;
      const down = blind.get(name);
      const st = down
        ? { state: 'failed' as const, message: down.message }
        : (e.monitor.status?.() ?? { state: 'ok' as const, message: 'running' });
      this.health.set(name, st.state, st.message);
      if (st.state === 'off') this.sourceUp.remove({ monitor: name });
      else this.sourceUp.set({ monitor: name }, st.state === 'failed' ? 0 : 1);
    }
  }

  /** The sink monitors publish through; it also makes sure the state file follows. */
  private findingSink(): FindingSink {
    // Save only when the engine's state moved: most healthy signals change nothing, and an
    // fsync per check would be most of the idle agent's work.
    const saveIfChanged = () => {
      if (this.engine.stateVersion !== this.savedVersion) this.store.schedule();
    };
    return {
      finding: (f) => {
        this.engine.finding(f);
        saveIfChanged();
      },
      healthy: (h) => {
        this.engine.healthy(h);
        saveIfChanged();
      },
      source: (r) => {
        this.engine.source(r);
        if (r.up) this.health.set(r.component, 'ok', 'sees');
        // The engine's message, as refreshHealth() sets it: one text, so the failure is logged once.
        else this.health.set(r.component, 'failed', r.message ?? `${r.component} cannot see`);
        saveIfChanged();
      },
    };
  }

  async start(): Promise<{ port: number; address: string }> {
    const { log, config } = this.deps;
    // Serve first: a monitor slow to start (a hung GPU) must not hide /healthz and /metrics.
    const addr = await this.http.listen(config.listen);
    this.started = true;
    const out = this.findingSink();
    for (const e of this.entries) {
      try {
        await e.monitor.start(out);
      } catch (err) {
        // One broken monitor must not take the others down. What it watches is Unknown, not
        // healthy, and /healthz fails until it runs; a blind source is tried again with backoff.
        this.startFailed(e, err);
        if (e.blind) this.retryStart(e, out, new Backoff(config.sourceRetry.initial, config.sourceRetry.max), Date.now(), 1);
      }
    }
    this.refreshHealth();
    // Compiles the path of a fault (classifier, pipeline, engine) before the first real one takes it.
    if (config.kernelLog.enabled) {
      setImmediate(() => {
        try {
          warmUp(config, { monitors: this.entries.map((e) => e.monitor), sinks: this.sinks });
        } catch (err) {
          log.debug({ err }, 'warm-up failed');
        }
      }).unref();
    }
    this.tickTimer = setInterval(() => {
      this.refreshHealth();
      this.engine.tick();
      if (this.engine.stateVersion !== this.savedVersion) this.store.schedule();
    }, config.engine.tick);
    this.tickTimer.unref();
    log.info(
      {
        event: 'started',
        listen: `${addr.address}:${addr.port}`,
        stateFile: this.store.file,
        monitors: this.entries.map((e) => e.monitor.name),
      },
      'vigil started',
    );
    for (const c of this.engine.health().conditions) {
      log.info(
        { event: 'condition', type: c.name, status: c.status, reason: c.reason, lastTransitionTime: c.lastTransitionTime },
        `${c.name} is ${c.status}: ${c.message}`,
      );
    }
    for (const e of this.sinkEntries) {
      // In the background: an unreachable API server must not hold up detection.
      if (e.adopts)
        void adoptNodeConditions(this.engine, e.adopts).catch((err) => log.error({ err, sink: e.sink.name }, 'reading the Node failed'));
    }
    for (const e of this.sinkEntries) {
      try {
        e.start?.(this.engine.health());
      } catch (err) {
        log.error({ err, sink: e.sink.name }, 'sink failed to start');
      }
    }
    return { port: addr.port, address: addr.address };
  }

  /** Marks a monitor that could not start as failed, and what it watches as Unknown (logged once per cause). */
  private startFailed(e: MonitorEntry, err: unknown): void {
    const message = `${e.monitor.name} cannot start: ${errorMessage(err)}`;
    this.failedToStart.add(e.monitor.name);
    this.sourceUp.set({ monitor: e.monitor.name }, 0);
    this.health.set(e.monitor.name, 'failed', message);
    this.deps.log.debug({ err, monitor: e.monitor.name }, 'monitor failed to start');
    if (e.blind) {
      this.engine.source({
        component: e.monitor.name,
        conditions: e.blind.conditions,
        up: false,
        reason: e.blind.reason,
        message,
        at: Date.now(),
      });
    }
  }

  /**
   * Tries a blind monitor's start() again after the next backoff step (a kernel log that appears
   * or becomes readable later); on success its conditions leave Unknown and it is logged.
   */
  private retryStart(e: MonitorEntry, out: FindingSink, backoff: Backoff, since: number, attempt: number): void {
    const name = e.monitor.name;
    const timer = setTimeout(() => {
      this.retries.delete(name);
      if (this.stopping) return;
      void (async () => {
        try {
          await e.monitor.start(out);
        } catch (err) {
          if (this.stopping) return;
          this.startFailed(e, err);
          this.retryStart(e, out, backoff, since, attempt + 1);
          return;
        }
        // stop() ran while an asynchronous start() was in flight: undo it.
        if (this.stopping) {
          await Promise.resolve()
            .then(() => e.monitor.stop())
            .catch(() => {});
          return;
        }
        this.failedToStart.delete(name);
        if (e.blind) this.engine.source({ component: name, conditions: e.blind.conditions, up: true, at: Date.now() });
        this.deps.log.info(
          { event: 'source_recovered', monitor: name, attempts: attempt, blindForMs: Date.now() - since },
          `${name} started on retry ${attempt} after ${Math.round((Date.now() - since) / 1000)} s blind; ${e.blind?.conditions.join(', ') ?? 'its conditions'} no longer Unknown`,
        );
        this.refreshHealth();
        if (this.engine.stateVersion !== this.savedVersion) this.store.schedule();
      })();
    }, backoff.next());
    timer.unref();
    this.retries.set(name, timer);
  }

  /** Lets a monitor that discovers hardware late (a GPU proved present) add its condition type. */
  manage(type: ConditionType): void {
    const info = CONDITIONS[type as keyof typeof CONDITIONS];
    if (info) this.engine.manageCondition(type, { name: this.deps.config.conditions.names[type as keyof typeof CONDITIONS], ...info });
  }

  async stop(): Promise<void> {
    this.stopping = true;
    for (const t of this.retries.values()) clearTimeout(t);
    this.retries.clear();
    if (this.tickTimer) clearInterval(this.tickTimer);
    for (const e of this.entries) {
      try {
        await e.monitor.stop();
      } catch (err) {
        this.deps.log.warn({ err, monitor: e.monitor.name }, 'monitor failed to stop cleanly');
      }
    }
    // Events held for a status change still go to the sinks before they close.
    this.releaseHeld();
    if (this.started) this.store.flush();
    await this.http.close();
    for (const s of this.sinks) await s.close?.();
    // A sink's last write (e.g. removing a stale condition type) changes what it persists.
    if (this.started) this.store.flush();
    this.store.close();
  }

  private collectState(): PersistedState {
    const state: PersistedState = { version: 1, engine: this.engine.snapshot() };
    for (const e of this.entries) e.persist?.(state);
    for (const e of this.sinkEntries) e.persist?.(state);
    return state;
  }
}
