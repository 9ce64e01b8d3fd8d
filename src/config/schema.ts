/**
 * The configuration file's schema. Every option has a default, so an empty file is valid; unknown
 * keys are rejected so a typo is an error rather than a silently ignored setting.
 * docs/configuration.md describes each option.
 */
import { z } from 'zod';
import { duration } from './duration.ts';
import { CONDITION_TYPES } from '../api/types.ts';
import { DEFAULT_FATAL_XIDS } from '../monitors/xid/policy.ts';

const conditionNames = z.strictObject(
  Object.fromEntries(
    CONDITION_TYPES.map((t) => [
      t,
      z
        .string()
        .regex(/^[A-Za-z][A-Za-z0-9]*$/)
        .default(t),
    ]),
  ) as Record<(typeof CONDITION_TYPES)[number], z.ZodDefault<z.ZodString>>,
);

const escalation = z.strictObject({
  match: z.string().refine(isRegex, 'not a valid regular expression'),
  count: z.number().int().min(2),
  window: duration('10m'),
  raise: z.string().min(1),
});

export const kernelLogConfig = z.strictObject({
  enabled: z.boolean().default(true),
  /** The kernel log device; tests point it elsewhere. */
  path: z.string().default('/dev/kmsg'),
  /** On a first start or a new boot, records younger than this are classified; 0 = only new ones. */
  lookback: duration('5m'),
  /** AER corrected errors on one device within `window` that raise PCIeCorrectedErrors. */
  pcieCorrected: z.strictObject({ count: z.number().int().min(1).default(20), window: duration('1h') }).prefault({}),
  /** YAML files of user rules (see docs/configuration.md). */
  userRules: z.array(z.string()).default([]),
  /** node-problem-detector system-log-monitor JSON files, loaded as they are. */
  npdConfigs: z.array(z.string()).default([]),
});

/** One Xid policy for the kernel log and NVML events, so both name a fault the same way. */
export const xidConfig = z.strictObject({
  /** Xids that raise NvidiaXID<N>Error (Fatal); every other Xid raises NvidiaXID<N>Warning. */
  fatal: z.array(z.number().int().min(1).max(1000)).default([...DEFAULT_FATAL_XIDS]),
  /** Xids that are not reported at all (counted in vigil_findings_suppressed_total{why="ignored_xid"}). */
  ignore: z.array(z.number().int().min(1).max(1000)).default([]),
});

export const engineConfig = z.strictObject({
  /** A repeat of an active problem is logged/re-emitted at most once per window; repeats are counted. */
  repeatWindow: duration('1m'),
  flap: z.strictObject({ maxActivations: z.number().int().min(1).default(4), window: duration('30m') }).prefault({}),
  escalations: z
    .array(escalation)
    .prefault([{ match: 'NvidiaXID(13|31|43)Warning', count: 5, window: '10m', raise: 'NvidiaXID$1Repeated' }]),
  /** How often ttl recovery is evaluated. */
  tick: duration('30s'),
});

export const kubernetesConfig = z.strictObject({
  /** auto: use in-cluster config or a kubeconfig when one is found; off: standalone. */
  mode: z.enum(['auto', 'on', 'off']).default('auto'),
  kubeconfig: z.string().optional(),
  /** Condition re-write period even when nothing changed; 0 disables. */
  heartbeat: duration('5m'),
  /** Changes within this window are written together (well under a second). */
  coalesce: duration('200ms').refine((ms) => ms <= 1000, 'at most 1s: repair engines should see a change at once'),
  /** Namespace for Events about the Node. */
  eventNamespace: z.string().default('default'),
  /** Events per reason per minute; more are dropped and counted. */
  eventsPerReasonPerMinute: z.number().int().min(1).default(6),
});

export const coreConfig = z.strictObject({
  nodeName: z.string().optional(),
  stateDir: z.string().default('/var/lib/vigil'),
  listen: z
    .string()
    .regex(/^[^:]*:\d+$/, 'HOST:PORT')
    .default('127.0.0.1:9464'),
  logLevel: z.enum(['trace', 'debug', 'info', 'warn', 'error']).default('info'),
  conditions: z.strictObject({ names: conditionNames.prefault({}) }).prefault({}),
  xid: xidConfig.prefault({}),
  engine: engineConfig.prefault({}),
  kernelLog: kernelLogConfig.prefault({}),
  kubernetes: kubernetesConfig.prefault({}),
});

function isRegex(s: string): boolean {
  try {
    new RegExp(s);
    return true;
  } catch {
    return false;
  }
}
