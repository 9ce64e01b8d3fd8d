/**
 * The engine turns findings into node health: per-(condition, reason, entity) state with dedup,
 * thresholds, escalation, flap damping and recovery as the catalog says. It is pure apart from
 * the injected clock: no I/O, no timers (the caller drives `tick()`), so tests replay it exactly.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type {
  ActiveProblem,
  ConditionState,
  ConditionStatus,
  ConditionType,
  EmittedFinding,
  EngineEvent,
  Finding,
  HealthySignal,
  NodeHealth,
  RecommendedAction,
  Recovery,
  Severity,
  SourceReport,
} from '../api/types.ts';
import { lookupReason } from '../catalog/index.ts';
import { ENGINE_DEFAULTS as DEFAULTS } from '../config/engine.ts';
import { Escalator, type EscalationRule } from './escalation.ts';
import { SlidingCounter } from './sliding-counter.ts';

export interface ConditionInfo {
  /** Name written to Kubernetes (condition type names are configurable). */
  name: string;
  healthyReason: string;
  healthyMessage: string;
  /**
   * healthyTrue (Vigil's own conditions, the default): True while healthy, False on a Fatal
   * problem. problemTrue (conditions declared by NPD files): False while healthy, True while a
   * permanent rule's problem is active, as NPD reports them.
   */
  polarity?: 'healthyTrue' | 'problemTrue';
}

export interface EngineOptions {
  bootId: string;
  now?: () => number;
  /** Condition types Vigil manages and reports True while healthy. */
  conditions: Map<ConditionType, ConditionInfo>;
  /**
   * Conditions not managed until a Fatal finding proves the hardware is there (a GPU fault in the
   * kernel log on a node where NVML found no GPU).
   */
  lateConditions?: Map<ConditionType, ConditionInfo>;
  /** A repeat of an active problem is re-emitted at most once per window (others are counted). */
  repeatWindowMs?: number;
  /** A whenHealthy problem that fired this often within the window is held until it is quiet. */
  flap?: { maxActivations: number; windowMs: number };
  escalations?: EscalationRule[];
  registry?: Registry;
  restored?: EngineSnapshot;
}

interface ProblemState extends ActiveProblem {
  recovery: Recovery;
  action: RecommendedAction;
  healthyStreak: number;
  lastEmitted: number;
  /** Arrival order, to break firstSeen ties in the per-condition order. */
  order: number;
}

/** What survives a restart: the conditions' clocks and the active problems. */
export interface EngineSnapshot {
  version: 1;
  bootId: string;
  conditions: Record<string, { status: ConditionStatus; lastTransitionTime: string }>;
  problems: (ActiveProblem & { recovery: Recovery; action: RecommendedAction; healthyStreak: number })[];
}

type Listener = (event: EngineEvent, health: NodeHealth) => void;

export class Engine {
  private readonly now: () => number;
  private readonly problems = new Map<string, ProblemState>();
  /**
   * Active Fatal problems per condition, oldest first: a condition's state, reason and message
   * come from here without walking every problem (per-finding cost must not grow with their number).
   */
  private readonly fatal = new Map<ConditionType, ProblemState[]>();
  private arrivals = 0;
  private readonly conditionClock = new Map<ConditionType, { status: ConditionStatus; since: string }>();
  /** Sources that cannot see, per condition type they watch: the condition reads Unknown. */
  private readonly blind = new Map<ConditionType, Map<string, { reason: string; message: string }>>();
  private readonly thresholds = new Map<string, SlidingCounter>();
  private readonly activations = new Map<string, SlidingCounter>();
  private readonly escalator: Escalator;
  private readonly listeners: Listener[] = [];
  private readonly repeatWindowMs: number;
  private readonly flap: { maxActivations: number; windowMs: number };
  private readonly m: ReturnType<typeof engineMetrics>;
  private version = 0;
  /** What listeners were last given; dropped on every change except a repeat. */
  private lastView: NodeHealth | undefined;

