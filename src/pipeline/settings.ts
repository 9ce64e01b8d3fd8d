/**
 * What the configuration means for the pipeline's stages, read in one place so the live agent and
 * `vigil scan` build their classifier and engine the same way.
 */
import type { ConditionType } from '../api/types.ts';
import { CONDITIONS } from '../catalog/index.ts';
import type { VigilConfig } from '../settings/index.ts';
import type { ConditionInfo, EngineOptions } from '../engine/engine.ts';
import type { ClassifierOptions } from '../monitors/kernel-log/classify.ts';
import type { NpdConfig } from '../monitors/kernel-log/npd.ts';
import type { UserRule } from '../monitors/kernel-log/user-rules.ts';

/** The engine settings that come from configuration (the caller adds bootId, conditions, clock). */
export function engineSettings(config: VigilConfig): Pick<EngineOptions, 'repeatWindowMs' | 'flap' | 'escalations'> {
  const e = config.engine;
  return {
    repeatWindowMs: e.repeatWindow,
    flap: { maxActivations: e.flap.maxActivations, windowMs: e.flap.window },
    escalations: e.escalations.map((x) => ({ match: x.match, count: x.count, windowMs: x.window, raise: x.raise })),
  };
}

/** The kernel-log classifier's settings (the live agent adds the GPU lookup for AER lines). */
export function kernelLogClassifierOptions(
  config: VigilConfig,
  rules: { userRules: readonly UserRule[]; npd: readonly NpdConfig[] },
): ClassifierOptions {
  const k = config.kernelLog;
  return {
    fatalXids: config.xid.fatal,
    // Xid 154 decided as the GPU monitor decides it from NVML (one Xid policy).
    recoveryActionsFatal: config.gpu.thresholds.recoveryActionsFatal,
    pcieCorrectedThreshold: { count: k.pcieCorrected.count, windowMs: k.pcieCorrected.window },
    userRules: rules.userRules,
    npd: rules.npd,
  };
}

/** A condition type declared by configuration rather than the catalog. */
export interface DeclaredCondition {
  type: ConditionType;
  healthyReason: string;
  healthyMessage: string;
  /** problemTrue for NPD's types (False while healthy, as NPD reports them); healthyTrue for user rules'. */
  polarity: 'healthyTrue' | 'problemTrue';
}

/**
 * The condition types the rule files add: those an NPD file declares (with NPD's polarity and its
 * healthy reason and message), then those a user rule names (managed like Vigil's own). A type
 * the catalog defines keeps Vigil's meaning, whoever names it.
 */
export function declaredConditions(rules: { userRules: readonly UserRule[]; npd: readonly NpdConfig[] }): DeclaredCondition[] {
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

/** The engine's condition table: every catalog type (named as configured) plus the declared ones. */
export function allConditions(config: VigilConfig, declared: readonly DeclaredCondition[]): Map<ConditionType, ConditionInfo> {
  const out = new Map<ConditionType, ConditionInfo>();
  for (const [type, info] of Object.entries(CONDITIONS)) {
    out.set(type, { name: config.conditions.names[type as keyof typeof CONDITIONS], ...info });
  }
  for (const c of declared) {
    out.set(c.type, { name: c.type, healthyReason: c.healthyReason, healthyMessage: c.healthyMessage, polarity: c.polarity });
  }
  return out;
}
