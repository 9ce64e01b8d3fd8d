/**
 * Vigil's internal contract: the shapes that flow from sources through monitors and the engine to
 * sinks. Types only, no runtime code of its own (CONDITION_TYPES is the generated list, re-exported),
 * so every layer can import it without pulling in another.
 */
import type { BuiltinConditionType, ReasonName, UnknownReasonName } from '../catalog/reasons.generated.ts';

/** Fatal sets its condition False; Warning becomes an Event; Info is a metric/log line only. */
export type Severity = 'Fatal' | 'Warning' | 'Info';

/** The built-in condition types, generated from catalog/reasons.yaml (its `conditions`). */
export type { BuiltinConditionType };

/**
 * A condition type. The built-ins are managed by default; NPD-style configurations may declare
 * more (e.g. `KernelDeadlock`), which is why this stays open.
 */
export type ConditionType = BuiltinConditionType | (string & {});

/** The built-in condition types in catalog order (generated; re-exported here for every layer). */
export { CONDITION_TYPES } from '../catalog/reasons.generated.ts';

/** What an operator or repair engine should do about a reason. */
export type RecommendedAction = 'none' | 'restartApp' | 'resetGPU' | 'reboot' | 'replace';

/** How an active reason clears. */
export type Recovery = { kind: 'untilReboot' } | { kind: 'whenHealthy'; healthyChecks: number } | { kind: 'ttl'; ttlMs: number };

/** Where a finding came from. Used for metrics labels, so the set is bounded. */
export type SourceName = 'kmsg' | 'nvml' | 'dcgm' | 'sysfs' | 'procfs' | 'journald' | 'exec' | 'file' | 'engine';

/** The thing a finding is about (a GPU, a block device, an interface); '' for the node itself. */
export type Entity = string;

/**
 * A reason named by configuration (a user rule, an NPD file, an escalation), not by the catalog:
 * the type checker cannot know it, so it is declared apart from ReasonName and made only by
 * ruleReason() where configuration is read. Built-in code uses ReasonName, so a misspelt
 * built-in reason does not compile.
 */
export type RuleReasonName = string & { readonly __ruleReason: true };

/** Either kind of reason a finding can carry. */
export type AnyReasonName = ReasonName | RuleReasonName;

/**
 * One observation of a problem, as produced by a monitor. The engine looks up severity,
 * condition and recovery in the catalog unless the finding overrides them (user rules do).
 */
export interface Finding {
  reason: AnyReasonName;
  message: string;
  source: SourceName;
  entity: Entity;
  /** Wall-clock time of the observation, ms since the epoch. */
  at: number;
  /** Structured details (Xid, pid, PCI address, GPU UUID...). */
  attrs?: Record<string, string | number | boolean>;
  /** Overrides for reasons defined outside the built-in catalog (user and NPD rules). */
  severity?: Severity;
  condition?: ConditionType;
  recovery?: Recovery;
  /** Raise only once `count` findings with the same key arrive within `windowMs`. */
  threshold?: { count: number; windowMs: number };
}

/** A finding from Vigil's own monitors: its reason is a catalog reason. */
export interface BuiltinFinding extends Finding {
  reason: ReasonName;
}

/**
 * A check ran and found (reason, entity) healthy. Clears `whenHealthy` reasons after the
 * catalog's number of consecutive healthy checks. An empty entity list means "every entity".
 */
export interface HealthySignal {
  reasons: readonly AnyReasonName[];
  entity?: Entity;
  source: SourceName;
  at: number;
}

/** A NodeCondition's status. Unknown: the source that watches it cannot see. */
export type ConditionStatus = 'True' | 'False' | 'Unknown';

/** One Vigil condition as the sinks see it. */
export interface ConditionState {
  type: ConditionType;
  /** The name written to Kubernetes (condition type names are configurable). */
  name: string;
  status: ConditionStatus;
  reason: string;
  message: string;
  lastTransitionTime: string;
  active: ActiveProblem[];
}

/** One active reason in the engine's state. */
export interface ActiveProblem {
  key: string;
  reason: string;
  severity: Severity;
  condition: ConditionType;
  entity: Entity;
  message: string;
  firstSeen: number;
  lastSeen: number;
  count: number;
  attrs?: Record<string, string | number | boolean>;
}

/** The whole node health view, as served on /conditions and written to Kubernetes. */
export interface NodeHealth {
  bootId: string;
  conditions: ConditionState[];
  warnings: ActiveProblem[];
}

/** A finding that passed dedup and thresholds, with its catalog facts resolved. */
export interface EmittedFinding extends Finding {
  severity: Severity;
  condition: ConditionType;
  action: RecommendedAction;
  /** How many times this key has been seen (including suppressed repeats). */
  count: number;
}

/** Something the engine says out loud: a finding to report, or a condition status change. */
export type EngineEvent =
  | { kind: 'finding'; finding: EmittedFinding }
  | { kind: 'condition'; condition: ConditionState; previous: 'True' | 'False' | 'Unknown' }
  | { kind: 'recovered'; problem: ActiveProblem; why: 'healthy' | 'ttl' | 'reboot' }
  /** A repeat of an active problem that was not re-emitted (Event series count it). */
  | { kind: 'repeat'; problem: ActiveProblem };

/** An engine event with the view the engine published it with, as a sink's handle() receives them. */
export interface Published {
  event: EngineEvent;
  health: NodeHealth;
}

/** A consumer of engine output: logs, Prometheus, Kubernetes. */
export interface Sink {
  readonly name: string;
  /** Called for each engine event, synchronously; sinks queue their own I/O. */
  handle(event: EngineEvent, health: NodeHealth): void;
  close?(): Promise<void>;
  /**
   * Runs these events (a throwaway engine's, from a synthetic fault) through throwaway copies of
   * the sink's parts, with no effect anywhere: V8 compiles a function on its first call, which a
   * fresh agent's first fault would otherwise pay for on its way to the API server.
   */
  warm?(published: readonly Published[]): void;
}

/** A producer of findings (a push source plus its monitor, or a polled check). */
export interface Monitor {
  readonly name: string;
  start(out: FindingSink): Promise<void> | void;
  stop(): Promise<void> | void;
  /**
   * For /healthz: ok, degraded (works but lost something), failed (cannot see), or off (not
   * configured, e.g. no NVIDIA GPU), with a message naming why. 'ok' when absent.
   */
  status?(): { state: 'ok' | 'degraded' | 'failed' | 'off'; message: string };
  /**
   * Compiles what the monitor's first real record will run (its regular expressions are compiled
   * per object on first use), with no finding, state change or output.
   */
  warm?(): void;
}

/** The handle a monitor publishes through. */
export interface FindingSink {
  finding(f: Finding): void;
  healthy(h: HealthySignal): void;
  /**
   * Whether a source can see. While `up` is false its conditions read Unknown (unless a Fatal
   * problem is already known) with `reason`, and /healthz fails. `component` names the source on
   * /healthz and in logs ('kernel-log', 'gpu', 'host.storage'...).
   */
  source(s: SourceReport): void;
}

export interface SourceReport {
  component: string;
  /** Condition types this source watches. */
  conditions: readonly ConditionType[];
  up: boolean;
  /** Required when down: the catalog's unknown reason. */
  reason?: UnknownReasonName;
  /** Why it cannot see, naming the cause (e.g. "open /dev/kmsg: EPERM (not root)"). */
  message?: string;
  at: number;
}
