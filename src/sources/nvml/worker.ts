/**
 * NVML worker thread. Every NVML call Vigil makes happens here, never on the main thread: a call on
 * a hanging GPU (or nvmlEventSetWait_v2, which blocks by design) only ever stalls this thread, and
 * the main thread's watchdog (client.ts) abandons it.
 *
 * Two roles:
 * - poll: answers init/poll requests synchronously, one at a time.
 * - events: registers event sets and loops on nvmlEventSetWait_v2 with a bounded timeout, checking
 *   a shared stop flag between waits, posting each event to the main thread as it arrives.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { performance } from 'node:perf_hooks';
import { NvmlError, NvmlLoadError, NVML_RETURN, RC_MISSING_SYMBOL, isGpuGone, isUnsupported } from './errors.ts';
import {
  BUF,
  EVENT,
  FABRIC_INFO_V2,
  FI_DEV_GET_GPU_RECOVERY_ACTION,
  FI_DEV_NVLINK_LINK_COUNT,
  NVML_FUNCTIONS,
  cString,
  fieldValue,
  loadNvml,
  type EventData,
  type FieldValue,
  type GpuFabricInfo,
  type Handle,
  type NvmlApi,
  type NvmlFnName,
  type PciInfo,
} from './native.ts';
import {
  CTL_BUSY,
  CTL_FN,
  CTL_GPU,
  CTL_SEQ,
  CTL_STOP,
  type CallStats,
  type EventDevice,
  type EventMessage,
  type GpuPoll,
  type GpuSample,
  type InitResult,
  type PollRequest,
  type PollRequestArgs,
  type PollResponse,
  type PollResult,
  type RawIdentity,
  type SerializedError,
  type WorkerInit,
} from './protocol.ts';

const FN_ID = new Map(NVML_FUNCTIONS.map((n, i) => [n, i]));

/** Wraps the bound functions: publishes the call in progress for the watchdog and keeps stats. */
class Caller {
  stats: CallStats = [];
  gpu = -1;
  constructor(
    readonly api: Partial<NvmlApi>,
    readonly missing: readonly string[],
    private readonly ctl: Int32Array,
  ) {}

  has(name: NvmlFnName): boolean {
    return this.api[name] !== undefined;
  }

  call<K extends Exclude<NvmlFnName, 'nvmlErrorString'>>(name: K, ...args: Parameters<NvmlApi[K]>): number {
    const fn = this.api[name] as ((...a: unknown[]) => number) | undefined;
    if (!fn) return RC_MISSING_SYMBOL;
    const id = FN_ID.get(name)!;
    Atomics.store(this.ctl, CTL_FN, id);
    Atomics.store(this.ctl, CTL_GPU, this.gpu);
    Atomics.store(this.ctl, CTL_BUSY, 1);
    Atomics.add(this.ctl, CTL_SEQ, 1);
    const t0 = performance.now();
    const rc = fn(...args);
    const ms = performance.now() - t0;
    Atomics.store(this.ctl, CTL_BUSY, 0);
    Atomics.add(this.ctl, CTL_SEQ, 1);
    this.stats.push(id, ms, rc);
    return rc;
  }

  takeStats(): CallStats {
    const s = this.stats;
    this.stats = [];
    return s;
  }
}

function serialize(err: unknown): SerializedError {
  if (err instanceof NvmlError) return { name: err.name, message: err.message, fn: err.fn, code: err.rc };
  if (err instanceof NvmlLoadError) return { name: err.name, message: err.message, libraryPath: err.libraryPath };
  if (err instanceof Error) return { name: err.name, message: err.message };
  return { name: 'Error', message: String(err) };
}

function open(init: WorkerInit): Caller {
  const { api, missing } = loadNvml(init.libraryPath);
  const c = new Caller(api, missing, new Int32Array(init.control));
  const rc = c.call('nvmlInit_v2');
  if (rc !== NVML_RETURN.SUCCESS) throw new NvmlError('nvmlInit_v2', rc);
  return c;
}

function driverVersion(c: Caller): string | null {
  const buf = Buffer.alloc(BUF.driverVersion);
  return c.call('nvmlSystemGetDriverVersion', buf, buf.length) === 0 ? cString(buf) : null;
}

