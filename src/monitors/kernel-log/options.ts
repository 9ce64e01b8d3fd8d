/** What the kernelLog section and the rule files mean for the classifier and the condition table. */
import { CONDITIONS } from '../../catalog/index.ts';
import type { DeclaredCondition, XidInputs } from '../module.ts';
import type { ClassifierOptions } from './classify.ts';
import type { KernelLogConfig } from './config.ts';
import type { NpdConfig } from './npd.ts';
import type { UserRule } from './user-rules.ts';

export type { DeclaredCondition } from '../module.ts';

/** The rules the rule files hold. */
export interface LoadedRules {
  userRules: readonly UserRule[];
  npd: readonly NpdConfig[];
}

/** The classifier's settings from the section, the Xid policy and the rules (the live agent adds the GPU lookup). */
export function classifierOptions(section: KernelLogConfig, xid: XidInputs, rules: LoadedRules): ClassifierOptions {
  return {
    fatalXids: xid.fatal,
    recoveryActionsFatal: xid.recoveryActionsFatal,
    pcieCorrectedThreshold: { count: section.pcieCorrected.count, windowMs: section.pcieCorrected.window },
    userRules: rules.userRules,
    npd: rules.npd,
  };
}

/**
 * The condition types the rule files add: those an NPD file declares (with NPD's polarity and its
 * healthy reason and message), then those a user rule names (managed like Vigil's own). A type
 * the catalog defines keeps Vigil's meaning, whoever names it.
 */
export function declaredConditions(rules: LoadedRules): DeclaredCondition[] {
  const out = new Map<string, DeclaredCondition>();
  for (const file of rules.npd) {
    for (const c of file.conditions) {
      if (c.type in CONDITIONS || out.has(c.type)) continue;
      out.set(c.type, { type: c.type, healthyReason: c.reason, healthyMessage: c.message, polarity: 'problemTrue' });
    }
  }
  for (const r of rules.userRules) {
    const type = r.condition;
    if (!type || type in CONDITIONS || out.has(type)) continue;
    out.set(type, { type, healthyReason: `${type}IsHealthy`, healthyMessage: `no ${type} problem is active`, polarity: 'healthyTrue' });
  }
  return [...out.values()];
}