  constructor(private readonly opts: EngineOptions) {
    this.now = opts.now ?? Date.now;
    this.repeatWindowMs = opts.repeatWindowMs ?? DEFAULTS.repeatWindow;
    this.flap = opts.flap ?? { maxActivations: DEFAULTS.flap.maxActivations, windowMs: DEFAULTS.flap.window };
    this.escalator = new Escalator(opts.escalations ?? []);
    this.m = engineMetrics(opts.registry);
    this.restore(opts.restored);
    for (const type of opts.conditions.keys()) {
      if (!this.conditionClock.has(type)) this.conditionClock.set(type, { status: this.statusOf(type), since: this.iso() });
    }
    this.refreshGauges();
  }

  /** Sinks and the state store listen here. Called synchronously, in order. */
  on(listener: Listener): void {
    this.listeners.push(listener);
  }

  /** Bumped on every state change; the state store saves when it moves. */
  get stateVersion(): number {
    return this.version;
  }

  finding(f: Finding): void {
    const def = lookupReason(f.reason);
    const severity: Severity | undefined = f.severity ?? def?.severity;
    const condition = f.condition ?? def?.condition;
    const recovery = f.recovery ?? def?.recovery;
    if (!severity || !condition || !recovery) {
      // A monitor bug, not bad input; still never silent.
      this.m.dropped.inc({ why: 'unknown_reason' });
      this.emitDrop(f, 'unknown_reason');
      return;
    }
    const key = `${condition}|${f.reason}|${f.entity}`;
    if (f.threshold && !this.passesThreshold(key, f.threshold, f.at)) {
      this.m.suppressed.inc({ why: 'below_threshold' });
      return;
    }
    this.m.findings.inc({ reason: f.reason, severity, condition });
    const action = def?.action ?? (severity === 'Fatal' ? 'reboot' : 'none');
    const existing = this.problems.get(key);
    if (existing) {
      existing.count++;
      existing.lastSeen = f.at;
      existing.message = f.message;
      existing.healthyStreak = 0;
      if (f.attrs) existing.attrs = { ...existing.attrs, ...f.attrs };
      this.version++;
      if (f.at - existing.lastEmitted < this.repeatWindowMs) {
        this.m.suppressed.inc({ why: 'duplicate' });
        this.emit({ kind: 'repeat', problem: publicProblem(existing) });
      } else {
        existing.lastEmitted = f.at;
        this.emit({ kind: 'finding', finding: { ...f, severity, condition, action, count: existing.count } });
      }
    } else {
      const p: ProblemState = {
        key,
        reason: f.reason,
        severity,
        condition,
        entity: f.entity,
        message: f.message,
        firstSeen: f.at,
        lastSeen: f.at,
        count: 1,
        recovery,
        action,
        healthyStreak: 0,
        lastEmitted: f.at,
        order: 0,
        ...(f.attrs ? { attrs: { ...f.attrs } } : {}),
      };
      this.track(p);
      this.counterFor(this.activations, key, this.flap.windowMs, this.flap.maxActivations + 1).add(f.at);
      this.version++;
      this.emit({ kind: 'finding', finding: { ...f, severity, condition, action, count: 1 } });
      if (severity === 'Fatal') {
        const late = this.opts.lateConditions?.get(condition);
        if (late && !this.opts.conditions.has(condition)) this.manageCondition(condition, late);
        else this.recomputeCondition(condition);
      }
    }
    for (const escalated of this.escalator.observe(f, this.now())) this.finding(escalated);
    this.refreshGauges();
  }

