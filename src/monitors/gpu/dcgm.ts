/**
 * The DCGM push channel of the GPU monitor (gpu.source dcgm/auto): runs the DCGM source
 * (sources/dcgm), turns its policy violations into the same reasons and entities as NVML and the
 * kernel log (Xids through the one Xid policy), so one fault seen several ways is one problem, and
 * treats a lost host engine as a monitoring failure: AcceleratedHardwareReady goes Unknown
 * (DcgmHostEngineUnavailable), never False, while it reconnects with backoff.
 */
import type { BuiltinFinding, FindingSink } from '../../api/types.ts';
import type { ReasonName } from '../../catalog/index.ts';
import { DcgmClient } from '../../sources/dcgm/client.ts';
import { ALL_POLICY_CONDITIONS, POLICY_COND, type DcgmDevice, type DcgmFailure, type DcgmViolation } from '../../sources/dcgm/protocol.ts';
import type { LogFn } from '../../sources/nvml/client.ts';
import { decideXid } from '../xid/policy.ts';
import type { GpuConfig } from './config.ts';
import { entityOf, gpuAttrs, gpuLabel, normalizePci, type GpuInfo } from './inventory.ts';

const MAX_BACKOFF_MS = 60_000;
const COMPONENT = 'gpu.dcgm';

/** Findings for one policy violation. `gpu` is the GPU DCGM named, matched to NVML's inventory by PCI address. */
export function dcgmFindings(v: DcgmViolation, gpu: Pick<GpuInfo, 'index' | 'uuid' | 'pci'>, cfg: GpuConfig): BuiltinFinding[] {
  const f = (reason: ReasonName, message: string, attrs: Record<string, string | number> = {}): BuiltinFinding => ({
    reason,
    message: `${gpuLabel(gpu)}: ${message} (DCGM policy violation)`,
    source: 'dcgm',
    entity: entityOf(gpu),
    at: v.at,
    attrs: { ...gpuAttrs(gpu), dcgmGpuId: v.gpuId, ...attrs },
  });
  switch (v.condition) {
    case POLICY_COND.XID: {
      const d = decideXid(
        { code: v.xid ?? 0, pci: gpu.pci, index: gpu.index },
        { fatalXids: cfg.fatalXids, recoveryActionsFatal: cfg.thresholds.recoveryActionsFatal },
      );
      return [{ ...f(d.reason, `Xid ${v.xid} (${d.why})`, d.attrs), entity: d.entity }];
    }
    case POLICY_COND.DBE:
      return [f('NvidiaDoubleBitError', `${v.dbe?.count ?? 0} uncorrectable (double-bit) ECC errors`, { count: v.dbe?.count ?? 0 })];
    case POLICY_COND.PCI:
      return [f('NvidiaPCIeError', `PCIe replay counter at ${v.pciReplays}, above DCGM's rate limit`, { replays: v.pciReplays ?? 0 })];
    case POLICY_COND.MAX_PAGES_RETIRED: {
      const p = v.retiredPages ?? { sbe: 0, dbe: 0 };
      return [f('NvidiaPageRetirement', `${p.sbe + p.dbe} retired pages (${p.sbe} SBE, ${p.dbe} DBE), at or above the limit`, p)];
    }
    case POLICY_COND.THERMAL:
      return [
        f('NvidiaThermalError', `temperature ${v.temperatureC} °C violated the thermal policy`, { temperatureC: v.temperatureC ?? 0 }),
      ];
    case POLICY_COND.POWER:
      return [f('NvidiaPowerError', `power ${v.powerW} W violated the power policy`, { powerW: v.powerW ?? 0 })];
    case POLICY_COND.NVLINK:
      return [
        f('NvidiaNVLinkErrorCounters', `NVLink error counter (DCGM field ${v.nvlink?.fieldId}) at ${v.nvlink?.counter}`, {
          fieldId: v.nvlink?.fieldId ?? 0,
          counter: v.nvlink?.counter ?? 0,
        }),
      ];
    default:
      return [];
  }
}

export interface DcgmChannelOptions {
  config: GpuConfig;
  log: LogFn;
  out: () => FindingSink | null;
  /** NVML's view of the GPU at a PCI address, for index and UUID in messages. */
  gpuByPci: (pci: string) => GpuInfo | undefined;
  now: () => number;
}