function deviceCount(c: Caller): number {
  const n: [number] = [0];
  const rc = c.call('nvmlDeviceGetCount_v2', n);
  if (rc !== NVML_RETURN.SUCCESS) throw new NvmlError('nvmlDeviceGetCount_v2', rc);
  return n[0];
}

/** Reads the identity of one GPU. Returns the failing call when the GPU is gone. */
function identity(c: Caller, index: number, dev: Handle): { id: RawIdentity; gone: { fn: string; rc: number } | null } {
  const id: RawIdentity = { index, uuid: null, name: null, busId: null, serial: null };
  const str = (fn: 'nvmlDeviceGetUUID' | 'nvmlDeviceGetName' | 'nvmlDeviceGetSerial', size: number) => {
    const buf = Buffer.alloc(size);
    const rc = c.call(fn, dev, buf, size);
    return { rc, value: rc === 0 ? cString(buf) : null };
  };
  const steps: [string, () => number][] = [
    [
      'nvmlDeviceGetUUID',
      () => {
        const r = str('nvmlDeviceGetUUID', BUF.uuid);
        id.uuid = r.value;
        return r.rc;
      },
    ],
    [
      'nvmlDeviceGetPciInfo_v3',
      () => {
        const p: Partial<PciInfo> = {};
        const rc = c.call('nvmlDeviceGetPciInfo_v3', dev, p);
        if (rc === 0) id.busId = p.busId ?? null;
        return rc;
      },
    ],
    [
      'nvmlDeviceGetName',
      () => {
        const r = str('nvmlDeviceGetName', BUF.name);
        id.name = r.value;
        return r.rc;
      },
    ],
    [
      'nvmlDeviceGetSerial',
      () => {
        const r = str('nvmlDeviceGetSerial', BUF.serial);
        id.serial = r.value;
        return r.rc;
      },
    ],
  ];
  for (const [fn, step] of steps) {
    const rc = step();
    if (isGpuGone(rc)) return { id, gone: { fn, rc } };
  }
  return { id, gone: null };
}

/** Thrown inside sample() to stop querying a GPU that is lost or needs a reset. */
class Gone extends Error {
  constructor(
    readonly fn: string,
    readonly rc: number,
  ) {
    super(`${fn}: GPU is gone (rc ${rc})`);
  }
}

