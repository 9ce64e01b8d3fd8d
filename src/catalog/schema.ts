/**
 * Schema of catalog/reasons.yaml. Shared by the generator (which validates the YAML) and by the
 * runtime catalog (which reads the generated data), so both agree on one shape.
 */
import * as z from 'zod';
import { parseDuration } from '../util/duration.ts';

export const recoveryYaml = z.union([
  z.literal('untilReboot'),
  z.strictObject({ whenHealthy: z.number().int().min(1) }),
  z.strictObject({ ttl: z.string().refine((s) => parseDuration(s) !== undefined, 'a duration such as 30s, 10m or 1h') }),
]);

export const reasonYaml = z.strictObject({
  condition: z.string().regex(/^[A-Z][A-Za-z]+$/),
  severity: z.enum(['Fatal', 'Warning', 'Info']),
  recovery: recoveryYaml,
  action: z.enum(['none', 'restartApp', 'resetGPU', 'reboot', 'replace']),
  sources: z.array(z.enum(['kmsg', 'nvml', 'sysfs', 'procfs', 'journald', 'exec', 'engine'])).min(1),
  eks: z.boolean().optional(),
  template: z.record(z.string(), z.enum(['xid', 'sxid', 'unit'])).optional(),
  description: z.string().min(10),
});

/** The Xid decision's data (src/monitors/xid/policy.ts reads it through the generated XID_POLICY). */
export const xidPolicyYaml = z.strictObject({
  fatal: z.array(z.number().int().min(1)).min(1),
  recoveryActions: z.record(z.string().regex(/^\d+$/), z.string().min(1)),
  recoveryActionsFatal: z.array(z.number().int().min(0)),
  severityInLine: z.strictObject({ first: z.number().int().min(1), last: z.number().int().min(1) }),
  recoveryActionXid: z.number().int().min(1),
});

export const catalogYaml = z.strictObject({
  conditions: z.record(z.string(), z.strictObject({ healthyReason: z.string(), healthyMessage: z.string() })),
  unknownReasons: z.record(z.string(), z.strictObject({ condition: z.string(), description: z.string().min(10) })),
  /** Where a reason depends on policy: the rule in one sentence, per family (rendered into docs/reasons.md). */
  policies: z.record(z.string(), z.string().min(10)).optional(),
  xidPolicy: xidPolicyYaml,
  reasons: z.record(z.string(), reasonYaml),
});

export type CatalogYaml = z.infer<typeof catalogYaml>;
export type ReasonYaml = z.infer<typeof reasonYaml>;
