/**
 * The koffi binding to DCGM (libdcgm.so.4): the FFI declarations Vigil uses and the struct
 * layouts it reads or fills, written from dcgm_structs.h / dcgm_agent.h (LP64). Load it only inside
 * the worker thread (worker.ts). Big structs travel as Buffers with fixed offsets, checked by
 * the C double's _Static_asserts (native/fake-dcgm).
 */
import koffi from 'koffi';
import { errorMessage, VigilError } from '../../util/errors.ts';
import { DCGM_FUNCTION_NAMES, type DcgmFnName } from './protocol.ts';

/** MAKE_DCGM_VERSION(type, ver): sizeof(type) | ver << 24. */
const version = (size: number, ver: number) => (size | (ver << 24)) >>> 0;

export const CONNECT_PARAMS_V2 = { size: 16, version: version(16, 2) };
/** dcgmDeviceAttributes_v3: identifiers start at 3120; pciBusId and uuid are char[256] inside. */
export const DEVICE_ATTRIBUTES_V3 = { size: 5220, version: version(5220, 3), pciBusId: 3120 + 516, uuid: 3120 + 1028, strLen: 256 };
/** dcgmPolicy_v1: seven ints, then parms[7] of {enum tag; union {uint; ulonglong}} (16 bytes, 8-aligned). */
export const POLICY_V1 = { size: 144, version: version(144, 1), parms: 32, parmSize: 16 };
/** dcgmPolicyCallbackResponse_v2: version, condition, 16-byte union, gpuId. */
export const CALLBACK_RESPONSE_V2 = { size: 32, version: version(32, 2), val: 8, gpuId: 24 };
export const DCGM_GROUP_ALL_GPUS = 0x7fffffff;
export const DCGM_OPERATION_MODE_AUTO = 1;

koffi.struct('dcgmConnectV2Params_v2', { version: 'uint', persistAfterDisconnect: 'uint', timeoutMs: 'uint', addressIsUnixSocket: 'uint' });
const callbackProto = koffi.proto('int dcgmPolicyCallback(void *response, uint64_t userData)');

const PROTOTYPES: Record<DcgmFnName | 'dcgmErrorString', string> = {
  dcgmInit: 'int dcgmInit()',
  dcgmShutdown: 'int dcgmShutdown()',
  dcgmConnect_v2: 'int dcgmConnect_v2(const char *ipAddress, dcgmConnectV2Params_v2 *params, _Out_ uintptr_t *pDcgmHandle)',
  dcgmStartEmbedded: 'int dcgmStartEmbedded(int opMode, _Out_ uintptr_t *pDcgmHandle)',
  dcgmStopEmbedded: 'int dcgmStopEmbedded(uintptr_t pDcgmHandle)',
  dcgmDisconnect: 'int dcgmDisconnect(uintptr_t pDcgmHandle)',
  dcgmGetAllSupportedDevices: 'int dcgmGetAllSupportedDevices(uintptr_t pDcgmHandle, _Out_ uint32_t *gpuIdList, _Out_ int *count)',
  dcgmGetDeviceAttributes: 'int dcgmGetDeviceAttributes(uintptr_t pDcgmHandle, uint32_t gpuId, _Inout_ void *pDcgmAttr)',
  dcgmPolicySet: 'int dcgmPolicySet(uintptr_t pDcgmHandle, uintptr_t groupId, void *policy, uintptr_t statusHandle)',
  dcgmPolicyRegister_v2:
    'int dcgmPolicyRegister_v2(uintptr_t pDcgmHandle, uintptr_t groupId, int condition, dcgmPolicyCallback *cb, uint64_t userData)',
  dcgmPolicyUnregister: 'int dcgmPolicyUnregister(uintptr_t pDcgmHandle, uintptr_t groupId, int condition)',
  dcgmErrorString: 'const char *dcgmErrorString(int result)',
};

export type DcgmCall = (...args: unknown[]) => unknown;
export type DcgmApi = Record<DcgmFnName | 'dcgmErrorString', DcgmCall>;

/** The DCGM library could not be opened, or lacks a symbol Vigil needs. */
export class DcgmLoadError extends VigilError {
  override readonly name = 'DcgmLoadError';
  constructor(message: string) {
    super('VIGIL_E_DCGM_LOAD', message);
  }
}

export function loadDcgm(libraryPath: string): DcgmApi {
  let lib: ReturnType<typeof koffi.load>;
  try {
    lib = koffi.load(libraryPath);
  } catch (err) {
    throw new DcgmLoadError(`cannot load the DCGM library ${libraryPath}: ${errorMessage(err)}`);
  }
  const api: Partial<DcgmApi> = {};
  for (const name of [...DCGM_FUNCTION_NAMES, 'dcgmErrorString'] as const) {
    try {
      api[name] = lib.func(PROTOTYPES[name]) as DcgmCall;
    } catch (err) {
      throw new DcgmLoadError(`${libraryPath} lacks ${name}: ${errorMessage(err)}`);
    }
  }
  return api as DcgmApi;
}

/** Registers a JS function as the policy callback (koffi queues calls from DCGM's thread onto this thread's loop). */
export function registerCallback(fn: (response: unknown, userData: unknown) => number): unknown {
  return koffi.register(fn, koffi.pointer(callbackProto));
}

/** Copies `size` bytes that a native pointer points at. */
export function readBytes(ptr: unknown, size: number): Buffer {
  return Buffer.from(koffi.decode(ptr, 'uint8_t', size) as ArrayLike<number>);
}

/** A NUL-terminated string inside a buffer. */
export function cStringAt(buf: Buffer, offset: number, len: number): string | null {
  const s = buf.subarray(offset, offset + len);
  const end = s.indexOf(0);
  const text = s.toString('utf8', 0, end < 0 ? len : end);
  return text.length ? text : null;
}
