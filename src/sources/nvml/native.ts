/**
 * The koffi binding to NVML: every FFI declaration Vigil uses, bound by its versioned symbol name
 * (nvmlInit_v2, not the nvmlInit macro). Load it only inside a worker thread (worker.ts): NVML
 * calls can block for seconds on a hung GPU, and nvmlEventSetWait_v2 blocks by design.
 *
 * Symbols missing from an older driver are left undefined, and the checks that need them degrade
 * alone. Only the three calls no check can live without are required.
 */
import koffi from 'koffi';
import { NvmlLoadError } from './errors.ts';
import { errorMessage } from '../../util/errors.ts';
import { NVML_FUNCTION_NAMES } from './protocol.ts';

/** Opaque handles (nvmlDevice_t, nvmlEventSet_t) are BigInt addresses in koffi 3. */
export type Handle = bigint;
/** A one-element array koffi fills from an `_Out_` scalar pointer. */
export type Out<T> = [T];
/** koffi returns 64-bit integers as Number when safe, else BigInt. */
export type U64 = number | bigint;

// Layouts from nvml.h (LP64). Registered once per thread: each worker evaluates this module anew.
koffi.pointer('nvmlDevice_t', koffi.opaque('nvmlDevice_st'));
koffi.pointer('nvmlEventSet_t', koffi.opaque('nvmlEventSet_st'));
koffi.struct('nvmlPciInfo_t', {
  busIdLegacy: 'char[16]',
  domain: 'uint',
  bus: 'uint',
  device: 'uint',
  pciDeviceId: 'uint',
  pciSubSystemId: 'uint',
  busId: 'char[32]',
});
koffi.struct('nvmlEventData_t', {
  device: 'nvmlDevice_t',
  eventType: 'unsigned long long',
  eventData: 'unsigned long long',
  gpuInstanceId: 'uint',
  computeInstanceId: 'uint',
});
koffi.struct('nvmlFieldValue_t', {
  fieldId: 'uint',
  scopeId: 'uint',
  timestamp: 'long long',
  latencyUsec: 'long long',
  valueType: 'int',
  nvmlReturn: 'int',
  // nvmlValue_t is an 8-byte union; read as raw 64 bits and decoded by valueType (fieldValue()).
  value: 'uint64_t',
});

// v1 (nvmlDeviceGetGpuFabricInfo, R535+) and v2 (nvmlDeviceGetGpuFabricInfoV, R550+, with a health mask).
koffi.struct('nvmlGpuFabricInfo_t', {
  clusterUuid: 'uint8_t[16]',
  status: 'int',
  cliqueId: 'uint',
  state: 'uint8_t',
});
koffi.struct('nvmlGpuFabricInfo_v2_t', {
  version: 'uint',
  clusterUuid: 'uint8_t[16]',
  status: 'int',
  cliqueId: 'uint',
  state: 'uint8_t',
  healthMask: 'uint',
});
/** NVML_STRUCT_VERSION(GpuFabricInfo, 2): sizeof(nvmlGpuFabricInfo_v2_t) | 2 << 24. */
export const FABRIC_INFO_V2 = (36 | (2 << 24)) >>> 0;

export interface GpuFabricInfo {
  version?: number;
  clusterUuid?: number[] | Uint8Array;
  status: number;
  cliqueId: number;
  state: number;
  healthMask?: number;
}

export interface PciInfo {
  busIdLegacy: string;
  domain: number;
  bus: number;
  device: number;
  pciDeviceId: number;
  pciSubSystemId: number;
  busId: string;
}

export interface EventData {
  device: Handle | null;
  eventType: U64;
  eventData: U64;
  gpuInstanceId: number;
  computeInstanceId: number;
}

export interface FieldValue {
  fieldId: number;
  scopeId: number;
  timestamp: U64;
  latencyUsec: U64;
  valueType: number;
  nvmlReturn: number;
  value: U64;
}

