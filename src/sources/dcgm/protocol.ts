/**
 * Messages between the main thread (client.ts) and the DCGM worker thread (worker.ts), and the
 * DCGM constants both sides need. Plain structured-cloneable objects only: no koffi values cross.
 */

/** Every DCGM function Vigil binds, in a fixed order: the index names the call in progress (CTL_FN). */
export const DCGM_FUNCTION_NAMES = [
  'dcgmInit',
  'dcgmShutdown',
  'dcgmConnect_v2',
  'dcgmStartEmbedded',
  'dcgmStopEmbedded',
  'dcgmDisconnect',
  'dcgmGetAllSupportedDevices',
  'dcgmGetDeviceAttributes',
  'dcgmPolicySet',
  'dcgmPolicyRegister_v2',
  'dcgmPolicyUnregister',
] as const;
export type DcgmFnName = (typeof DCGM_FUNCTION_NAMES)[number];

/** dcgmReturn_t codes Vigil tells apart (negative, from dcgm_structs.h). */
export const DCGM_RETURN = {
  OK: 0,
  BADPARAM: -1,
  GENERIC_ERROR: -3,
  NOT_SUPPORTED: -6,
  INIT_ERROR: -7,
  NVML_ERROR: -8,
  UNINITIALIZED: -10,
  TIMEOUT: -11,
  VER_MISMATCH: -12,
  NO_PERMISSION: -17,
  GPU_IS_LOST: -18,
  RESET_REQUIRED: -19,
  CONNECTION_NOT_VALID: -21,
  LIBRARY_NOT_FOUND: -25,
  NVML_NOT_LOADED: -56,
  NVML_DRIVER_TIMEOUT: -57,
} as const;

const RETURN_NAMES = new Map<number, string>(Object.entries(DCGM_RETURN).map(([k, v]) => [v, k]));

/** 'CONNECTION_NOT_VALID' for -21; 'CODE_<n>' when unknown. */
export function dcgmReturnName(rc: number): string {
  return RETURN_NAMES.get(rc) ?? `CODE_${rc}`;
}

/** dcgmPolicyCondition_t bits. */
export const POLICY_COND = {
  DBE: 0x1,
  PCI: 0x2,
  MAX_PAGES_RETIRED: 0x4,
  THERMAL: 0x8,
  POWER: 0x10,
  NVLINK: 0x20,
  XID: 0x40,
} as const;
export const ALL_POLICY_CONDITIONS = Object.values(POLICY_COND).reduce((a, b) => a | b, 0);

export interface DcgmWorkerInit {
  libraryPath: string;
  /** Int32Array view with the CTL_* slots of sources/nvml/protocol.ts (shared watchdog). */
  control: SharedArrayBuffer;
  /** Attach to a running nv-hostengine, or run the engine inside this process. */
  mode: 'hostengine' | 'embedded';
  /** "host:port", "host" (port 5555), or a unix socket path when unixSocket. */
  address: string;
  unixSocket: boolean;
  connectTimeoutMs: number;
  /** How often the worker checks the host-engine connection (callbacks alone cannot say it died). */
  probeMs: number;
  conditions: number;
  thresholds: { temperatureC: number; powerW: number; maxRetiredPages: number };
}

/** A GPU as DCGM names it, with the identifiers that match it to NVML and the kernel log. */
export interface DcgmDevice {
  gpuId: number;
  pciBusId: string | null;
  uuid: string | null;
}

/** One dcgmPolicyCallbackResponse_v2, decoded. */
export interface DcgmViolation {
  gpuId: number;
  condition: number;
  /** The violation's timestamp (microseconds since the epoch), as DCGM gave it. */
  timestampUs: number;
  xid?: number;
  dbe?: { location: number; count: number };
  pciReplays?: number;
  retiredPages?: { sbe: number; dbe: number };
  temperatureC?: number;
  powerW?: number;
  nvlink?: { fieldId: number; counter: number };
  /** Milliseconds since the epoch when the worker received it. */
  at: number;
}

export interface DcgmFailure {
  /** The call that failed, or null when the library could not be loaded. */
  fn: string | null;
  rc: number | null;
  message: string;
}

export type DcgmMessage =
  | { kind: 'ready'; devices: DcgmDevice[] }
  | { kind: 'violation'; violation: DcgmViolation }
  /** The host-engine connection broke (CONNECTION_NOT_VALID); the worker has ended. */
  | { kind: 'lost'; failure: DcgmFailure }
  /** Load, init, connect or registration failed; the worker has ended. */
  | { kind: 'failed'; failure: DcgmFailure }
  | { kind: 'stopped' };

export type DcgmRequest = { op: 'stop' };
