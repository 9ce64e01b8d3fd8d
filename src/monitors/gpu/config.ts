/**
 * The NVIDIA GPU monitor's configuration: the `gpu` section of the config file, and the monitor's
 * options (that section plus the fatal Xid list of the one Xid policy, `xid.fatal`, which the agent
 * passes in). Every option has a default, so `gpuConfigSchema.parse({})` is a working config.
 * Durations take milliseconds or a short duration string ('5m', '10s').
 *
 * Thresholds marked (N) come from NVIDIA/DCGM; (S) are Vigil's suggested defaults.
 */
import * as z from 'zod';
import { XID_POLICY } from '../../catalog/index.ts';
import { durationValue, positiveDuration } from '../../config/duration.ts';
import { DEFAULT_FATAL_XIDS, xidList } from '../../config/xid.ts';

const gpuThresholdsSchema = z.strictObject({
  /**
   * Allowed PCIe replays per lane per minute, by link generation: limit = ceil(rate × max width).
   * Gen4 1.0 and Gen5 1.9375 give DCGM's 16/min and 31/min at x16 (N); Gen1-3 follow DCGM's older
   * flat 8/min at x16 (N); Gen6 doubles Gen5 (S).
   */
  pcieReplayPerLanePerMinute: z
    .record(z.string().regex(/^[1-9]$/), z.number().positive())
    .default({ 1: 0.5, 2: 0.5, 3: 0.5, 4: 1, 5: 1.9375, 6: 3.875 }),
  /** Shortest window over which a replay rate is judged (a shorter poll gap keeps the baseline). */
  pcieReplayMinWindowMs: durationValue.default(60_000),
  /** Consecutive polls a HW clock-event bit must be set before it is reported (S). */
  clockEventPolls: z.number().int().min(1).default(2),
  /** Report when the temperature is within this many °C of the GPU's shutdown threshold (S). */
  shutdownMarginC: z.number().min(0).default(2),
  /** Retired pages (SBE + DBE) at or above this are reported, pre-Ampere GPUs (N: DCGM 60). */
  retiredPagesLimit: z.number().int().min(1).default(60),
  /** NVLink replay + recovery errors grown per poll, summed over links, to report (N: 1). */
  nvlinkReplayRecoveryDelta: z.number().int().min(1).default(1),
  /** NVLink CRC errors per second, summed over links, to report (N: DCGM 100/s). */
  nvlinkCrcPerSecond: z.number().positive().default(100),
  /** Active NVLink links expected per GPU; null = whatever was active at the first poll. */
  nvlinkExpectedActive: z.number().int().min(0).nullable().default(null),
  /** AER corrected errors (sysfs aer_dev_correctable) on one GPU or port within the window to report (S, as kernelLog.pcieCorrected). */
  aerCorrectedCount: z.number().int().min(1).default(20),
  aerCorrectedWindowMs: durationValue.default(3_600_000),
  /** Driver recovery actions (field 230) that are reported: 1 GPU reset, 2 node reboot, 4 drain and reset. */
  recoveryActionsFatal: z.array(z.number().int().min(0)).default([...XID_POLICY.recoveryActionsFatal]),
});

/** The DCGM push channel (gpu.source dcgm or auto). Thresholds marked (S) are Vigil's suggestions. */
const gpuDcgmSchema = z.strictObject({
  /** DCGM client library to dlopen. Tests point this at the fake (native/fake-dcgm). */
  libraryPath: z.string().min(1).default('libdcgm.so.4'),
  /** hostengine: attach to a running nv-hostengine; embedded: run the engine inside Vigil. */
  mode: z.enum(['hostengine', 'embedded']).default('hostengine'),
  /** Host engine address: "host:port" (port 5555 when left out) or, with unixSocket, a socket path. */
  address: z.string().min(1).default('localhost:5555'),
  unixSocket: z.boolean().default(false),
  connectTimeout: positiveDuration(5_000),
  /** How often the connection is checked; a lost one makes AcceleratedHardwareReady Unknown. */
  probeInterval: positiveDuration(5_000),
  /** Policy thresholds: GPU temperature (°C, S), power (W, S: an H100 SXM's TDP), retired pages (N: 60 as NVML's check). */
  temperatureC: z.number().int().min(1).default(95),
  powerW: z.number().int().min(1).default(700),
  maxRetiredPages: z.number().int().min(1).default(60),
});

export const gpuSectionSchema = z.strictObject({
  /**
   * Where pushed GPU faults come from: nvml (events, the default), dcgm (DCGM policy callbacks;
   * NVML still polls), or auto (DCGM when its library loads and the host engine answers, else NVML).
   */
  source: z.enum(['nvml', 'dcgm', 'auto']).default('nvml'),
  dcgm: gpuDcgmSchema.prefault({}),
  /** Off: the monitor never starts. On (default): it starts when sysfs shows an NVIDIA GPU. */
  enabled: z.boolean().default(true),
  /** NVML library to dlopen. Tests point this at the fake (native/fake-nvml). */
  libraryPath: z.string().min(1).default('libnvidia-ml.so.1'),
  /** Interval between polls when the monitor runs its own timer (S). */
  pollInterval: positiveDuration(300_000),
  /** Each interval is randomised by ± this fraction so a fleet does not poll in lockstep. */
  pollJitter: z.number().min(0).max(0.5).default(0.1),
  /** Budget for one NVML call; past it the call is reported (NvidiaNVMLTimeout) and abandoned (S). */
  watchdog: positiveDuration(10_000),
  /** Timeout of one nvmlEventSetWait_v2; the wait loop re-checks its stop flag this often. */
  eventWait: durationValue.pipe(z.number().int().min(10).max(5_000)).default(250),
  /** Subscribe to NVML events (Xid, double-bit ECC, ...). */
  events: z.boolean().default(true),
  /** Page-retirement events make the monitor poll early (remapped rows), at most once per this interval (S). */
  eventPollMinInterval: positiveDuration(30_000),
  /** GPUs expected on the node; null = the number of NVIDIA display/3D PCI functions in sysfs. */
  expectedCount: z.number().int().min(0).nullable().default(null),
  /** Threads left stuck in hung NVML calls before Vigil stops starting new ones. */
  maxStuckWorkers: z.number().int().min(1).default(2),
  /** Upper bound on NVLink links probed per GPU (NVML_NVLINK_MAX_LINKS is 18, 36 from NVML 13). */
  maxNvLinks: z.number().int().min(0).max(64).default(36),
  /**
   * Counter baselines (ECC, PCIe replay, NVLink, AER) persisted in the state file are used after a
   * restart only when younger than this; older ones are replaced by the first new reading (S).
   */
  counterWindow: positiveDuration(86_400_000),
  /** Poll the sysfs AER counters of each GPU and the ports above it. */
  aer: z.boolean().default(true),
  thresholds: gpuThresholdsSchema.prefault({}),
});

export type GpuSection = z.output<typeof gpuSectionSchema>;

export const gpuConfigSchema = gpuSectionSchema.extend({
  /** Xids reported as NvidiaXID<N>Error (Fatal); every other Xid is NvidiaXID<N>Warning. */
  fatalXids: xidList.default([...DEFAULT_FATAL_XIDS]),
});

export type GpuConfig = z.output<typeof gpuConfigSchema>;
export type GpuConfigInput = z.input<typeof gpuConfigSchema>;
export type GpuThresholds = GpuConfig['thresholds'];