  healthy(h: HealthySignal): void {
    const wanted = new Set<string>(h.reasons);
    for (const p of [...this.problems.values()]) {
      if (!wanted.has(p.reason) || (h.entity !== undefined && p.entity !== h.entity)) continue;
      if (p.recovery.kind !== 'whenHealthy') continue;
      p.healthyStreak++;
      this.version++;
      if (p.healthyStreak < p.recovery.healthyChecks) continue;
      if (this.isFlapping(p.key, h.at)) {
        this.m.suppressed.inc({ why: 'flapping' });
        continue;
      }
      this.clear(p, 'healthy');
    }
  }

  /**
   * A source says whether it can see. While any source of a condition is down and no Fatal problem
   * is known for it, the condition is Unknown with the source's reason.
   */
  source(r: SourceReport): void {
    for (const type of r.conditions) {
      let down = this.blind.get(type);
      if (r.up) {
        if (!down?.delete(r.component)) continue;
      } else {
        const next = { reason: r.reason ?? 'SourceUnavailable', message: r.message ?? `${r.component} cannot see` };
        const prev = down?.get(r.component);
        if (prev && prev.reason === next.reason && prev.message === next.message) continue;
        if (!down) this.blind.set(type, (down = new Map<string, { reason: string; message: string }>()));
        down.set(r.component, next);
      }
      this.version++;
      if (!this.recomputeCondition(type)) {
        // Same status, new cause: sinks still show the current message.
        const info = this.opts.conditions.get(type);
        if (info && this.conditionClock.get(type)?.status === 'Unknown') {
          this.emit({ kind: 'condition', condition: this.conditionState(type, info), previous: 'Unknown' });
        }
      }
    }
    this.refreshGauges();
  }

  /** Sources that cannot see right now, by component (for /healthz). */
  blindSources(): Map<string, { reason: string; message: string }> {
    const out = new Map<string, { reason: string; message: string }>();
    for (const down of this.blind.values()) for (const [c, v] of down) out.set(c, v);
    return out;
  }

  /** Expires ttl problems; call every few seconds. */
  tick(): void {
    const now = this.now();
    for (const p of [...this.problems.values()]) {
      if (p.recovery.kind === 'ttl' && now - p.lastSeen >= p.recovery.ttlMs) this.clear(p, 'ttl');
    }
    this.escalator.prune(now);
    // Counters of keys that went quiet are dropped, so memory follows the active set.
    for (const map of [this.thresholds, this.activations]) {
      for (const [key, c] of map) if (c.count(now) === 0 && !this.problems.has(key)) map.delete(key);
    }
  }

  /**
   * Takes over transition times that another writer (or an earlier Vigil) left on the Node, so a
   * restart does not reset the repair clock. Only adopted where the status agrees.
   */
  adoptConditions(existing: { type: ConditionType; status: string; lastTransitionTime?: string }[]): void {
    for (const c of existing) {
      const clock = this.conditionClock.get(c.type);
      if (clock && c.lastTransitionTime && clock.status === c.status) {
        clock.since = new Date(c.lastTransitionTime).toISOString();
        this.version++;
      }
    }
  }

  health(): NodeHealth {
    const conditions: ConditionState[] = [];
    for (const [type, info] of this.opts.conditions) conditions.push(this.conditionState(type, info));
    return { bootId: this.opts.bootId, conditions, warnings: this.warnings() };
  }

  snapshot(): EngineSnapshot {
    const conditions: EngineSnapshot['conditions'] = {};
    for (const [type, c] of this.conditionClock) conditions[type] = { status: c.status, lastTransitionTime: c.since };
    return {
      version: 1,
      bootId: this.opts.bootId,
      conditions,
      problems: [...this.problems.values()].map(savedProblem),
    };
  }

