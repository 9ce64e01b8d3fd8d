/**
 * nvmlReturn_t codes and the errors Vigil raises around NVML. Every code has a name so logs and
 * metrics never show a bare number.
 */
import { VigilError } from '../../util/errors.ts';

export const NVML_RETURN = {
  SUCCESS: 0,
  UNINITIALIZED: 1,
  INVALID_ARGUMENT: 2,
  NOT_SUPPORTED: 3,
  NO_PERMISSION: 4,
  ALREADY_INITIALIZED: 5,
  NOT_FOUND: 6,
  INSUFFICIENT_SIZE: 7,
  INSUFFICIENT_POWER: 8,
  DRIVER_NOT_LOADED: 9,
  TIMEOUT: 10,
  IRQ_ISSUE: 11,
  LIBRARY_NOT_FOUND: 12,
  FUNCTION_NOT_FOUND: 13,
  CORRUPTED_INFOROM: 14,
  GPU_IS_LOST: 15,
  RESET_REQUIRED: 16,
  OPERATING_SYSTEM: 17,
  LIB_RM_VERSION_MISMATCH: 18,
  IN_USE: 19,
  MEMORY: 20,
  NO_DATA: 21,
  VGPU_ECC_NOT_SUPPORTED: 22,
  INSUFFICIENT_RESOURCES: 23,
  FREQ_NOT_SUPPORTED: 24,
  ARGUMENT_VERSION_MISMATCH: 25,
  DEPRECATED: 26,
  NOT_READY: 27,
  GPU_NOT_FOUND: 28,
  INVALID_STATE: 29,
  RESET_TYPE_NOT_SUPPORTED: 30,
  UNKNOWN: 999,
} as const;

export type NvmlReturnName = keyof typeof NVML_RETURN;

/**
 * Vigil's own pseudo-code for "this symbol is not in the loaded library" (an older driver). Kept
 * negative so it can never collide with a real nvmlReturn_t.
 */
export const RC_MISSING_SYMBOL = -1;

const BY_CODE = new Map<number, string>(Object.entries(NVML_RETURN).map(([k, v]) => [v, k]));
BY_CODE.set(RC_MISSING_SYMBOL, 'MISSING_SYMBOL');

/** NVML_ERROR_GPU_IS_LOST-style name without the prefix ('GPU_IS_LOST'); 'CODE_<n>' if unknown. */
export function nvmlReturnName(rc: number): string {
  return BY_CODE.get(rc) ?? `CODE_${rc}`;
}

/** Codes after which a GPU is unusable until reset or reboot. */
export function isGpuGone(rc: number): boolean {
  return rc === NVML_RETURN.GPU_IS_LOST || rc === NVML_RETURN.RESET_REQUIRED;
}

/** Codes that mean "this query does not apply here", not a fault. */
export function isUnsupported(rc: number): boolean {
  return rc === NVML_RETURN.NOT_SUPPORTED || rc === RC_MISSING_SYMBOL || rc === NVML_RETURN.FUNCTION_NOT_FOUND;
}

/** An NVML call returned a non-success code (`rc`; `code` is Vigil's stable error code). */
export class NvmlError extends VigilError {
  override readonly name = 'NvmlError';
  constructor(
    readonly fn: string,
    readonly rc: number,
    detail?: string,
  ) {
    super('VIGIL_E_NVML_CALL', `${fn} returned NVML_ERROR_${nvmlReturnName(rc)} (${rc})${detail ? `: ${detail}` : ''}`);
  }
  get codeName(): string {
    return nvmlReturnName(this.rc);
  }
}

/** The NVML library could not be opened or lacks a symbol Vigil cannot work without. */
export class NvmlLoadError extends VigilError {
  override readonly name = 'NvmlLoadError';
  constructor(
    readonly libraryPath: string,
    message: string,
  ) {
    super('VIGIL_E_NVML_LOAD', message);
  }
}

/** An NVML call did not return within the watchdog budget; its worker thread was abandoned. */
export class NvmlTimeoutError extends VigilError {
  override readonly name = 'NvmlTimeoutError';
  constructor(
    readonly fn: string,
    readonly gpuIndex: number | null,
    readonly afterMs: number,
  ) {
    super('VIGIL_E_NVML_TIMEOUT', `${fn}${gpuIndex === null ? '' : ` on GPU ${gpuIndex}`} did not return within ${afterMs} ms`);
  }
}

/** The worker thread died or was stopped while a request was pending. */
export class NvmlWorkerGoneError extends VigilError {
  override readonly name = 'NvmlWorkerGoneError';
  constructor(message: string) {
    super('VIGIL_E_NVML_WORKER_GONE', message);
  }
}