/** Reads every health signal of one GPU (the per-poll cost; see bench/gpu.ts). */
function sample(c: Caller, dev: Handle, maxNvLinks: number): GpuSample {
  const s: GpuSample = {
    remappedRows: null,
    retiredPages: null,
    eccUncorrectedVolatile: null,
    eccCorrectedVolatile: null,
    eccMode: null,
    fabric: null,
    pcie: { replay: null, gen: null, maxGen: null, width: null, maxWidth: null },
    clocksEventReasons: null,
    temperature: { current: null, slowdown: null, shutdown: null },
    nvlink: null,
    recoveryAction: null,
    inforom: null,
    errors: [],
    missing: [],
  };
  // ok(): true on success; records anything but "not supported"; throws Gone on a lost GPU.
  const ok = (fn: NvmlFnName, rc: number): boolean => {
    if (rc === NVML_RETURN.SUCCESS) return true;
    if (isGpuGone(rc)) throw new Gone(fn, rc);
    if (rc === RC_MISSING_SYMBOL) s.missing.push(fn);
    else if (!isUnsupported(rc)) s.errors.push({ fn, rc });
    return false;
  };
  const u = (): [number] => [0];
  const big = (): [number | bigint] => [0];

  const corr = u(),
    unc = u(),
    pend = u(),
    fail = u();
  if (ok('nvmlDeviceGetRemappedRows', c.call('nvmlDeviceGetRemappedRows', dev, corr, unc, pend, fail))) {
    s.remappedRows = { corr: corr[0], unc: unc[0], pending: pend[0] !== 0, failure: fail[0] !== 0 };
  }
  // Retired pages only exist before Ampere; there, row remapping is NOT_SUPPORTED and vice versa.
  if (!s.remappedRows) {
    const count = (cause: number): number | null => {
      const n: [number] = [0];
      const rc = c.call('nvmlDeviceGetRetiredPages', dev, cause, n, null);
      return rc === NVML_RETURN.INSUFFICIENT_SIZE || ok('nvmlDeviceGetRetiredPages', rc) ? n[0] : null;
    };
    const sbe = count(0);
    const dbe = sbe === null ? null : count(1);
    if (sbe !== null && dbe !== null) {
      const p = u();
      const pending = ok('nvmlDeviceGetRetiredPagesPendingStatus', c.call('nvmlDeviceGetRetiredPagesPendingStatus', dev, p))
        ? p[0] !== 0
        : null;
      s.retiredPages = { sbe, dbe, pending };
    }
  }
  const ecc = big();
  // errorType 1 = uncorrected, counterType 0 = volatile (since driver load).
  if (ok('nvmlDeviceGetTotalEccErrors', c.call('nvmlDeviceGetTotalEccErrors', dev, 1, 0, ecc))) s.eccUncorrectedVolatile = Number(ecc[0]);
  const corrected = big();
  if (ok('nvmlDeviceGetTotalEccErrors', c.call('nvmlDeviceGetTotalEccErrors', dev, 0, 0, corrected)))
    s.eccCorrectedVolatile = Number(corrected[0]);
  const eccCur = u(),
    eccPend = u();
  if (ok('nvmlDeviceGetEccMode', c.call('nvmlDeviceGetEccMode', dev, eccCur, eccPend)))
    s.eccMode = { current: eccCur[0] !== 0, pending: eccPend[0] !== 0 };
  s.fabric = fabric(c, dev, ok);

  const pcieRead = (
    fn:
      | 'nvmlDeviceGetPcieReplayCounter'
      | 'nvmlDeviceGetCurrPcieLinkGeneration'
      | 'nvmlDeviceGetMaxPcieLinkGeneration'
      | 'nvmlDeviceGetCurrPcieLinkWidth'
      | 'nvmlDeviceGetMaxPcieLinkWidth',
  ) => {
    const v = u();
    return ok(fn, c.call(fn, dev, v)) ? v[0] : null;
  };
  s.pcie = {
    replay: pcieRead('nvmlDeviceGetPcieReplayCounter'),
    gen: pcieRead('nvmlDeviceGetCurrPcieLinkGeneration'),
    maxGen: pcieRead('nvmlDeviceGetMaxPcieLinkGeneration'),
    width: pcieRead('nvmlDeviceGetCurrPcieLinkWidth'),
    maxWidth: pcieRead('nvmlDeviceGetMaxPcieLinkWidth'),
  };

  // The pre-R535 name is the fallback: a missing symbol degrades to the old one, not to nothing.
  const reasons = big();
  const clockFn = c.has('nvmlDeviceGetCurrentClocksEventReasons')
    ? 'nvmlDeviceGetCurrentClocksEventReasons'
    : 'nvmlDeviceGetCurrentClocksThrottleReasons';
  if (ok(clockFn, c.call(clockFn, dev, reasons))) s.clocksEventReasons = Number(reasons[0]);

  const temp = (fn: 'nvmlDeviceGetTemperature' | 'nvmlDeviceGetTemperatureThreshold', arg: number) => {
    const v = u();
    return ok(fn, c.call(fn, dev, arg, v)) ? v[0] : null;
  };
  s.temperature = {
    current: temp('nvmlDeviceGetTemperature', 0), // NVML_TEMPERATURE_GPU
    shutdown: temp('nvmlDeviceGetTemperatureThreshold', 0), // ..._THRESHOLD_SHUTDOWN
    slowdown: temp('nvmlDeviceGetTemperatureThreshold', 1), // ..._THRESHOLD_SLOWDOWN
  };

  s.nvlink = nvlinks(c, dev, maxNvLinks, ok);

  const fv: Partial<FieldValue> = { fieldId: FI_DEV_GET_GPU_RECOVERY_ACTION, scopeId: 0 };
  if (ok('nvmlDeviceGetFieldValues', c.call('nvmlDeviceGetFieldValues', dev, 1, fv)) && fv.nvmlReturn === 0) {
    s.recoveryAction = fieldValue(fv);
  }

  const inforomRc = c.call('nvmlDeviceValidateInforom', dev);
  if (inforomRc === NVML_RETURN.CORRUPTED_INFOROM) s.inforom = 'corrupted';
  else if (ok('nvmlDeviceValidateInforom', inforomRc)) s.inforom = 'valid';
  return s;
}