  private restore(s: EngineSnapshot | undefined): void {
    if (!s || s.version !== 1) return;
    if (s.bootId === this.opts.bootId) {
      // A hardware condition that a Fatal finding proved before the restart stays managed.
      for (const p of s.problems) {
        const late = this.opts.lateConditions?.get(p.condition);
        if (late && p.severity === 'Fatal' && !this.opts.conditions.has(p.condition)) this.opts.conditions.set(p.condition, late);
      }
    }
    for (const [type, c] of Object.entries(s.conditions)) {
      if (this.opts.conditions.has(type)) this.conditionClock.set(type, { status: c.status, since: c.lastTransitionTime });
    }
    if (s.bootId !== this.opts.bootId) {
      // A new boot is the repair every reason waits for; checks that still fail re-raise.
      if (s.problems.length) this.m.recovered.inc({ why: 'reboot' }, s.problems.length);
      for (const type of this.opts.conditions.keys()) this.recomputeCondition(type, true);
      return;
    }
    for (const p of s.problems) this.track({ ...p, lastEmitted: p.lastSeen, order: 0 });
    for (const type of this.opts.conditions.keys()) this.recomputeCondition(type, true);
  }

  private clear(p: ProblemState, why: 'healthy' | 'ttl' | 'reboot'): void {
    this.untrack(p);
    this.version++;
    this.m.recovered.inc({ why });
    this.emit({ kind: 'recovered', problem: publicProblem(p), why });
    if (p.severity === 'Fatal') this.recomputeCondition(p.condition);
    this.refreshGauges();
  }

  /** Adds an active problem to the indexes and the gauges (the only way one becomes active). */
  private track(p: ProblemState): void {
    p.order = this.arrivals++;
    this.problems.set(p.key, p);
    this.m.active.inc({ condition: p.condition, severity: p.severity });
    if (p.severity !== 'Fatal') return;
    let list = this.fatal.get(p.condition);
    if (!list) this.fatal.set(p.condition, (list = []));
    // Findings mostly arrive in time order: an append. An older one (a replayed record) is placed.
    const last = list[list.length - 1];
    if (!last || !olderThan(p, last)) list.push(p);
    else list.splice(this.fatalIndex(list, p), 0, p);
  }

  private untrack(p: ProblemState): void {
    this.problems.delete(p.key);
    this.m.active.dec({ condition: p.condition, severity: p.severity });
    const list = p.severity === 'Fatal' ? this.fatal.get(p.condition) : undefined;
    if (!list) return;
    const i = this.fatalIndex(list, p);
    if (list[i] === p) list.splice(i, 1);
    if (list.length === 0) this.fatal.delete(p.condition);
  }

