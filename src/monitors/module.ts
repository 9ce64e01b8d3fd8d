/**
 * What a monitor folder exports: one module object saying where its settings live, what it
 * watches and how it is built. A polled monitor gives checks for the one work queue; a push monitor
 * (kernel log, GPU) builds a Monitor. `registry.ts` lists them; the configuration schema, the
 * monitors the agent runs and which condition goes Unknown when a source cannot see come from it.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { z } from 'zod';
import type { ConditionType, Monitor } from '../api/types.ts';
import type { UnknownReasonName } from '../catalog/index.ts';
import type { WorkQueue } from '../scheduler/work-queue.ts';
import type { KmsgCursor } from '../sources/kmsg/reader.ts';
import type { PersistedGpuBaselines } from './gpu/baselines.ts';
import type { GpuLookup } from './gpu/attribution.ts';
import type { HostCheck } from './host-check.ts';
import type { HostDeps } from './host-deps.ts';

/** A section every polled monitor has: checks run only while it is enabled. */
type Switchable = { enabled: boolean };

export interface PolledMonitorModule<Name extends string = string, Schema extends z.ZodType<Switchable> = z.ZodType<Switchable>> {
  /** Its key under `monitors` in the configuration file, and the prefix of its checks' names. */
  readonly name: Name;
  /** Its section of the configuration; every field has a default. */
  readonly schema: Schema;
  /** The condition its checks prove healthy while they run. */
  readonly condition: ConditionType;
  /** The condition's reason while one of its checks cannot run (throws, overruns its budget). */
  readonly unknownReason: UnknownReasonName;
  /** Its enabled checks, from its section; `deps` replaces syscalls, spawning, DNS and statfs in tests. */
  create(section: z.output<Schema>, deps: Partial<HostDeps>): HostCheck[];
}

/** A registered module seen from the registry: its checks from the whole `monitors` section. */
export interface RegisteredPolledMonitor<Name extends string, Schema extends z.ZodType<Switchable>> extends PolledMonitorModule<
  Name,
  Schema
> {
  /** Its checks when its section is enabled, else none. */
  checksFrom(sections: Readonly<Record<string, unknown>>, deps: Partial<HostDeps>): HostCheck[];
}

/**
 * A module's section of the parsed configuration. The configuration is parsed with a schema that
 * src/settings and registry.ts assemble from the modules' own schemas, so the value under the
 * module's key is that schema's output: the one place that says so to the type checker.
 */
function sectionOf<Schema extends z.ZodType>(_schema: Schema, sections: Readonly<Record<string, unknown>>, key: string): z.output<Schema> {
  return sections[key] as z.output<Schema>;
}

/** Declares a polled monitor; the names of its checks must start with `<name>.`. */
export function polledMonitor<Name extends string, Schema extends z.ZodType<Switchable>>(
  m: PolledMonitorModule<Name, Schema>,
): RegisteredPolledMonitor<Name, Schema> {
  return {
    ...m,
    checksFrom: (sections, deps) => {
      const section = sectionOf(m.schema, sections, m.name);
      if (!section.enabled) return [];
      const checks = m.create(section, deps);
      for (const c of checks) if (!c.name.startsWith(`${m.name}.`)) throw new Error(`check ${c.name} is not named ${m.name}.<check>`);
      return checks;
    },
  };
}

/** The one Xid policy's inputs: which Xids are Fatal, which NVML recovery actions make Xid 154 Fatal. */
export interface XidInputs {
  fatal: readonly number[];
  recoveryActionsFatal: readonly number[];
}

/** A condition type declared by configuration rather than the catalog. */
export interface DeclaredCondition {
  type: ConditionType;
  healthyReason: string;
  healthyMessage: string;
  /** problemTrue for NPD's types (False while healthy, as NPD reports them); healthyTrue for user rules'. */
  polarity: 'healthyTrue' | 'problemTrue';
}

/** The parts of the state file monitors keep (state/store.ts's PersistedState holds them). */
export interface MonitorSlots {
  kmsgCursor?: KmsgCursor;
  gpu?: PersistedGpuBaselines;
}

/** A built monitor and what the agent must know about it. */
export interface MonitorPart {
  monitor: Monitor;
  /** Condition types this monitor proves healthy while it runs (managed as True when healthy). */
  conditions: ConditionType[];
  /** Condition types declared by configuration (NPD files, user rules), managed like the built-ins. */
  extraConditions?: DeclaredCondition[];
  /**
   * What this monitor's source watches: if it cannot start (no /dev/kmsg, EPERM), these conditions
   * go Unknown with `reason`, /healthz fails, and start() is tried again with backoff
   * (config.sourceRetry) until it succeeds, so start() must be safe to call again after a throw.
   * Monitors report later blindness themselves through FindingSink.source().
   */
  blind?: { conditions: ConditionType[]; reason: UnknownReasonName };
  /** Called when state is saved: what of it survives a restart (the kmsg cursor, GPU baselines). */
  persist?: (state: MonitorSlots) => void;
  /** The GPU inventory this monitor keeps, for naming the GPU behind other findings. */
  gpus?: GpuLookup;
}

/** What the root hands every push monitor it builds. */
export interface MonitorContext {
  /** Where the host's / is mounted (`monitors.hostRoot`). */
  hostRoot: string;
  registry: Registry;
  log: Logger;
  /** The one sequential queue of polled work (at most one check at a time on the node). */
  queue: WorkQueue;
  /** What the last run saved (undefined on a first start). */
  restored: MonitorSlots | undefined;
  /** Asks for a state save soon. */
  markDirty: () => void;
  /** Manages a condition type found late (a GPU proved present). */
  manage: (type: ConditionType) => void;
  /** Retries of a source that cannot see (`sourceRetry`). */
  retry: { initialMs: number; maxMs: number };
  /** The one Xid policy's inputs (`xid.fatal`, `gpu.thresholds.recoveryActionsFatal`). */
  xid: XidInputs;
  /** The GPU inventory, once a monitor that keeps one is built (empty until then). */
  gpus: GpuLookup;
}

/** A monitor fed by a push source (the kernel log, NVML events), with a top-level section. */
export interface PushMonitorModule<Key extends string = string, Schema extends z.ZodType<Switchable> = z.ZodType<Switchable>> {
  /** Its top-level key in the configuration file. */
  readonly key: Key;
  readonly schema: Schema;
  /** The condition types it watches. */
  readonly conditions: readonly ConditionType[];
  /** Their reason while its source cannot see. */
  readonly unknownReason: UnknownReasonName;
  /** Builds it (only while its section is enabled). */
  create(section: z.output<Schema>, ctx: MonitorContext): MonitorPart;
}

/** A registered push monitor: built from the whole configuration's sections when enabled. */
export interface RegisteredPushMonitor<Key extends string, Schema extends z.ZodType<Switchable>> extends PushMonitorModule<Key, Schema> {
  partFrom(sections: Readonly<Record<string, unknown>>, ctx: MonitorContext): MonitorPart | undefined;
}

export function pushMonitor<Key extends string, Schema extends z.ZodType<Switchable>>(
  m: PushMonitorModule<Key, Schema>,
): RegisteredPushMonitor<Key, Schema> {
  return {
    ...m,
    partFrom: (sections, ctx) => {
      const section = sectionOf(m.schema, sections, m.key);
      return section.enabled ? m.create(section, ctx) : undefined;
    },
  };
}
