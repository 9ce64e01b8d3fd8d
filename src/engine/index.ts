/** The engine: per-reason state from findings to conditions, pure, with an injected clock. */
export { Engine } from './engine.ts';
export type { ConditionInfo, EngineOptions, EngineSnapshot } from './engine.ts';
export { Escalator } from './escalation.ts';
export type { EscalationRule } from './escalation.ts';
export { SlidingCounter } from './sliding-counter.ts';