  /** Where p is, or belongs, in a list ordered by (firstSeen, arrival): a binary search. */
  private fatalIndex(list: ProblemState[], p: ProblemState): number {
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (olderThan(list[mid], p)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** healthy, faulty (a Fatal problem is active) or unknown (a source cannot see, no fault known). */
  private stateOf(type: ConditionType): 'healthy' | 'faulty' | 'unknown' {
    if (this.fatal.get(type)?.length) return 'faulty';
    return this.blind.get(type)?.size ? 'unknown' : 'healthy';
  }

  private statusOf(type: ConditionType): ConditionStatus {
    const state = this.stateOf(type);
    if (state === 'unknown') return 'Unknown';
    const info = this.opts.conditions.get(type) ?? this.opts.lateConditions?.get(type);
    const problemTrue = info?.polarity === 'problemTrue';
    return (state === 'faulty') === problemTrue ? 'True' : 'False';
  }

  /** Returns whether the status changed. */
  private recomputeCondition(type: ConditionType, quiet = false): boolean {
    const info = this.opts.conditions.get(type);
    if (!info) return false; // e.g. a GPU fault on a node where AcceleratedHardwareReady is not managed
    const status = this.statusOf(type);
    const clock = this.conditionClock.get(type);
    if (clock && clock.status === status) return false;
    const previous = clock?.status ?? 'Unknown';
    this.conditionClock.set(type, { status, since: this.iso() });
    this.version++;
    if (!quiet) this.emit({ kind: 'condition', condition: this.conditionState(type, info), previous });
    return true;
  }

  /** Lets the engine manage a condition type it learned about late (e.g. a GPU proved present). */
  manageCondition(type: ConditionType, info: ConditionInfo): void {
    if (this.opts.conditions.has(type)) return;
    this.opts.conditions.set(type, info);
    this.conditionClock.set(type, { status: this.statusOf(type), since: this.iso() });
    this.version++;
    this.emit({ kind: 'condition', condition: this.conditionState(type, info), previous: 'Unknown' });
  }

  /**
   * One condition as sinks see it. `lazyActive`: the list of active problems is built when first
   * read (listeners get this on every event and rarely read it; building it is O(problems)).
   */
  private conditionState(type: ConditionType, info: ConditionInfo, lazyActive = false): ConditionState {
    const active = this.fatal.get(type) ?? [];
    const clock = this.conditionClock.get(type)!;
    const problemTrue = info.polarity === 'problemTrue';
    if (active.length === 0) {
      const down = [...(this.blind.get(type)?.values() ?? [])];
      if (down.length > 0) {
        return {
          type,
          name: info.name,
          status: 'Unknown',
          reason: down[0].reason,
          message: bounded(down.map((d) => d.message).join('; ')),
          lastTransitionTime: clock.since,
          active: [],
        };
      }
      return {
        type,
        name: info.name,
        status: problemTrue ? 'False' : 'True',
        reason: info.healthyReason,
        message: info.healthyMessage,
        lastTransitionTime: clock.since,
        active: [],
      };
    }
    // The oldest problems fill the bounded message; later ones would be cut off anyway.
    let message = '';
    for (const p of active) {
      message += `${message ? '; ' : ''}${p.reason}${p.entity ? ` on ${p.entity}` : ''}: ${p.message}`;
      if (message.length > MAX_MESSAGE) break;
    }
    const state: Omit<ConditionState, 'active'> = {
      type,
      name: info.name,
      status: problemTrue ? 'True' : 'False',
      reason: active[0].reason,
      message: bounded(message),
      lastTransitionTime: clock.since,
    };
    if (!lazyActive) return { ...state, active: active.map(publicProblem) };
    let list: ActiveProblem[] | undefined;
    return Object.defineProperty(state, 'active', { enumerable: true, get: () => (list ??= active.map(publicProblem)) }) as ConditionState;
  }

  private passesThreshold(key: string, t: { count: number; windowMs: number }, at: number): boolean {
    const c = this.counterFor(this.thresholds, key, t.windowMs, t.count);
    c.add(at);
    return c.count(at) >= t.count;
  }

  private isFlapping(key: string, at: number): boolean {
    const c = this.activations.get(key);
    return c !== undefined && c.count(at) > this.flap.maxActivations;
  }

  private counterFor(map: Map<string, SlidingCounter>, key: string, windowMs: number, cap: number): SlidingCounter {
    let c = map.get(key);
    if (!c) {
      c = new SlidingCounter(windowMs, cap);
      map.set(key, c);
    }
    return c;
  }

  private emitDrop(f: Finding, why: string): void {
    const warning: EmittedFinding = {
      ...f,
      reason: f.reason,
      severity: 'Info',
      condition: 'KernelReady',
      action: 'none',
      count: 0,
      message: `dropped finding (${why}): ${f.message}`,
    };
    this.emit({ kind: 'finding', finding: warning });
  }

  private emit(event: EngineEvent): void {
    // Repeats change no condition; reuse the last view so a storm of them stays cheap.
    if (event.kind !== 'repeat' || !this.lastView) this.lastView = this.view();
    for (const l of this.listeners) l(event, this.lastView);
  }

  /**
   * The health handed to listeners with each event: its parts are built when first read, so an
   * event costs the same however many problems are active (a sink reading `warnings` or `active`
   * on every event pays for them). Read it during the call: it shows the engine's state then.
   */
  private view(): NodeHealth {
    let conditions: ConditionState[] | undefined;
    let warnings: ActiveProblem[] | undefined;
    return Object.defineProperties({ bootId: this.opts.bootId } as NodeHealth, {
      conditions: {
        enumerable: true,
        get: () => (conditions ??= [...this.opts.conditions].map(([type, info]) => this.conditionState(type, info, true))),
      },
      warnings: { enumerable: true, get: () => (warnings ??= this.warnings()) },
    });
  }

  private warnings(): ActiveProblem[] {
    const out: ActiveProblem[] = [];
    for (const p of this.problems.values()) if (p.severity !== 'Fatal') out.push(publicProblem(p));
    return out;
  }

  /** The condition gauges; the active-problem gauge follows track() and untrack(). */
  private refreshGauges(): void {
    for (const [type, info] of this.opts.conditions) {
      const state = this.stateOf(type);
      this.m.conditionStatus.set({ condition: info.name }, state === 'healthy' ? 1 : state === 'faulty' ? 0 : -1);
    }
  }

  private iso(): string {
    // Kubernetes stores condition times with second precision; match it so adoption round-trips.
    return new Date(Math.floor(this.now() / 1000) * 1000).toISOString().replace('.000Z', 'Z');
  }
}

const MAX_MESSAGE = 1024;

function bounded(message: string): string {
  return message.length > MAX_MESSAGE ? `${message.slice(0, MAX_MESSAGE - 3)}...` : message;
}

/** Order of a condition's Fatal problems: first seen, then arrival. */
function olderThan(a: ProblemState, b: ProblemState): boolean {
  return a.firstSeen < b.firstSeen || (a.firstSeen === b.firstSeen && a.order < b.order);
}

/**
 * A copy of a problem without the engine's bookkeeping. Built field by field: copies made with
 * spreads are several times slower, and every state save copies every problem.
 */
function publicProblem(p: ActiveProblem): ActiveProblem {
  const out: ActiveProblem = {
    key: p.key,
    reason: p.reason,
    severity: p.severity,
    condition: p.condition,
    entity: p.entity,
    message: p.message,
    firstSeen: p.firstSeen,
    lastSeen: p.lastSeen,
    count: p.count,
  };
  if (p.attrs) out.attrs = p.attrs;
  return out;
}

/** What a restart needs of a problem. */
function savedProblem(p: ProblemState): EngineSnapshot['problems'][number] {
  const out = publicProblem(p) as EngineSnapshot['problems'][number];
  out.recovery = p.recovery;
  out.action = p.action;
  out.healthyStreak = p.healthyStreak;
  return out;
}

function engineMetrics(registry: Registry | undefined) {
  const registers = registry ? [registry] : [];
  return {
    findings: new Counter({
      name: 'vigil_findings_total',
      help: 'Findings accepted by the engine, by reason and severity.',
      labelNames: ['reason', 'severity', 'condition'],
      registers,
    }),
    suppressed: new Counter({
      name: 'vigil_findings_suppressed_total',
      help: 'Findings counted but not re-emitted (duplicate, below_threshold, flapping).',
      labelNames: ['why'],
      registers,
    }),
    dropped: new Counter({
      name: 'vigil_findings_dropped_total',
      help: 'Findings dropped (unknown_reason, queue_full).',
      labelNames: ['why'],
      registers,
    }),
    recovered: new Counter({
      name: 'vigil_problems_recovered_total',
      help: 'Active problems cleared, by why (healthy, ttl, reboot).',
      labelNames: ['why'],
      registers,
    }),
    conditionStatus: new Gauge({
      name: 'vigil_condition_status',
      help: '1 while the condition is healthy, 0 while a Fatal problem is active, -1 while Unknown (a source cannot see).',
      labelNames: ['condition'],
      registers,
    }),
    active: new Gauge({
      name: 'vigil_active_problems',
      help: 'Active problems by condition and severity.',
      labelNames: ['condition', 'severity'],
      registers,
    }),
  };
}