/**
 * NVSwitch fabric state: the versioned call (with the health mask) when the driver has it, else the
 * older unversioned one. NOT_SUPPORTED (no NVSwitch fabric, or a pre-Hopper GPU) is null.
 */
function fabric(c: Caller, dev: Handle, ok: (fn: NvmlFnName, rc: number) => boolean): GpuSample['fabric'] {
  const uuid = (b: ArrayLike<number> | undefined) =>
    Array.from(b ?? [], (x) => x.toString(16).padStart(2, '0'))
      .join('')
      .replace(/^0+$/, '');
  if (c.has('nvmlDeviceGetGpuFabricInfoV')) {
    const v: Partial<GpuFabricInfo> = {
      version: FABRIC_INFO_V2,
      clusterUuid: new Array<number>(16).fill(0),
      status: 0,
      cliqueId: 0,
      state: 0,
      healthMask: 0,
    };
    const rc = c.call('nvmlDeviceGetGpuFabricInfoV', dev, v);
    // An older driver that knows the call but not struct v2 says ARGUMENT_VERSION_MISMATCH: use v1.
    if (rc !== NVML_RETURN.ARGUMENT_VERSION_MISMATCH) {
      return ok('nvmlDeviceGetGpuFabricInfoV', rc)
        ? {
            state: v.state ?? 0,
            status: v.status ?? 0,
            cliqueId: v.cliqueId ?? 0,
            clusterUuid: uuid(v.clusterUuid),
            healthMask: v.healthMask ?? 0,
          }
        : null;
    }
  }
  const f: Partial<GpuFabricInfo> = {};
  if (!ok('nvmlDeviceGetGpuFabricInfo', c.call('nvmlDeviceGetGpuFabricInfo', dev, f))) return null;
  return { state: f.state ?? 0, status: f.status ?? 0, cliqueId: f.cliqueId ?? 0, clusterUuid: uuid(f.clusterUuid), healthMask: null };
}

/**
 * Link states and error counters. The link count comes from field NVLINK_LINK_COUNT when the driver
 * has it; otherwise links are probed until the driver says there are no more.
 */
function nvlinks(c: Caller, dev: Handle, maxLinks: number, ok: (fn: NvmlFnName, rc: number) => boolean): GpuSample['nvlink'] {
  let links = maxLinks;
  const fv: Partial<FieldValue> = { fieldId: FI_DEV_NVLINK_LINK_COUNT, scopeId: 0 };
  if (c.call('nvmlDeviceGetFieldValues', dev, 1, fv) === 0 && fv.nvmlReturn === 0) links = Math.min(maxLinks, fieldValue(fv) ?? maxLinks);
  const active: boolean[] = [];
  const counters: (number[] | null)[] = [];
  for (let link = 0; link < links; link++) {
    const a: [number] = [0];
    const rc = c.call('nvmlDeviceGetNvLinkState', dev, link, a);
    // INVALID_ARGUMENT past the last link; NOT_SUPPORTED on GPUs without NVLink.
    if (rc === NVML_RETURN.INVALID_ARGUMENT || rc === NVML_RETURN.NOT_SUPPORTED) break;
    if (!ok('nvmlDeviceGetNvLinkState', rc)) break;
    active.push(a[0] !== 0);
    let row: number[] | null = null;
    if (a[0] !== 0) {
      row = [];
      for (let k = 0; k < 4; k++) {
        const v: [number | bigint] = [0];
        if (!ok('nvmlDeviceGetNvLinkErrorCounter', c.call('nvmlDeviceGetNvLinkErrorCounter', dev, link, k, v))) {
          row = null;
          break;
        }
        row.push(Number(v[0]));
      }
    }
    counters.push(row);
  }
  return active.length > 0 ? { active, counters } : null;
}