/** Decodes nvmlFieldValue_t.value (a union) by its valueType; null for types Vigil never reads. */
export function fieldValue(f: Partial<FieldValue>): number | null {
  const raw = BigInt(f.value ?? 0);
  switch (f.valueType) {
    case 1: // unsigned int
      return Number(BigInt.asUintN(32, raw));
    case 5: // signed int
      return Number(BigInt.asIntN(32, raw));
    case 2: // unsigned long
    case 3: // unsigned long long
      return Number(raw);
    case 4: // signed long long
      return Number(BigInt.asIntN(64, raw));
    case 6: // unsigned short
      return Number(BigInt.asUintN(16, raw));
    case 0: {
      const b = Buffer.alloc(8);
      b.writeBigUInt64LE(raw);
      return b.readDoubleLE();
    }
    default:
      return null;
  }
}

/** TypeScript view of each bound function; every one returns an nvmlReturn_t except ErrorString. */
export interface NvmlApi {
  nvmlInit_v2(): number;
  nvmlShutdown(): number;
  nvmlErrorString(rc: number): string;
  nvmlSystemGetDriverVersion(buf: Buffer, len: number): number;
  nvmlDeviceGetCount_v2(count: Out<number>): number;
  nvmlDeviceGetHandleByIndex_v2(index: number, dev: Out<Handle | null>): number;
  nvmlDeviceGetUUID(dev: Handle, buf: Buffer, len: number): number;
  nvmlDeviceGetName(dev: Handle, buf: Buffer, len: number): number;
  nvmlDeviceGetSerial(dev: Handle, buf: Buffer, len: number): number;
  nvmlDeviceGetPciInfo_v3(dev: Handle, pci: Partial<PciInfo>): number;
  nvmlDeviceGetSupportedEventTypes(dev: Handle, types: Out<U64>): number;
  nvmlEventSetCreate(set: Out<Handle | null>): number;
  nvmlDeviceRegisterEvents(dev: Handle, types: U64, set: Handle): number;
  nvmlEventSetWait_v2(set: Handle, data: Partial<EventData>, timeoutMs: number): number;
  nvmlEventSetFree(set: Handle): number;
  nvmlDeviceGetRemappedRows(dev: Handle, corr: Out<number>, unc: Out<number>, pending: Out<number>, failure: Out<number>): number;
  nvmlDeviceGetRetiredPages(dev: Handle, cause: number, count: Out<number>, addresses: null): number;
  nvmlDeviceGetRetiredPagesPendingStatus(dev: Handle, pending: Out<number>): number;
  nvmlDeviceGetTotalEccErrors(dev: Handle, errorType: number, counterType: number, count: Out<U64>): number;
  nvmlDeviceGetPcieReplayCounter(dev: Handle, value: Out<number>): number;
  nvmlDeviceGetCurrPcieLinkGeneration(dev: Handle, value: Out<number>): number;
  nvmlDeviceGetMaxPcieLinkGeneration(dev: Handle, value: Out<number>): number;
  nvmlDeviceGetCurrPcieLinkWidth(dev: Handle, value: Out<number>): number;
  nvmlDeviceGetMaxPcieLinkWidth(dev: Handle, value: Out<number>): number;
  nvmlDeviceGetCurrentClocksEventReasons(dev: Handle, reasons: Out<U64>): number;
  nvmlDeviceGetCurrentClocksThrottleReasons(dev: Handle, reasons: Out<U64>): number;
  nvmlDeviceGetTemperature(dev: Handle, sensor: number, temp: Out<number>): number;
  nvmlDeviceGetTemperatureThreshold(dev: Handle, threshold: number, temp: Out<number>): number;
  nvmlDeviceGetNvLinkState(dev: Handle, link: number, active: Out<number>): number;
  nvmlDeviceGetNvLinkErrorCounter(dev: Handle, link: number, counter: number, value: Out<U64>): number;
  nvmlDeviceGetFieldValues(dev: Handle, count: number, values: Partial<FieldValue>): number;
  nvmlDeviceValidateInforom(dev: Handle): number;
  nvmlDeviceGetEccMode(dev: Handle, current: Out<number>, pending: Out<number>): number;
  nvmlDeviceGetGpuFabricInfo(dev: Handle, info: Partial<GpuFabricInfo>): number;
  nvmlDeviceGetGpuFabricInfoV(dev: Handle, info: Partial<GpuFabricInfo>): number;
}

