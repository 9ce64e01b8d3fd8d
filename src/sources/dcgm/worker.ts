/**
 * DCGM worker thread. Every DCGM call Vigil makes happens here, never on the main thread: a call
 * to a wedged host engine only stalls this thread, and the main thread's watchdog (client.ts,
 * the CallWatch shared with NVML) abandons it.
 *
 * It connects (or starts DCGM embedded), sets and registers the policies, then stays idle: DCGM
 * calls the policy callback from its own thread, and koffi queues that call onto this thread's
 * event loop, so nothing here may block waiting (the connection probe is a short timer call).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { errorMessage, VigilError } from '../../util/errors.ts';
import { CTL_BUSY, CTL_FN, CTL_SEQ } from '../nvml/protocol.ts';
import {
  CALLBACK_RESPONSE_V2,
  CONNECT_PARAMS_V2,
  DCGM_GROUP_ALL_GPUS,
  DCGM_OPERATION_MODE_AUTO,
  DEVICE_ATTRIBUTES_V3,
  DcgmLoadError,
  POLICY_V1,
  cStringAt,
  loadDcgm,
  readBytes,
  registerCallback,
  type DcgmApi,
} from './native.ts';
import {
  DCGM_FUNCTION_NAMES,
  DCGM_RETURN,
  POLICY_COND,
  dcgmReturnName,
  type DcgmDevice,
  type DcgmFnName,
  type DcgmMessage,
  type DcgmRequest,
  type DcgmViolation,
  type DcgmWorkerInit,
} from './protocol.ts';

const init = workerData as DcgmWorkerInit;
const ctl = new Int32Array(init.control);
const post = (m: DcgmMessage) => parentPort!.postMessage(m);

class DcgmCallError extends VigilError {
  constructor(
    readonly fn: DcgmFnName,
    readonly rc: number,
    detail: string,
  ) {
    super('VIGIL_E_DCGM_CALL', `${fn} returned DCGM_ST_${dcgmReturnName(rc)} (${rc}): ${detail}`);
  }
}

let api: DcgmApi;
let handle: number | bigint = 0;
let connected = false;

/** One DCGM call, published in the control array so the watchdog can see it hang. */
function call(fn: DcgmFnName, ...args: unknown[]): number {
  Atomics.store(ctl, CTL_FN, DCGM_FUNCTION_NAMES.indexOf(fn));
  Atomics.store(ctl, CTL_BUSY, 1);
  Atomics.add(ctl, CTL_SEQ, 1);
  try {
    return api[fn](...args) as number;
  } finally {
    Atomics.store(ctl, CTL_BUSY, 0);
    Atomics.add(ctl, CTL_SEQ, 1);
  }
}

function must(fn: DcgmFnName, ...args: unknown[]): void {
  const rc = call(fn, ...args);
  if (rc !== DCGM_RETURN.OK) throw new DcgmCallError(fn, rc, String(api.dcgmErrorString(rc)));
}

function connect(): void {
  must('dcgmInit');
  const out: [number | bigint] = [0];
  if (init.mode === 'embedded') must('dcgmStartEmbedded', DCGM_OPERATION_MODE_AUTO, out);
  else {
    const params = {
      version: CONNECT_PARAMS_V2.version,
      persistAfterDisconnect: 0,
      timeoutMs: init.connectTimeoutMs,
      addressIsUnixSocket: init.unixSocket ? 1 : 0,
    };
    must('dcgmConnect_v2', init.address, params, out);
  }
  handle = out[0];
  connected = true;
}

function devices(): DcgmDevice[] {
  const ids = new Uint32Array(32);
  const count: [number] = [0];
  must('dcgmGetAllSupportedDevices', handle, ids, count);
  const list: DcgmDevice[] = [];
  for (const gpuId of ids.subarray(0, count[0])) {
    const attr = Buffer.alloc(DEVICE_ATTRIBUTES_V3.size);
    attr.writeUInt32LE(DEVICE_ATTRIBUTES_V3.version, 0);
    const rc = call('dcgmGetDeviceAttributes', handle, gpuId, attr);
    list.push({
      gpuId,
      pciBusId: rc === 0 ? cStringAt(attr, DEVICE_ATTRIBUTES_V3.pciBusId, DEVICE_ATTRIBUTES_V3.strLen) : null,
      uuid: rc === 0 ? cStringAt(attr, DEVICE_ATTRIBUTES_V3.uuid, DEVICE_ATTRIBUTES_V3.strLen) : null,
    });
  }
  return list;
}

