/**
 * Operator-defined kernel-log rules, from YAML:
 *
 *   rules:
 *     - name: mlx5-fatal                 # optional; used in errors and attrs
 *       pattern: 'mlx5_core (?<pci>\S+): .*Fatal'   # RE2 syntax (linear time)
 *       flags: i                         # optional flags (i, m, s, u)
 *       contains: mlx5_core              # optional cheap guard(s) tried before the regex
 *       reason: Mlx5Fatal
 *       severity: Fatal                  # Fatal | Warning | Info
 *       condition: NetworkingReady
 *       recovery: untilReboot            # untilReboot | {whenHealthy: N} | {ttl: 30m}
 *       entity: 'pci:{pci}'              # optional; {name} / {1} take capture groups
 *       message: 'mlx5 fatal on {pci}'   # optional; the log text is appended
 *       threshold: {count: 3, window: 10m}   # optional: raise at 3 within 10 minutes
 *
 * A top-level list works too. Severity and condition may be left out only for reasons the catalog
 * defines. Every error names the file, the rule (index and name) and the field.
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import * as z from 'zod';
import type { ConditionType, Recovery, RuleReasonName, Severity } from '../../api/types.ts';
import { lookupReason, ruleReason } from '../../catalog/index.ts';
import { durationValue, positiveDurationValue } from '../../config/index.ts';
import { UserRegex } from '../../config/regex.ts';
import { errorMessage, VigilError } from '../../util/errors.ts';

/** A validated, compiled user rule. */
export interface UserRule {
  name: string;
  file: string;
  re: UserRegex;
  contains?: readonly string[];
  reason: RuleReasonName;
  severity?: Severity;
  condition?: ConditionType;
  recovery?: Recovery;
  entity?: string;
  message?: string;
  threshold?: { count: number; windowMs: number };
}

const ruleSchema = z.strictObject({
  name: z.string().min(1).optional(),
  pattern: z.string().min(1),
  flags: z
    .string()
    .regex(/^[imsu]*$/, 'only the flags i, m, s and u are allowed')
    .optional(),
  contains: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]).optional(),
  reason: z.string().regex(/^[A-Z][A-Za-z0-9]*$/, 'expected a PascalCase reason such as Mlx5Fatal'),
  severity: z.enum(['Fatal', 'Warning', 'Info']).optional(),
  condition: z
    .string()
    .regex(/^[A-Z][A-Za-z0-9]*$/, 'expected a condition type such as KernelReady')
    .optional(),
  recovery: z
    .union([z.literal('untilReboot'), z.strictObject({ whenHealthy: z.number().int().min(1) }), z.strictObject({ ttl: durationValue })])
    .optional(),
  entity: z.string().optional(),
  message: z.string().optional(),
  threshold: z.strictObject({ count: z.number().int().min(1), window: positiveDurationValue }).optional(),
});

type RawRule = z.infer<typeof ruleSchema>;

/** Parses and validates the YAML text of a user rule file. Throws with file, rule and field named. */
export function parseUserRules(text: string, file: string): UserRule[] {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new VigilError('VIGIL_E_USER_RULE', `${file}: invalid YAML: ${errorMessage(err)}`, { cause: err });
  }
  if (doc === null || doc === undefined) return [];
  let list: unknown;
  if (Array.isArray(doc)) list = doc;
  else if (typeof doc === 'object' && Object.keys(doc).every((k) => k === 'rules')) list = (doc as { rules?: unknown }).rules ?? [];
  else throw new VigilError('VIGIL_E_USER_RULE', `${file}: expected a list of rules or an object with only the key "rules"`);
  if (!Array.isArray(list)) throw new VigilError('VIGIL_E_USER_RULE', `${file}: field "rules": expected a list`);
  return list.map((raw, i) => compileRule(raw, i, file));
}

/** Reads and parses a user rule file. */
export function loadUserRules(file: string): UserRule[] {
  return parseUserRules(readFileSync(file, 'utf8'), file);
}

function compileRule(raw: unknown, i: number, file: string): UserRule {
  const label = (name?: unknown) => `${file}: rule ${i}${typeof name === 'string' && name ? ` (${name})` : ''}`;
  const r = ruleSchema.safeParse(raw);
  if (!r.success) {
    const issue = r.error.issues[0];
    const name = raw && typeof raw === 'object' ? (raw as { name?: unknown }).name : undefined;
    if (issue.code === 'unrecognized_keys') {
      const at = issue.path.length ? `${issue.path.join('.')}.` : '';
      throw new VigilError(
        'VIGIL_E_USER_RULE',
        `${label(name)}: unknown field${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => `"${at}${k}"`).join(', ')}`,
      );
    }
    if (issue.path.length === 0)
      throw new VigilError('VIGIL_E_USER_RULE', `${label(name)}: expected a mapping with at least "pattern" and "reason"`);
    throw new VigilError('VIGIL_E_USER_RULE', `${label(name)}: field "${issue.path.join('.')}": ${issue.message}`);
  }
  const d: RawRule = r.data;
  const where = label(d.name);
  // RE2: one line costs linear time whatever the pattern, so no rule can stall the agent.
  let re: UserRegex;
  try {
    re = UserRegex.compile(d.pattern, d.flags ?? '', { native: true });
  } catch (err) {
    throw new VigilError('VIGIL_E_USER_RULE', `${where}: field "pattern": ${errorMessage(err)}`, { cause: err });
  }
  const known = lookupReason(d.reason);
  if (!known && !d.severity)
    throw new VigilError('VIGIL_E_USER_RULE', `${where}: field "severity": required because reason ${d.reason} is not in the catalog`);
  if (!known && !d.condition)
    throw new VigilError('VIGIL_E_USER_RULE', `${where}: field "condition": required because reason ${d.reason} is not in the catalog`);
  const rule: UserRule = { name: d.name ?? `rule-${i}`, file, re, reason: ruleReason(d.reason) };
  if (d.contains !== undefined) rule.contains = typeof d.contains === 'string' ? [d.contains] : d.contains;
  if (d.severity) rule.severity = d.severity;
  if (d.condition) rule.condition = d.condition;
  const recovery = toRecovery(d.recovery) ?? (known ? undefined : defaultRecovery(d.severity!));
  if (recovery) rule.recovery = recovery;
  if (d.entity !== undefined) rule.entity = d.entity;
  if (d.message !== undefined) rule.message = d.message;
  if (d.threshold) rule.threshold = { count: d.threshold.count, windowMs: d.threshold.window };
  return rule;
}

function toRecovery(r: RawRule['recovery']): Recovery | undefined {
  if (r === undefined) return undefined;
  if (r === 'untilReboot') return { kind: 'untilReboot' };
  if ('whenHealthy' in r) return { kind: 'whenHealthy', healthyChecks: r.whenHealthy };
  return { kind: 'ttl', ttlMs: r.ttl };
}

/** For reasons outside the catalog: Fatal lasts until reboot, anything else for an hour. */
function defaultRecovery(sev: Severity): Recovery {
  return sev === 'Fatal' ? { kind: 'untilReboot' } : { kind: 'ttl', ttlMs: 3_600_000 };
}

/** Fills `{name}` / `{1}` from the match's capture groups (missing ones become empty). */
export function fillGroups(template: string, m: RegExpExecArray | null): string {
  return template.replace(/\{(\w+)\}/g, (_all, key: string) => {
    const v = /^\d+$/.test(key) ? m?.[Number(key)] : m?.groups?.[key];
    return v ?? '';
  });
}
