/** The agent: runs the monitors, the pipeline, the engine and the sinks for `vigil run`. */
export { Agent } from './agent.ts';
export type { AgentDeps, MonitorEntry, SinkEntry } from './agent.ts';
export { buildMonitors } from './build-monitors.ts';
export type { BuildContext } from './build-monitors.ts';
export { EVENT_LOOP_LAG_NAMES, LagSampler, UNUSED_RESOLUTION_MS, lagStats, registerEventLoopLag } from './event-loop-lag.ts';
export type { LagStats } from './event-loop-lag.ts';
export { MAX_RULE_BYTES_TOTAL, loadRuleFiles } from './rule-files.ts';
export type { RuleFiles } from './rule-files.ts';
