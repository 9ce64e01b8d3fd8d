/**
 * Messages between the main thread (client.ts) and the NVML worker threads (worker.ts), and the
 * raw data they carry. Plain structured-cloneable objects only: no koffi values cross threads.
 */

/**
 * Every NVML function Vigil binds, in a fixed order: the index is how the worker names the call in
 * progress (shared control array) and in call statistics. native.ts checks it matches its bindings.
 */
export const NVML_FUNCTION_NAMES = [
  'nvmlInit_v2',
  'nvmlShutdown',
  'nvmlErrorString',
  'nvmlSystemGetDriverVersion',
  'nvmlDeviceGetCount_v2',
  'nvmlDeviceGetHandleByIndex_v2',
  'nvmlDeviceGetUUID',
  'nvmlDeviceGetName',
  'nvmlDeviceGetSerial',
  'nvmlDeviceGetPciInfo_v3',
  'nvmlDeviceGetSupportedEventTypes',
  'nvmlEventSetCreate',
  'nvmlDeviceRegisterEvents',
  'nvmlEventSetWait_v2',
  'nvmlEventSetFree',
  'nvmlDeviceGetRemappedRows',
  'nvmlDeviceGetRetiredPages',
  'nvmlDeviceGetRetiredPagesPendingStatus',
  'nvmlDeviceGetTotalEccErrors',
  'nvmlDeviceGetPcieReplayCounter',
  'nvmlDeviceGetCurrPcieLinkGeneration',
  'nvmlDeviceGetMaxPcieLinkGeneration',
  'nvmlDeviceGetCurrPcieLinkWidth',
  'nvmlDeviceGetMaxPcieLinkWidth',
  'nvmlDeviceGetCurrentClocksEventReasons',
  'nvmlDeviceGetCurrentClocksThrottleReasons',
  'nvmlDeviceGetTemperature',
  'nvmlDeviceGetTemperatureThreshold',
  'nvmlDeviceGetNvLinkState',
  'nvmlDeviceGetNvLinkErrorCounter',
  'nvmlDeviceGetFieldValues',
  'nvmlDeviceValidateInforom',
  'nvmlDeviceGetEccMode',
  'nvmlDeviceGetGpuFabricInfo',
  'nvmlDeviceGetGpuFabricInfoV',
] as const;

/** nvmlEventType bits. Bits from 0x200 up exist only on newer drivers; AND with the supported mask. */
export const EVENT_BITS = {
  SingleBitEccError: 0x1,
  DoubleBitEccError: 0x2,
  PState: 0x4,
  XidCriticalError: 0x8,
  /** Clock changes: not subscribed (a busy H200 on driver 580 sent about 40 a second); polls read the reasons. */
  Clock: 0x10,
  SingleBitEccErrorStorm: 0x200,
  DramRetirementEvent: 0x400,
  DramRetirementFailure: 0x800,
  NonFatalPoisonError: 0x1000,
  FatalPoisonError: 0x2000,
  GpuUnavailableError: 0x4000,
  GpuRecoveryAction: 0x8000,
} as const;

/**
 * Events Vigil subscribes to (ANDed with what each GPU supports). SBE and pending retirement/remap
 * events are Info/Warning signals; a retirement event makes the monitor poll early (rate-limited).
 * Not poison events (the Xid 94/95 they come with is reported already), not PState or clock changes
 * (noise: clocks change many times a second on a busy GPU, and each event costs the agent CPU).
 */
export const DEFAULT_EVENT_MASK =
  EVENT_BITS.SingleBitEccError |
  EVENT_BITS.DoubleBitEccError |
  EVENT_BITS.XidCriticalError |
  EVENT_BITS.DramRetirementEvent |
  EVENT_BITS.DramRetirementFailure |
  EVENT_BITS.GpuUnavailableError |
  EVENT_BITS.GpuRecoveryAction;

/** Clock event (throttle) reason bits; only the HW ones matter for health. */
export const CLOCK_REASON_BITS = {
  GpuIdle: 0x1,
  ApplicationsClocksSetting: 0x2,
  SwPowerCap: 0x4,
  HwSlowdown: 0x8,
  SyncBoost: 0x10,
  SwThermalSlowdown: 0x20,
  HwThermalSlowdown: 0x40,
  HwPowerBrakeSlowdown: 0x80,
} as const;

/** What NVML says about one GPU's identity, before PCI normalisation. */
export interface RawIdentity {
  index: number;
  uuid: string | null;
  name: string | null;
  /** nvmlPciInfo_t.busId, e.g. "00000000:B3:00.0"; null when the query failed. */
  busId: string | null;
  serial: string | null;
}

