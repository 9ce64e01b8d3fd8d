/** The finding pipeline: enrich -> mute -> engine, shared by `vigil run`, `vigil scan` and the tests. */
export { createPipeline, throughPipeline, type PipelineOptions } from './pipeline.ts';
export { allConditions, conditionTables, engineSettings, kernelLogClassifierOptions, xidInputs } from './settings.ts';
export { declaredConditions, type DeclaredCondition } from '../monitors/kernel-log/options.ts';
export {
  LineSplitter,
  LogReplay,
  MAX_LINE_CHARS,
  NotTextError,
  REPLAY_BASE_MS,
  replayStream,
  type ReplayOptions,
  type ReplaySummary,
} from './replay.ts';
