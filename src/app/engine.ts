/**
 * The one place an Engine is built (`vigil run`, `vigil scan`, the test helpers, bench:fleet): its
 * settings from configuration, its condition table and clock from the caller.
 */
import type { Registry } from 'prom-client';
import type { ConditionType } from '../api/types.ts';
import type { VigilConfig } from '../settings/index.ts';
import { Engine, type ConditionInfo, type EngineSnapshot } from '../engine/engine.ts';
import { engineSettings } from '../pipeline/settings.ts';

export interface EngineParts {
  bootId: string;
  /** Types managed from the start. */
  conditions: Map<ConditionType, ConditionInfo>;
  /** Types managed once a Fatal finding proves the hardware is there. */
  lateConditions?: Map<ConditionType, ConditionInfo>;
  registry?: Registry;
  now?: () => number;
  restored?: EngineSnapshot;
}

export function createEngine(config: VigilConfig, parts: EngineParts): Engine {
  return new Engine({ ...engineSettings(config), ...parts });
}