/** One poll's readings for one GPU. `null` = not supported here, missing symbol, or failed. */
export interface GpuSample {
  remappedRows: { corr: number; unc: number; pending: boolean; failure: boolean } | null;
  retiredPages: { sbe: number; dbe: number; pending: boolean | null } | null;
  eccUncorrectedVolatile: number | null;
  /** Corrected (single-bit) ECC errors since the driver loaded. */
  eccCorrectedVolatile?: number | null;
  /** nvmlDeviceGetEccMode: whether ECC is on now and after the next reboot. */
  eccMode?: { current: boolean; pending: boolean } | null;
  /** NVSwitch fabric registration (Hopper+); null where the GPU has no fabric (PCIe, no NVSwitch). */
  fabric?: { state: number; status: number; cliqueId: number; clusterUuid: string; healthMask: number | null } | null;
  pcie: { replay: number | null; gen: number | null; maxGen: number | null; width: number | null; maxWidth: number | null };
  clocksEventReasons: number | null;
  temperature: { current: number | null; slowdown: number | null; shutdown: number | null };
  /** Per link: active flag and [replay, recovery, crcFlit, crcData] counters (null if unreadable). */
  nvlink: { active: boolean[]; counters: (number[] | null)[] } | null;
  recoveryAction: number | null;
  inforom: 'valid' | 'corrupted' | null;
  /** Calls that failed for a reason other than NOT_SUPPORTED / a missing symbol. */
  errors: { fn: string; rc: number }[];
  /** Calls skipped because the library lacks the symbol (an older driver). */
  missing: string[];
}

export interface GpuPoll {
  index: number;
  /** nvmlDeviceGetHandleByIndex_v2's return code (0 on success). */
  handleRc: number;
  identity: RawIdentity | null;
  /** First GPU_IS_LOST / RESET_REQUIRED seen on this GPU, which ends its sampling. */
  gone: { fn: string; rc: number } | null;
  sample: GpuSample | null;
  /** Not queried this time (a previous call on it hung). */
  skipped: boolean;
}

export interface PollRequestArgs {
  skip: number[];
  /** Upper bound on NVLink links probed per GPU. */
  maxNvLinks: number;
  /** Identity only (cheap) or identity and every health sample. */
  samples: boolean;
}

export interface PollResult {
  count: number;
  driverVersion: string | null;
  gpus: GpuPoll[];
}

export interface InitResult {
  driverVersion: string | null;
  /** NVML symbols the loaded library lacks. */
  missing: string[];
}

/** Per-call statistics, flattened [fnId, ms, rc, fnId, ms, rc, ...]. */
export type CallStats = number[];

export type PollRequest = { id: number; op: 'init' } | { id: number; op: 'poll'; args: PollRequestArgs } | { id: number; op: 'shutdown' };

export interface SerializedError {
  name: string;
  message: string;
  fn?: string;
  code?: number;
  libraryPath?: string;
}

export type PollResponse =
  /** Sent while a poll runs, per GPU, so a later hang can still name the GPU it hung on. */
  | { id: number; progress: RawIdentity }
  | { id: number; ok: true; result: unknown; stats: CallStats }
  | { id: number; ok: false; error: SerializedError; stats: CallStats };

/** A device the event worker registered, with what it could register. */
export interface EventDevice {
  index: number;
  uuid: string | null;
  busId: string | null;
  /** Event mask actually registered (wanted & supported). */
  mask: number;
  /** nvmlDeviceRegisterEvents return code (0, or e.g. NOT_SUPPORTED). */
  rc: number;
}

export interface NvmlEvent {
  index: number | null;
  uuid: string | null;
  busId: string | null;
  eventType: number;
  eventData: number;
  gpuInstanceId: number;
  computeInstanceId: number;
  /** For GpuRecoveryAction and Xid 154 events: field 230 read right after the event. */
  recoveryAction: number | null;
  /** Milliseconds since the epoch when the wait returned it. */
  at: number;
}

export type EventMessage =
  | { kind: 'ready'; devices: EventDevice[]; missing: string[] }
  | { kind: 'event'; event: NvmlEvent; stats: CallStats }
  /** The wait returned something other than SUCCESS/TIMEOUT; the loop has ended. */
  | { kind: 'waitError'; rc: number; index: number | null; uuid: string | null; busId: string | null; stats: CallStats }
  | { kind: 'stats'; stats: CallStats }
  /** Setup failed (library, init or event-set creation); the worker exits. */
  | { kind: 'failed'; error: SerializedError; stats: CallStats };

export interface WorkerInit {
  role: 'poll' | 'events';
  libraryPath: string;
  /** Int32Array view: see CTL_* indexes. */
  control: SharedArrayBuffer;
  eventWaitMs: number;
  eventMask: number;
}

/**
 * Slots of the shared control array. The worker bumps SEQ around every NVML call and sets BUSY,
 * FN and GPU while inside it, so the main thread can see a stuck call without any message.
 */
export const CTL_SEQ = 0;
export const CTL_BUSY = 1;
export const CTL_FN = 2;
export const CTL_GPU = 3;
export const CTL_STOP = 4;
export const CTL_SIZE = 5;
