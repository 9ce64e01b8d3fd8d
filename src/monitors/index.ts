/**
 * The monitors: raw records to findings. The kernel log (built-in rules, user rules, NPD files),
 * the GPU (NVML, DCGM, AER) and the polled host checks (kernel, networking, runtime, storage).
 */
export { KernelLogClassifier, trieRegExp } from './kernel-log/classify.ts';
export type { ClassifiableLine, ClassifierOptions } from './kernel-log/classify.ts';
export { KernelLogMonitor, WARM_UP_XID_LINES } from './kernel-log/monitor.ts';
export type { KernelLogMonitorOptions, KmsgReaderLike } from './kernel-log/monitor.ts';
export { NpdMatcher, goRegexToJs, loadNpdConfig, parseNpdConfig } from './kernel-log/npd.ts';
export type { NpdCondition, NpdConfig, NpdOptions, NpdRule } from './kernel-log/npd.ts';
export { BUILTIN_RULES, PREVIOUS_BOOT_WINDOW_MS } from './kernel-log/rules.ts';
export type { KernelRule, RuleEnv, RuleHit } from './kernel-log/rules.ts';
export { fillGroups, loadUserRules, parseUserRules } from './kernel-log/user-rules.ts';
export type { UserRule } from './kernel-log/user-rules.ts';
// The kernel log's PCI form (always a string); the GPU inventory's normalizePci below answers null
// for what is not a PCI address.
export { DEFAULT_FATAL_XIDS, decideXid, isIgnoredXid, normalizePci as normalizeXidPci, xidDetailFromText } from './xid/policy.ts';
export type { XidDecision, XidEvidence, XidPolicyConfig, XidReason } from './xid/policy.ts';
export { GpuMonitor } from './gpu/monitor.ts';
export type { GpuMonitorOptions, GpuMonitorState, GpuSnapshot } from './gpu/monitor.ts';
export { gpuConfigSchema, gpuSectionSchema } from './gpu/config.ts';
export type { GpuConfig, GpuConfigInput, GpuSection, GpuThresholds } from './gpu/config.ts';
export { kernelLogConfig, kernelLogPathProblem } from './kernel-log/config.ts';
export type { KernelLogConfig } from './kernel-log/config.ts';
export { GpuInventory, detectNvidiaPciFunctions, entityOf, normalizePci } from './gpu/inventory.ts';
export type { GpuInfo } from './gpu/inventory.ts';
export {
  checkClockEvents,
  checkDeviceCount,
  checkEccUncorrected,
  checkInforom,
  checkNvLinkErrors,
  checkNvLinkState,
  checkPcieReplay,
  checkPcieWidth,
  checkRecoveryAction,
  checkRetiredPages,
  checkRowRemap,
  checkTemperature,
  evaluateGpu,
  eventFindings,
  gpuGone,
  initialCheckState,
  nvmlTimeout,
  pcieReplayLimit,
} from './gpu/checks.ts';
export type { CheckResult, GpuCheckState } from './gpu/checks.ts';
export { aerDevices, checkAer, parseAerFile, readAer } from './gpu/aer.ts';
export type { AerReading } from './gpu/aer.ts';
export { attributeGpu, gpuBelow } from './gpu/attribution.ts';
export type { GpuLookup } from './gpu/attribution.ts';
export { exportBaselines, importBaselines } from './gpu/baselines.ts';
export type { PersistedGpuBaselines } from './gpu/baselines.ts';
export { HostMonitors, buildHostChecks } from './host-monitors.ts';
export { POLLED_MONITORS, hostMonitorsConfigSchema } from './registry.ts';
export type { HostMonitorsConfig, HostMonitorsConfigInput } from './registry.ts';
export { polledMonitor, pushMonitor } from './module.ts';
export type {
  MonitorContext,
  MonitorPart,
  MonitorSlots,
  PolledMonitorModule,
  PushMonitorModule,
  RegisteredPolledMonitor,
  RegisteredPushMonitor,
  XidInputs,
} from './module.ts';
export { PUSH_MONITORS } from './registry.ts';
export { kernelLogModule } from './kernel-log/module.ts';
export { gpuModule } from './gpu/module.ts';
export { MAX_RULE_BYTES_TOTAL, loadRuleFiles } from './kernel-log/rule-files.ts';
export type { RuleFiles } from './kernel-log/rule-files.ts';
export { classifierOptions, declaredConditions } from './kernel-log/options.ts';
export type { DeclaredCondition, LoadedRules } from './kernel-log/options.ts';
export type { HostDeps, HostLog, HostMonitorsOptions } from './host-monitors.ts';
export { Consecutive, ReportPublisher, emptyReport, settle } from './host-check.ts';
export type { CheckContext, CheckReport, HealthyItem, HostCheck } from './host-check.ts';
export { finding } from './host-finding.ts';
export { kernelChecks, kernelConfigSchema, kernelMonitor } from './kernel/index.ts';
export type { KernelSyscalls } from './kernel/index.ts';
export { STA_UNSYNC, countKernelWarnings } from './kernel/checks.ts';
export type { TimexSample } from './kernel/checks.ts';
export { ENA_COUNTERS, networkingChecks, networkingConfigSchema, networkingMonitor } from './networking/index.ts';
export { parseEthtoolStats } from './networking/checks.ts';
export { runtimeChecks, runtimeConfigSchema, runtimeMonitor } from './runtime/index.ts';
export { restartReason } from './runtime/checks.ts';
export { storageChecks, storageConfigSchema, storageMonitor } from './storage/index.ts';
export type { StatfsFn } from './storage/index.ts';
export { mountFor, parseDiskstats, parseMountinfo } from './storage/checks.ts';