export interface DcgmStatus {
  state: 'starting' | 'running' | 'lost' | 'failed' | 'stopped';
  detail: string | null;
  devices: DcgmDevice[];
}

export class DcgmChannel {
  private client: DcgmClient | null = null;
  private timer: NodeJS.Timeout | null = null;
  private backoffMs = 1_000;
  private stopped = false;
  private down = false;
  private byId = new Map<number, DcgmDevice>();
  private everReady = false;
  status: DcgmStatus = { state: 'starting', detail: null, devices: [] };

  constructor(
    private readonly opts: DcgmChannelOptions & {
      /** For gpu.source auto: a failure before the first registration is only returned (the caller falls back to NVML). */
      probeOnly?: boolean;
    },
  ) {}

  /** Connects and registers. Resolves null once policies are registered, or the failure. */
  start(): Promise<DcgmFailure | null> {
    return new Promise((resolve) => {
      const c = this.opts.config;
      const client = new DcgmClient(
        {
          libraryPath: c.dcgm.libraryPath,
          mode: c.dcgm.mode,
          address: c.dcgm.address,
          unixSocket: c.dcgm.unixSocket,
          connectTimeoutMs: c.dcgm.connectTimeout,
          probeMs: c.dcgm.probeInterval,
          conditions: ALL_POLICY_CONDITIONS,
          thresholds: { temperatureC: c.dcgm.temperatureC, powerW: c.dcgm.powerW, maxRetiredPages: c.dcgm.maxRetiredPages },
          watchdogMs: c.watchdog,
        },
        {
          ready: (devices) => {
            this.byId = new Map(devices.map((d) => [d.gpuId, d]));
            this.status = { state: 'running', detail: null, devices };
            this.backoffMs = 1_000;
            this.everReady = true;
            this.opts.log({ devices, mode: c.dcgm.mode, address: c.dcgm.address }, 'DCGM policies registered');
            this.report(true);
            resolve(null);
          },
          violation: (v) => this.onViolation(v),
          lost: (f) => {
            this.broken('lost', f.message);
            resolve(f);
          },
          failed: (f) => {
            this.broken('failed', f.message);
            resolve(f);
          },
          hang: (h) => {
            const msg = `${h.fn} did not return within ${h.afterMs} ms`;
            this.broken('failed', msg);
            resolve({ fn: h.fn, rc: null, message: msg });
          },
        },
      );
      this.client = client;
      client.start();
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.status = { ...this.status, state: 'stopped' };
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.client?.stop();
    this.client = null;
  }

  /** Once DCGM was chosen, any loss is a monitoring failure: Unknown, then reconnect with backoff. */
  private broken(state: 'lost' | 'failed', message: string): void {
    this.status = { ...this.status, state, detail: message };
    if (this.stopped || (this.opts.probeOnly && !this.everReady)) return;
    this.opts.log({ err: message, retryInMs: this.backoffMs }, state === 'lost' ? 'DCGM host engine connection lost' : 'DCGM unusable');
    this.report(false, `DCGM cannot see: ${message}`);
    const delay = this.backoffMs;
    this.backoffMs = Math.min(MAX_BACKOFF_MS, this.backoffMs * 2);
    this.timer = setTimeout(() => {
      this.timer = null;
      if (!this.stopped) void this.start();
    }, delay);
    this.timer.unref();
  }

  private report(up: boolean, message?: string): void {
    if (up === !this.down) return;
    this.down = !up;
    this.opts.out()?.source({
      component: COMPONENT,
      conditions: ['AcceleratedHardwareReady'],
      up,
      at: this.opts.now(),
      ...(up ? {} : { reason: 'DcgmHostEngineUnavailable', message: message ?? 'DCGM cannot see' }),
    });
  }

  private onViolation(v: DcgmViolation): void {
    if (this.stopped) return;
    const dev = this.byId.get(v.gpuId);
    const pci = dev?.pciBusId ? normalizePci(dev.pciBusId) : null;
    const known = pci ? this.opts.gpuByPci(pci) : undefined;
    const gpu = known ?? { index: v.gpuId, uuid: dev?.uuid ?? null, pci };
    for (const f of dcgmFindings(v, gpu, this.opts.config)) this.opts.out()?.finding(f);
  }
}
