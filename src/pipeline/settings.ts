/**
 * What the configuration means for the pipeline's stages, read in one place so the live agent and
 * `vigil scan` build their classifier and engine the same way.
 */
import type { ConditionType } from '../api/types.ts';
import { CONDITIONS } from '../catalog/index.ts';
import type { VigilConfig } from '../settings/index.ts';
import type { ConditionInfo, EngineOptions } from '../engine/engine.ts';
import type { ClassifierOptions } from '../monitors/kernel-log/classify.ts';
import { classifierOptions, type DeclaredCondition, type LoadedRules } from '../monitors/kernel-log/options.ts';
import type { XidInputs } from '../monitors/module.ts';

/** The engine settings that come from configuration (the caller adds bootId, conditions, clock). */
export function engineSettings(config: VigilConfig): Pick<EngineOptions, 'repeatWindowMs' | 'flap' | 'escalations'> {
  const e = config.engine;
  return {
    repeatWindowMs: e.repeatWindow,
    flap: { maxActivations: e.flap.maxActivations, windowMs: e.flap.window },
    escalations: e.escalations.map((x) => ({ match: x.match, count: x.count, windowMs: x.window, raise: x.raise })),
  };
}

/** The one Xid policy's inputs, for the kernel-log classifier and the GPU monitor alike. */
export function xidInputs(config: VigilConfig): XidInputs {
  // Xid 154 decided as the GPU monitor decides it from NVML (one Xid policy).
  return { fatal: config.xid.fatal, recoveryActionsFatal: config.gpu.thresholds.recoveryActionsFatal };
}

/** The kernel-log classifier's settings (the live agent adds the GPU lookup for AER lines). */
export function kernelLogClassifierOptions(config: VigilConfig, rules: LoadedRules): ClassifierOptions {
  return classifierOptions(config.kernelLog, xidInputs(config), rules);
}

/**
 * The engine's condition tables: every catalog type (named as configured) and the declared ones.
 * With `managed`, catalog types outside it go to `late` (managed once a monitor proves its hardware
 * present, as the GPU monitor does); without it every type is managed from the start (`vigil scan`).
 */
export function conditionTables(
  config: VigilConfig,
  declared: readonly DeclaredCondition[],
  managed?: ReadonlySet<ConditionType>,
): { conditions: Map<ConditionType, ConditionInfo>; late: Map<ConditionType, ConditionInfo> } {
  const conditions = new Map<ConditionType, ConditionInfo>();
  const late = new Map<ConditionType, ConditionInfo>();
  for (const [type, info] of Object.entries(CONDITIONS)) {
    (!managed || managed.has(type) ? conditions : late).set(type, {
      name: config.conditions.names[type as keyof typeof CONDITIONS],
      ...info,
    });
  }
  for (const c of declared) {
    conditions.set(c.type, { name: c.type, healthyReason: c.healthyReason, healthyMessage: c.healthyMessage, polarity: c.polarity });
  }
  return { conditions, late };
}

/** The engine's condition table when every type is managed from the start. */
export function allConditions(config: VigilConfig, declared: readonly DeclaredCondition[]): Map<ConditionType, ConditionInfo> {
  return conditionTables(config, declared).conditions;
}