/** dcgmPolicy_v1 for every condition asked for: booleans on, numbers at their thresholds. */
function policy(): Buffer {
  const b = Buffer.alloc(POLICY_V1.size);
  b.writeUInt32LE(POLICY_V1.version, 0);
  b.writeInt32LE(init.conditions, 4); // mode, isolation, action, validation, response: 0 (automated, none)
  const numbers: Record<number, number> = {
    [POLICY_COND.MAX_PAGES_RETIRED]: init.thresholds.maxRetiredPages,
    [POLICY_COND.THERMAL]: init.thresholds.temperatureC,
    [POLICY_COND.POWER]: init.thresholds.powerW,
  };
  // Parameter index i belongs to condition bit 1 << i (DBE, PCI, pages, thermal, power, NVLink, Xid).
  for (let i = 0; i < 7; i++) {
    const at = POLICY_V1.parms + i * POLICY_V1.parmSize;
    const n = numbers[1 << i];
    if (n === undefined)
      b.writeUInt32LE(1, at + 8); // tag BOOL (0), true
    else {
      b.writeUInt32LE(1, at); // tag LLONG
      b.writeBigUInt64LE(BigInt(n), at + 8);
    }
  }
  return b;
}

function decode(ptr: unknown): DcgmViolation {
  const b = readBytes(ptr, CALLBACK_RESPONSE_V2.size);
  const condition = b.readInt32LE(4);
  const v = CALLBACK_RESPONSE_V2.val;
  const u32 = (off: number) => b.readUInt32LE(v + off);
  const out: DcgmViolation = {
    gpuId: b.readUInt32LE(CALLBACK_RESPONSE_V2.gpuId),
    condition,
    timestampUs: Number(b.readBigInt64LE(v)),
    at: Date.now(),
  };
  if (condition === POLICY_COND.XID) out.xid = u32(8);
  else if (condition === POLICY_COND.DBE) out.dbe = { location: u32(8), count: u32(12) };
  else if (condition === POLICY_COND.PCI) out.pciReplays = u32(8);
  else if (condition === POLICY_COND.MAX_PAGES_RETIRED) out.retiredPages = { sbe: u32(8), dbe: u32(12) };
  else if (condition === POLICY_COND.THERMAL) out.temperatureC = u32(8);
  else if (condition === POLICY_COND.POWER) out.powerW = u32(8);
  else if (condition === POLICY_COND.NVLINK) out.nvlink = { fieldId: b.readUInt16LE(v + 8), counter: u32(12) };
  return out;
}

/** Lets a callback DCGM's thread is delivering right now run (koffi queued it onto this loop). */
const drain = () => new Promise((r) => setTimeout(r, 20));

/**
 * Unregisters, lets a callback in flight finish, then disconnects and shuts down: dcgmShutdown joins
 * DCGM's threads, which would deadlock on a callback still waiting for this thread.
 */
async function teardown(): Promise<void> {
  if (connected) {
    call('dcgmPolicyUnregister', handle, DCGM_GROUP_ALL_GPUS, init.conditions);
    await drain();
    call(init.mode === 'embedded' ? 'dcgmStopEmbedded' : 'dcgmDisconnect', handle);
    connected = false;
  }
  call('dcgmShutdown');
}

function failure(err: unknown) {
  if (err instanceof DcgmCallError) return { fn: err.fn, rc: err.rc, message: err.message };
  if (err instanceof DcgmLoadError) return { fn: null, rc: null, message: err.message };
  return { fn: null, rc: null, message: errorMessage(err) };
}

async function main(): Promise<void> {
  const timer: { probe?: NodeJS.Timeout } = {};
  const end = (m: DcgmMessage) => {
    clearInterval(timer.probe);
    post(m);
    // koffi's registered callback keeps this thread's loop alive: end the thread (not the process).
    setImmediate(() => process.exit(0));
  };
  try {
    api = loadDcgm(init.libraryPath);
    connect();
    const list = devices();
    must('dcgmPolicySet', handle, DCGM_GROUP_ALL_GPUS, policy(), 0);
    // The callback stays registered for the worker's life: DCGM's thread may still be delivering
    // one while we disconnect, and it dies with the thread.
    const cb = registerCallback((response) => {
      post({ kind: 'violation', violation: decode(response) });
      return 0;
    });
    must('dcgmPolicyRegister_v2', handle, DCGM_GROUP_ALL_GPUS, init.conditions, cb, 0);
    post({ kind: 'ready', devices: list });
  } catch (err) {
    try {
      if (api) await teardown();
    } catch {
      // best effort
    }
    end({ kind: 'failed', failure: failure(err) });
    return;
  }
  // Callbacks cannot say the host engine died: ask it now and then.
  timer.probe = setInterval(() => {
    const ids = new Uint32Array(32);
    const rc = call('dcgmGetAllSupportedDevices', handle, ids, [0]);
    if (rc !== DCGM_RETURN.CONNECTION_NOT_VALID) return;
    const msg = `dcgmGetAllSupportedDevices returned DCGM_ST_${dcgmReturnName(rc)} (${rc}): ${String(api.dcgmErrorString(rc))}`;
    connected = false;
    clearInterval(timer.probe);
    void drain().then(() => {
      call('dcgmShutdown');
      end({ kind: 'lost', failure: { fn: 'dcgmGetAllSupportedDevices', rc, message: msg } });
    });
  }, init.probeMs);
  parentPort!.on('message', (req: DcgmRequest) => {
    if (req.op !== 'stop') return;
    void teardown().finally(() => end({ kind: 'stopped' }));
  });
}

if (!parentPort) throw new Error('worker.ts runs only as a worker thread (see client.ts)');
void main();