function poll(c: Caller, args: PollRequestArgs, progress: (id: RawIdentity) => void): PollResult {
  c.gpu = -1;
  const count = deviceCount(c);
  const gpus: GpuPoll[] = [];
  for (let index = 0; index < count; index++) {
    const entry: GpuPoll = { index, handleRc: 0, identity: null, gone: null, sample: null, skipped: false };
    gpus.push(entry);
    if (args.skip.includes(index)) {
      entry.skipped = true;
      continue;
    }
    c.gpu = index;
    const h: [Handle | null] = [null];
    entry.handleRc = c.call('nvmlDeviceGetHandleByIndex_v2', index, h);
    if (entry.handleRc !== 0 || h[0] === null) {
      if (isGpuGone(entry.handleRc)) entry.gone = { fn: 'nvmlDeviceGetHandleByIndex_v2', rc: entry.handleRc };
      continue;
    }
    const { id, gone } = identity(c, index, h[0]);
    entry.identity = id;
    progress(id);
    entry.gone = gone;
    if (gone || !args.samples) continue;
    try {
      entry.sample = sample(c, h[0], args.maxNvLinks);
    } catch (err) {
      if (!(err instanceof Gone)) throw err;
      entry.gone = { fn: err.fn, rc: err.rc };
    }
  }
  c.gpu = -1;
  return { count, driverVersion: driverVersion(c), gpus };
}

// ------------------------------------------------------------------ poll role

function runPollRole(init: WorkerInit): void {
  let c: Caller | null = null;
  parentPort!.on('message', (req: PollRequest) => {
    let res: PollResponse;
    try {
      let result: unknown;
      if (req.op === 'init') {
        if (!c) c = open(init);
        result = { driverVersion: driverVersion(c), missing: [...c.missing] } satisfies InitResult;
      } else if (req.op === 'poll') {
        if (!c) throw new NvmlError('nvmlInit_v2', NVML_RETURN.UNINITIALIZED, 'worker not initialised');
        result = poll(c, req.args, (progress) => parentPort!.postMessage({ id: req.id, progress } satisfies PollResponse));
      } else {
        if (c) c.call('nvmlShutdown');
        c = null;
        result = null;
      }
      res = { id: req.id, ok: true, result, stats: c?.takeStats() ?? [] };
    } catch (err) {
      res = { id: req.id, ok: false, error: serialize(err), stats: c?.takeStats() ?? [] };
    }
    parentPort!.postMessage(res);
  });
}

// ------------------------------------------------------------------ events role

