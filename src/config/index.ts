/**
 * What every part of the configuration shares: the core sections, the duration and regex parsers,
 * the Xid list, check schedules, file paths, and the YAML loader. Monitors keep their own sections
 * in their folders; src/settings assembles the whole file.
 */
export { ConfigError, loadYamlConfig, parseYamlConfig } from './load.ts';
export { conditionNames, diagnosticsConfig, kubernetesConfig, quarantineConfig, sourceRetryConfig } from './schema.ts';
export { ENGINE_DEFAULTS, engineConfig } from './engine.ts';
export { duration, durationValue, positiveDuration, positiveDurationValue } from './duration.ts';
export { DEFAULT_FATAL_XIDS, xidConfig, xidList } from './xid.ts';
export { checkTiming, MINUTE, ratio } from './check-timing.ts';
export { filePath, MAX_RULE_FILES } from './file-path.ts';
export { SCHEDULER_DEFAULTS, schedulerConfigSchema } from './scheduler.ts';
export { kubeconfigProblem } from './kubeconfig.ts';
export { LISTEN_FORMAT, parseListen, type ListenAddress } from './listen.ts';
export {
  DFA_MAX_MEM,
  MAX_PROGRAM_SIZE,
  NATIVE_MAX_PATTERNS,
  UserRegex,
  compileNative,
  nativeRe2Path,
  nativeSource,
  regexEngineInfo,
  regexList,
  regexProblem,
  regexString,
  type LineTest,
} from './regex.ts';
