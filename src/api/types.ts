/**
 * Vigil's internal contract: the shapes that flow from sources through monitors and the engine to
 * sinks. Types only, no runtime code, so every layer can import it without pulling in another.
 */

/** Fatal sets its condition False; Warning becomes an Event; Info is a metric/log line only. */
export type Severity = 'Fatal' | 'Warning' | 'Info';

/** Default condition types (Karpenter's AWS repair policies and EKS node auto repair act on these). */
export type BuiltinConditionType =
  'KernelReady' | 'NetworkingReady' | 'StorageReady' | 'ContainerRuntimeReady' | 'AcceleratedHardwareReady';

/**
 * A condition type. The five built-ins are managed by default; NPD-style configurations may
 * declare more (e.g. `KernelDeadlock`), which is why this stays open.
 */
export type ConditionType = BuiltinConditionType | (string & {});

export const CONDITION_TYPES: readonly BuiltinConditionType[] = [
  'KernelReady',
  'NetworkingReady',
  'StorageReady',
  'ContainerRuntimeReady',
  'AcceleratedHardwareReady',
];

/** What an operator or repair engine should do about a reason. */
export type RecommendedAction = 'none' | 'restartApp' | 'resetGPU' | 'reboot' | 'replace';

/** How an active reason clears. */
export type Recovery = { kind: 'untilReboot' } | { kind: 'whenHealthy'; healthyChecks: number } | { kind: 'ttl'; ttlMs: number };

/** Where a finding came from. Used for metrics labels, so the set is bounded. */
export type SourceName = 'kmsg' | 'nvml' | 'sysfs' | 'procfs' | 'journald' | 'exec' | 'file' | 'engine';

/** The thing a finding is about (a GPU, a block device, an interface); '' for the node itself. */
export type Entity = string;

/**
 * One observation of a problem, as produced by a monitor. The engine looks up severity,
 * condition and recovery in the catalog unless the finding overrides them (user rules do).
 */
export interface Finding {
  reason: string;
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

/**
 * A check ran and found (reason, entity) healthy. Clears `whenHealthy` reasons after the
 * catalog's number of consecutive healthy checks. An empty entity list means "every entity".
 */
export interface HealthySignal {
  reasons: readonly string[];
  entity?: Entity;
  source: SourceName;
  at: number;
}

/** One Vigil condition as the sinks see it. */
export interface ConditionState {
  type: ConditionType;
  /** The name written to Kubernetes (condition type names are configurable). */
  name: string;
  status: 'True' | 'False';
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

/** A consumer of engine output: logs, Prometheus, Kubernetes. */
export interface Sink {
  readonly name: string;
  /** Called for each engine event, synchronously; sinks queue their own I/O. */
  handle(event: EngineEvent, health: NodeHealth): void;
  close?(): Promise<void>;
}

/** A producer of findings (a push source plus its monitor, or a polled check). */
export interface Monitor {
  readonly name: string;
  start(out: FindingSink): Promise<void> | void;
  stop(): Promise<void> | void;
  /** A short word for /healthz (e.g. 'ok', 'off: no NVIDIA GPU'); 'ok' when absent. */
  status?(): string;
}

/** The handle a monitor publishes through. */
export interface FindingSink {
  finding(f: Finding): void;
  healthy(h: HealthySignal): void;
}
