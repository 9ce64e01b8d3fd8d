/**
 * What a polled monitor folder exports: one module object saying where its settings live, what
 * it watches and how its checks are made. `registry.ts` lists them; the configuration schema, the
 * host checks and which condition goes Unknown when a check cannot run all come from that list.
 */
import type { z } from 'zod';
import type { ConditionType } from '../api/types.ts';
import type { UnknownReasonName } from '../catalog/index.ts';
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

/** Declares a polled monitor; the names of its checks must start with `<name>.`. */
export function polledMonitor<Name extends string, Schema extends z.ZodType<Switchable>>(
  m: PolledMonitorModule<Name, Schema>,
): RegisteredPolledMonitor<Name, Schema> {
  return {
    ...m,
    checksFrom: (sections, deps) => {
      // The section under this module's name was produced by this module's schema (registry.ts
      // assembles `monitors` from the modules), so it has the schema's output type.
      const section = sections[m.name] as z.output<Schema>;
      if (!section.enabled) return [];
      const checks = m.create(section, deps);
      for (const c of checks) if (!c.name.startsWith(`${m.name}.`)) throw new Error(`check ${c.name} is not named ${m.name}.<check>`);
      return checks;
    },
  };
}
