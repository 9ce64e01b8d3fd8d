/**
 * Runtime view of the reason catalog: resolves a concrete reason name (including instances of
 * template reasons such as NvidiaXID48Error) to its definition.
 */
import type { RuleReasonName } from '../api/types.ts';
import {
  CONDITIONS,
  CONDITION_TYPES,
  REASONS,
  UNKNOWN_REASONS,
  XID_POLICY,
  type BuiltinConditionType,
  type ReasonDef,
  type ReasonName,
  type UnknownReasonName,
} from './reasons.generated.ts';

export { CONDITIONS, CONDITION_TYPES, REASONS, UNKNOWN_REASONS, XID_POLICY };
export type { BuiltinConditionType, ReasonDef, ReasonName, RuleReasonName, UnknownReasonName };

const exact = new Map<string, ReasonDef>();
const templates: { re: RegExp; def: ReasonDef }[] = [];
for (const def of REASONS) {
  if (!def.template) exact.set(def.name, def);
  else {
    const src = def.name.replace(/\{([a-z]+)\}/g, (_m, p: string) => (def.template![p] === 'unit' ? '([A-Z][A-Za-z0-9-]*)' : '(\\d+)'));
    templates.push({ re: new RegExp(`^${src}$`), def });
  }
}

/** The definition of a concrete reason name, or undefined when the catalog does not know it. */
export function lookupReason(name: string): ReasonDef | undefined {
  const hit = exact.get(name);
  if (hit) return hit;
  for (const t of templates) if (t.re.test(name)) return t.def;
  return undefined;
}

/** Fills a template reason: reasonName('NvidiaXID{code}Error', {code: 48}) -> 'NvidiaXID48Error'. */
export function fillTemplate(template: string, params: Record<string, string | number>): string {
  return template.replace(/\{([a-z]+)\}/g, (_m, p: string) => String(params[p]));
}

/**
 * Declares a reason named by configuration (a user rule, an NPD file, an escalation). Only code that
 * reads configuration calls this; built-in code names catalog reasons (ReasonName) directly.
 */
export function ruleReason(name: string): RuleReasonName {
  return name as RuleReasonName;
}

/** Whether a string is a catalog reason (a template instance counts), narrowing it to ReasonName. */
export function isReasonName(name: string): name is ReasonName {
  return lookupReason(name) !== undefined;
}
