/** The finding pipeline: enrich -> mute -> engine, shared by `vigil run`, `vigil scan` and the tests. */
export { createPipeline, throughPipeline, type PipelineOptions } from './pipeline.ts';
export { allConditions, declaredConditions, engineSettings, kernelLogClassifierOptions, type DeclaredCondition } from './settings.ts';
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
