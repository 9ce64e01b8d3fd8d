/**
 * The configuration: one schema for Vigil's core options and every monitor's section, the one
 * duration parser, and the loaders. This folder imports nothing from src/monitors; monitors import
 * their sections and types from here.
 */
export { ConfigError, loadConfig, parseConfig, type VigilConfig } from './load.ts';
export { configSchema, engineConfig, kernelLogConfig, kernelLogPathProblem, kubernetesConfig } from './schema.ts';
export { duration, durationValue, positiveDuration, positiveDurationValue } from './duration.ts';
export { DEFAULT_FATAL_XIDS, xidConfig, xidList } from './xid.ts';
export { gpuSectionSchema, type GpuSection } from './gpu.ts';
export {
  ENA_COUNTERS,
  hostMonitorsConfigSchema,
  kernelConfigSchema,
  networkingConfigSchema,
  runtimeConfigSchema,
  schedulerConfigSchema,
  storageConfigSchema,
  type EnaCounter,
  type HostMonitorsConfig,
  type HostMonitorsConfigInput,
  type KernelConfig,
  type NetworkingConfig,
  type RuntimeConfig,
  type StorageConfig,
} from './host.ts';
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
