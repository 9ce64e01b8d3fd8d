/**
 * The engine turns findings into node health: per-(condition, reason, entity) state with dedup,
 * thresholds, escalation, flap damping and recovery as the catalog says. It is pure apart from
 * the injected clock: no I/O, no timers (the caller drives `tick()`), so tests replay it exactly.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type {
  ActiveProblem,
  ConditionState,
  ConditionType,
  EmittedFinding,
  EngineEvent,
  Finding,
  HealthySignal,
  NodeHealth,
  RecommendedAction,
  Recovery,
  Severity,
} from '../api/types.ts';
import { lookupReason } from '../catalog/index.ts';
import { Escalator, type EscalationRule } from './escalation.ts';
import { SlidingCounter } from './sliding-counter.ts';

export interface ConditionInfo {
  /** Name written to Kubernetes (condition type names are configurable). */
  name: string;
  healthyReason: string;
  healthyMessage: string;
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
}

/** What survives a restart: the conditions' clocks and the active problems. */
export interface EngineSnapshot {
  version: 1;
  bootId: string;
  conditions: Record<string, { status: 'True' | 'False'; lastTransitionTime: string }>;
  problems: (ActiveProblem & { recovery: Recovery; action: RecommendedAction; healthyStreak: number })[];
}

type Listener = (event: EngineEvent, health: NodeHealth) => void;

export class Engine {
  private readonly now: () => number;
  private readonly problems = new Map<string, ProblemState>();
  private readonly conditionClock = new Map<ConditionType, { status: 'True' | 'False'; since: string }>();
  private readonly thresholds = new Map<string, SlidingCounter>();
  private readonly activations = new Map<string, SlidingCounter>();
  private readonly escalator: Escalator;
  private readonly listeners: Listener[] = [];
  private readonly repeatWindowMs: number;
  private readonly flap: { maxActivations: number; windowMs: number };
  private readonly m: ReturnType<typeof engineMetrics>;
  private version = 0;
  private lastHealth: NodeHealth | undefined;

  constructor(private readonly opts: EngineOptions) {
    this.now = opts.now ?? Date.now;
    this.repeatWindowMs = opts.repeatWindowMs ?? 60_000;
    this.flap = opts.flap ?? { maxActivations: 4, windowMs: 30 * 60_000 };
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
        ...(f.attrs ? { attrs: { ...f.attrs } } : {}),
      };
      this.problems.set(key, p);
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
    const wanted = new Set(h.reasons);
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
    const warnings = [...this.problems.values()].filter((p) => p.severity !== 'Fatal').map(publicProblem);
    return { bootId: this.opts.bootId, conditions, warnings };
  }

  snapshot(): EngineSnapshot {
    const conditions: EngineSnapshot['conditions'] = {};
    for (const [type, c] of this.conditionClock) conditions[type] = { status: c.status, lastTransitionTime: c.since };
    return {
      version: 1,
      bootId: this.opts.bootId,
      conditions,
      problems: [...this.problems.values()].map((p) => ({
        ...publicProblem(p),
        recovery: p.recovery,
        action: p.action,
        healthyStreak: p.healthyStreak,
      })),
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
      for (const p of s.problems) this.m.recovered.inc({ why: 'reboot' });
      for (const type of this.opts.conditions.keys()) this.recomputeCondition(type, true);
      return;
    }
    for (const p of s.problems) {
      this.problems.set(p.key, { ...p, lastEmitted: p.lastSeen });
    }
    for (const type of this.opts.conditions.keys()) this.recomputeCondition(type, true);
  }

  private clear(p: ProblemState, why: 'healthy' | 'ttl' | 'reboot'): void {
    this.problems.delete(p.key);
    this.version++;
    this.m.recovered.inc({ why });
    this.emit({ kind: 'recovered', problem: publicProblem(p), why });
    if (p.severity === 'Fatal') this.recomputeCondition(p.condition);
    this.refreshGauges();
  }

  private statusOf(type: ConditionType): 'True' | 'False' {
    for (const p of this.problems.values()) if (p.condition === type && p.severity === 'Fatal') return 'False';
    return 'True';
  }

  private recomputeCondition(type: ConditionType, quiet = false): void {
    const info = this.opts.conditions.get(type);
    if (!info) return; // e.g. a GPU fault on a node where AcceleratedHardwareReady is not managed
    const status = this.statusOf(type);
    const clock = this.conditionClock.get(type);
    if (clock && clock.status === status) return;
    const previous = clock?.status ?? 'Unknown';
    this.conditionClock.set(type, { status, since: this.iso() });
    this.version++;
    if (!quiet) this.emit({ kind: 'condition', condition: this.conditionState(type, info), previous });
  }

  /** Lets the engine manage a condition type it learned about late (e.g. a GPU proved present). */
  manageCondition(type: ConditionType, info: ConditionInfo): void {
    if (this.opts.conditions.has(type)) return;
    this.opts.conditions.set(type, info);
    this.conditionClock.set(type, { status: this.statusOf(type), since: this.iso() });
    this.version++;
    this.emit({ kind: 'condition', condition: this.conditionState(type, info), previous: 'Unknown' });
  }

  private conditionState(type: ConditionType, info: ConditionInfo): ConditionState {
    const active = [...this.problems.values()]
      .filter((p) => p.condition === type && p.severity === 'Fatal')
      .sort((a, b) => a.firstSeen - b.firstSeen);
    const clock = this.conditionClock.get(type)!;
    if (active.length === 0) {
      return {
        type,
        name: info.name,
        status: 'True',
        reason: info.healthyReason,
        message: info.healthyMessage,
        lastTransitionTime: clock.since,
        active: [],
      };
    }
    const message = active.map((p) => `${p.reason}${p.entity ? ` on ${p.entity}` : ''}: ${p.message}`).join('; ');
    return {
      type,
      name: info.name,
      status: 'False',
      reason: active[0].reason,
      message: message.length > 1024 ? `${message.slice(0, 1021)}...` : message,
      lastTransitionTime: clock.since,
      active: active.map(publicProblem),
    };
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
    const health = event.kind === 'repeat' && this.lastHealth ? this.lastHealth : (this.lastHealth = this.health());
    for (const l of this.listeners) l(event, health);
  }

  private refreshGauges(): void {
    for (const [type, info] of this.opts.conditions) {
      this.m.conditionStatus.set({ condition: info.name }, this.statusOf(type) === 'True' ? 1 : 0);
    }
    this.m.active.reset();
    for (const p of this.problems.values()) this.m.active.inc({ condition: p.condition, severity: p.severity });
  }

  private iso(): string {
    // Kubernetes stores condition times with second precision; match it so adoption round-trips.
    return new Date(Math.floor(this.now() / 1000) * 1000).toISOString().replace('.000Z', 'Z');
  }
}

function publicProblem(p: ActiveProblem): ActiveProblem {
  const { key, reason, severity, condition, entity, message, firstSeen, lastSeen, count, attrs } = p;
  return { key, reason, severity, condition, entity, message, firstSeen, lastSeen, count, ...(attrs ? { attrs } : {}) };
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
      help: '1 while the condition is True (healthy), 0 while False.',
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