function runEventsRole(init: WorkerInit): void {
  const ctl = new Int32Array(init.control);
  const post = (m: EventMessage) => parentPort!.postMessage(m);
  let c: Caller;
  try {
    c = open(init);
  } catch (err) {
    post({ kind: 'failed', error: serialize(err), stats: [] });
    return;
  }
  for (const fn of ['nvmlEventSetCreate', 'nvmlDeviceRegisterEvents', 'nvmlEventSetWait_v2', 'nvmlEventSetFree'] as const) {
    if (!c.has(fn)) {
      post({
        kind: 'failed',
        error: serialize(new NvmlError(fn, RC_MISSING_SYMBOL, 'symbol missing from the NVML library')),
        stats: c.takeStats(),
      });
      c.call('nvmlShutdown');
      return;
    }
  }
  const setOut: [Handle | null] = [null];
  const setRc = c.call('nvmlEventSetCreate', setOut);
  if (setRc !== 0 || setOut[0] === null) {
    post({ kind: 'failed', error: serialize(new NvmlError('nvmlEventSetCreate', setRc)), stats: c.takeStats() });
    c.call('nvmlShutdown');
    return;
  }
  const set = setOut[0];
  const devices: EventDevice[] = [];
  const byHandle = new Map<Handle, { dev: EventDevice; handle: Handle }>();
  try {
    const count = deviceCount(c);
    for (let index = 0; index < count; index++) {
      c.gpu = index;
      const h: [Handle | null] = [null];
      const hrc = c.call('nvmlDeviceGetHandleByIndex_v2', index, h);
      const dev: EventDevice = { index, uuid: null, busId: null, mask: 0, rc: hrc };
      devices.push(dev);
      if (hrc !== 0 || h[0] === null) continue;
      const { id } = identity(c, index, h[0]);
      dev.uuid = id.uuid;
      dev.busId = id.busId;
      // Register only what the device supports: one unsupported bit fails the whole mask.
      const sup: [number | bigint] = [0];
      const srcRc = c.call('nvmlDeviceGetSupportedEventTypes', h[0], sup);
      const mask =
        srcRc === 0 ? Number(BigInt(sup[0]) & BigInt(init.eventMask)) : init.eventMask & (EVENT.XidCriticalError | EVENT.DoubleBitEccError);
      dev.rc = mask ? c.call('nvmlDeviceRegisterEvents', h[0], mask, set) : NVML_RETURN.NOT_SUPPORTED;
      dev.mask = dev.rc === 0 ? mask : 0;
      byHandle.set(h[0], { dev, handle: h[0] });
    }
  } catch (err) {
    post({ kind: 'failed', error: serialize(err), stats: c.takeStats() });
    c.call('nvmlEventSetFree', set);
    c.call('nvmlShutdown');
    return;
  }
  c.gpu = -1;
  post({ kind: 'ready', devices, missing: [...c.missing] });

  let lastStats = Date.now();
  while (Atomics.load(ctl, CTL_STOP) === 0) {
    const data: Partial<EventData> = {};
    c.gpu = -1;
    const rc = c.call('nvmlEventSetWait_v2', set, data, init.eventWaitMs);
    const hit = data.device != null ? byHandle.get(data.device) : undefined;
    if (rc === NVML_RETURN.SUCCESS) {
      const type = Number(data.eventType ?? 0);
      let recoveryAction: number | null = null;
      // Xid 154 says the recovery action changed: read the new one, which its kernel line states.
      // Xid 144-150 (NVLink5): the action tells a fatal one (reset/reboot needed) from a non-fatal.
      const xid = (type & EVENT.XidCriticalError) !== 0 ? Number(data.eventData ?? 0) : 0;
      const readAction = xid === 154 || (xid >= 144 && xid <= 150);
      if ((type & EVENT.GpuRecoveryAction || readAction) && hit) {
        c.gpu = hit.dev.index;
        const fv: Partial<FieldValue> = { fieldId: FI_DEV_GET_GPU_RECOVERY_ACTION, scopeId: 0 };
        if (c.call('nvmlDeviceGetFieldValues', hit.handle, 1, fv) === 0 && fv.nvmlReturn === 0) recoveryAction = fieldValue(fv);
      }
      post({
        kind: 'event',
        event: {
          index: hit?.dev.index ?? null,
          uuid: hit?.dev.uuid ?? null,
          busId: hit?.dev.busId ?? null,
          eventType: type,
          eventData: Number(data.eventData ?? 0),
          gpuInstanceId: data.gpuInstanceId ?? 0xffffffff,
          computeInstanceId: data.computeInstanceId ?? 0xffffffff,
          recoveryAction,
          at: Date.now(),
        },
        stats: c.takeStats(),
      });
    } else if (rc !== NVML_RETURN.TIMEOUT) {
      post({
        kind: 'waitError',
        rc,
        index: hit?.dev.index ?? null,
        uuid: hit?.dev.uuid ?? null,
        busId: hit?.dev.busId ?? null,
        stats: c.takeStats(),
      });
      break;
    } else if (Date.now() - lastStats > 1_000) {
      lastStats = Date.now();
      post({ kind: 'stats', stats: c.takeStats() });
    }
  }
  c.call('nvmlEventSetFree', set);
  c.call('nvmlShutdown');
  post({ kind: 'stats', stats: c.takeStats() });
}

if (!parentPort) throw new Error('worker.ts runs only as a worker thread (see client.ts)');
const init = workerData as WorkerInit;
if (init.role === 'poll') runPollRole(init);
else runEventsRole(init);