export type NvmlFnName = keyof NvmlApi;

const DECLS: Record<NvmlFnName, string> = {
  nvmlInit_v2: 'int nvmlInit_v2(void)',
  nvmlShutdown: 'int nvmlShutdown(void)',
  nvmlErrorString: 'const char *nvmlErrorString(int result)',
  nvmlSystemGetDriverVersion: 'int nvmlSystemGetDriverVersion(_Out_ uint8_t *version, uint length)',
  nvmlDeviceGetCount_v2: 'int nvmlDeviceGetCount_v2(_Out_ uint *deviceCount)',
  nvmlDeviceGetHandleByIndex_v2: 'int nvmlDeviceGetHandleByIndex_v2(uint index, _Out_ nvmlDevice_t *device)',
  nvmlDeviceGetUUID: 'int nvmlDeviceGetUUID(nvmlDevice_t device, _Out_ uint8_t *uuid, uint length)',
  nvmlDeviceGetName: 'int nvmlDeviceGetName(nvmlDevice_t device, _Out_ uint8_t *name, uint length)',
  nvmlDeviceGetSerial: 'int nvmlDeviceGetSerial(nvmlDevice_t device, _Out_ uint8_t *serial, uint length)',
  nvmlDeviceGetPciInfo_v3: 'int nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, _Out_ nvmlPciInfo_t *pci)',
  nvmlDeviceGetSupportedEventTypes: 'int nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, _Out_ unsigned long long *eventTypes)',
  nvmlEventSetCreate: 'int nvmlEventSetCreate(_Out_ nvmlEventSet_t *set)',
  nvmlDeviceRegisterEvents: 'int nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)',
  nvmlEventSetWait_v2: 'int nvmlEventSetWait_v2(nvmlEventSet_t set, _Out_ nvmlEventData_t *data, uint timeoutms)',
  nvmlEventSetFree: 'int nvmlEventSetFree(nvmlEventSet_t set)',
  nvmlDeviceGetRemappedRows:
    'int nvmlDeviceGetRemappedRows(nvmlDevice_t device, _Out_ uint *corrRows, _Out_ uint *uncRows, _Out_ uint *isPending, _Out_ uint *failureOccurred)',
  nvmlDeviceGetRetiredPages:
    'int nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, _Inout_ uint *pageCount, unsigned long long *addresses)',
  nvmlDeviceGetRetiredPagesPendingStatus: 'int nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, _Out_ int *isPending)',
  nvmlDeviceGetTotalEccErrors:
    'int nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType, _Out_ unsigned long long *eccCounts)',
  nvmlDeviceGetPcieReplayCounter: 'int nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, _Out_ uint *value)',
  nvmlDeviceGetCurrPcieLinkGeneration: 'int nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, _Out_ uint *currLinkGen)',
  nvmlDeviceGetMaxPcieLinkGeneration: 'int nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, _Out_ uint *maxLinkGen)',
  nvmlDeviceGetCurrPcieLinkWidth: 'int nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, _Out_ uint *currLinkWidth)',
  nvmlDeviceGetMaxPcieLinkWidth: 'int nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, _Out_ uint *maxLinkWidth)',
  nvmlDeviceGetCurrentClocksEventReasons:
    'int nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, _Out_ unsigned long long *clocksEventReasons)',
  // Pre-R535 name of the same query; bound as a fallback for older drivers.
  nvmlDeviceGetCurrentClocksThrottleReasons:
    'int nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, _Out_ unsigned long long *clocksThrottleReasons)',
  nvmlDeviceGetTemperature: 'int nvmlDeviceGetTemperature(nvmlDevice_t device, int sensorType, _Out_ uint *temp)',
  nvmlDeviceGetTemperatureThreshold: 'int nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, int thresholdType, _Out_ uint *temp)',
  nvmlDeviceGetNvLinkState: 'int nvmlDeviceGetNvLinkState(nvmlDevice_t device, uint link, _Out_ int *isActive)',
  nvmlDeviceGetNvLinkErrorCounter:
    'int nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, uint link, int counter, _Out_ unsigned long long *counterValue)',
  nvmlDeviceGetFieldValues: 'int nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, _Inout_ nvmlFieldValue_t *values)',
  nvmlDeviceValidateInforom: 'int nvmlDeviceValidateInforom(nvmlDevice_t device)',
  nvmlDeviceGetEccMode: 'int nvmlDeviceGetEccMode(nvmlDevice_t device, _Out_ int *current, _Out_ int *pending)',
  nvmlDeviceGetGpuFabricInfo: 'int nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, _Out_ nvmlGpuFabricInfo_t *gpuFabricInfo)',
  nvmlDeviceGetGpuFabricInfoV: 'int nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, _Inout_ nvmlGpuFabricInfo_v2_t *gpuFabricInfo)',
};

