/**
 * The sources: raw records from /dev/kmsg, NVML, DCGM and the host's files. The worker entries
 * (nvml/worker.ts, dcgm/worker.ts) and the native bindings are started by path, not exported.
 */
export {
  MAX_MESSAGE_CHARS,
  detectFormat,
  fromUserSpace,
  isKmsgField,
  lineKind,
  lineTime,
  parseKmsgRecord,
  parseLine,
  syslogKernelUptimeMs,
  unescapeKmsg,
} from './kmsg/parse.ts';
export type { KmsgRecord, LineKind, LineTime, LogFormat, LogLine } from './kmsg/parse.ts';
export { KmsgReader, recordsDevice } from './kmsg/reader.ts';
export type { KmsgCursor, KmsgIo, KmsgReaderOptions } from './kmsg/reader.ts';
export { DEFAULT_READ_LIMITS, ReadThread } from './kmsg/read-thread.ts';
export type { KeepPattern, ReadItem, ReadThreadHandlers, ReadThreadLimits } from './kmsg/read-thread.ts';
export { IntervalWaiter, PollWaiter } from './kmsg/wait.ts';
export type { PollWake, PollWaiterHandlers } from './kmsg/wait.ts';
export { NvmlEventClient, NvmlPollClient, exitNow, nvmlThreadsLeft } from './nvml/client.ts';
export type { EventHandlers, HangReport, LogFn, NvmlClientOptions } from './nvml/client.ts';
export {
  NVML_RETURN,
  NvmlError,
  NvmlLoadError,
  NvmlTimeoutError,
  NvmlWorkerGoneError,
  RC_MISSING_SYMBOL,
  isGpuGone,
  isUnsupported,
  nvmlReturnName,
} from './nvml/errors.ts';
export type { NvmlReturnName } from './nvml/errors.ts';
export { NvmlMetrics } from './nvml/metrics.ts';
export { CLOCK_REASON_BITS, DEFAULT_EVENT_MASK, EVENT_BITS } from './nvml/protocol.ts';
export type { EventDevice, GpuPoll, GpuSample, NvmlEvent, PollResult } from './nvml/protocol.ts';
export { DcgmClient } from './dcgm/client.ts';
export type { DcgmClientOptions, DcgmHandlers } from './dcgm/client.ts';
export { ALL_POLICY_CONDITIONS, POLICY_COND } from './dcgm/protocol.ts';
export type { DcgmDevice, DcgmFailure, DcgmViolation } from './dcgm/protocol.ts';
export {
  execBounded,
  exists,
  hostPath,
  listDir,
  readFileSmall,
  readLinkBase,
  readNumber,
  readProcFile,
  readSysFile,
  readSysFileAsync,
  scanProcesses,
  statfs,
} from './host/index.ts';
export type { ExecFn, ExecOptions, ExecResult, ProcSample, StatFsSample } from './host/index.ts';
export { parseProcStat } from './host/procs.ts';
