/**
 * The composition root: assembles the agent (monitors, pipeline, engine, sinks) for `vigil run`,
 * `vigil scan`, `vigil gpu`, the test helpers and the benches.
 */
export { Agent } from './agent.ts';
export type { AgentDeps, MonitorEntry, SinkEntry } from './agent.ts';
export { buildMonitors } from './build-monitors.ts';
export type { BuildContext } from './build-monitors.ts';
export { EVENT_LOOP_LAG_NAMES, LagSampler, UNUSED_RESOLUTION_MS, lagStats, registerEventLoopLag } from './event-loop-lag.ts';
export type { LagStats } from './event-loop-lag.ts';
export { createEngine } from './engine.ts';
export type { EngineParts } from './engine.ts';
export { createReplay } from './scan.ts';
export { createGpuProbe } from './gpu-probe.ts';
export { adoptLate, adoptNodeConditions } from './adopt.ts';
export type { AdoptingSink } from './adopt.ts';
export { buildKubernetes } from './kubernetes.ts';
export type { KubernetesParts } from './kubernetes.ts';