// Compile-time check that protocol.ts lists exactly the functions declared here.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : never) : never;
const sameNames: Same<NvmlFnName, (typeof NVML_FUNCTION_NAMES)[number]> = true;
void sameNames;

/** Stable numbering of the bound functions, shared with the main thread for watchdog reports. */
export const NVML_FUNCTIONS: readonly NvmlFnName[] = NVML_FUNCTION_NAMES;

const REQUIRED: readonly NvmlFnName[] = ['nvmlInit_v2', 'nvmlShutdown', 'nvmlDeviceGetCount_v2', 'nvmlDeviceGetHandleByIndex_v2'];

export interface LoadedNvml {
  api: Partial<NvmlApi>;
  /** Symbols the library does not export. */
  missing: NvmlFnName[];
}

/**
 * Opens the library and binds every symbol it has. Throws NvmlLoadError when the library cannot be
 * opened or lacks a required symbol.
 */
export function loadNvml(libraryPath: string): LoadedNvml {
  let lib: ReturnType<typeof koffi.load>;
  try {
    lib = koffi.load(libraryPath);
  } catch (err) {
    throw new NvmlLoadError(libraryPath, `cannot load ${libraryPath}: ${errorMessage(err)}`);
  }
  const api: Record<string, unknown> = {};
  const missing: NvmlFnName[] = [];
  for (const name of NVML_FUNCTIONS) {
    try {
      api[name] = lib.func(DECLS[name]);
    } catch {
      missing.push(name);
    }
  }
  const absent = REQUIRED.filter((n) => missing.includes(n));
  if (absent.length > 0) {
    throw new NvmlLoadError(
      libraryPath,
      `${libraryPath} lacks required NVML symbols ${absent.join(', ')}; it is not NVML or the driver is too old`,
    );
  }
  return { api: api, missing };
}

/** Reads a NUL-terminated C string out of a caller-allocated buffer. */
export function cString(buf: Buffer): string {
  const end = buf.indexOf(0);
  return buf.toString('latin1', 0, end < 0 ? buf.length : end);
}

/** Buffer sizes from nvml.h. */
export const BUF = { uuid: 96, name: 96, serial: 30, driverVersion: 80 } as const;

export { EVENT_BITS as EVENT, CLOCK_REASON_BITS as CLOCK_REASON } from './protocol.ts';

/** nvmlDeviceGetFieldValues field id for the driver's recommended recovery action. */
export const FI_DEV_GET_GPU_RECOVERY_ACTION = 230;
/** nvmlDeviceGetFieldValues field id for the number of NVLink links. */
export const FI_DEV_NVLINK_LINK_COUNT = 91;
/** nvmlNvLinkErrorCounter_t values read per link. */
export const NVLINK_COUNTERS = { replay: 0, recovery: 1, crcFlit: 2, crcData: 3 } as const;
