/**
 * Builds the fake NVML library (a test double, see README.md) and scripts it. Used by the GPU
 * tests and bench/gpu.ts; never by the agent itself.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, existsSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { compilerFor } from '../compiler.ts';

const HERE = dirname(fileURLToPath(import.meta.url));
const SOURCE = join(HERE, 'fake_nvml.c');
const CACHE = resolve(HERE, '../../.cache/fake-nvml');

/**
 * Compiles fake_nvml.c for this Node's architecture (gcc, or aarch64-linux-gnu-gcc for an arm64 Node
 * under qemu: ../compiler.ts; once per architecture, source and flag set; cached under
 * .cache/fake-nvml/ARCH-HASH) and returns the path of the library. `omit` lists NVML symbols to leave out, as on an older driver.
 */
export function buildFakeNvml(opts: { omit?: readonly string[] } = {}): string {
  const omit = [...(opts.omit ?? [])].sort();
  for (const s of omit) if (!/^nvml\w+$/.test(s)) throw new Error(`not an NVML symbol: ${s}`);
  const src = readFileSync(SOURCE);
  const { cc, arch } = compilerFor();
  const key = `${arch}-${createHash('sha256').update(src).update(omit.join(',')).digest('hex').slice(0, 16)}`;
  const out = join(CACHE, key, 'libnvidia-ml.so.1');
  if (existsSync(out)) return out;
  mkdirSync(dirname(out), { recursive: true });
  // Compile to a private name and rename: parallel test files may build the same variant.
  const tmp = `${out}.${process.pid}.tmp`;
  execFileSync(cc, ['-shared', '-fPIC', '-O2', '-Wall', '-pthread', ...omit.map((s) => `-DOMIT_${s}`), '-o', tmp, SOURCE], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  renameSync(tmp, out);
  return out;
}

/** One scripted GPU. Absent fields take the defaults of a healthy H100; `null` means NOT_SUPPORTED. */
export interface FakeGpu {
  uuid?: string;
  name?: string;
  /** NVML busId form, e.g. "00000000:B3:00.0". */
  pci?: string;
  serial?: string | null;
  supportedEvents?: number;
  /** Return-code overrides per NVML function name ("*" for every device call), e.g. {"*": 15}. */
  rc?: Record<string, number>;
  /** Sleep this many ms inside the named function ("*" for all) before returning. */
  hang?: Record<string, number>;
  remappedRows?: { corr?: number; unc?: number; pending?: number; failure?: number } | null;
  retiredPages?: { sbe?: number; dbe?: number; pending?: number } | null;
  /** Volatile uncorrected ECC count; null = ECC off or unsupported (every ECC query answers NOT_SUPPORTED). */
  eccUncorrectedVolatile?: number | null;
  eccUncorrectedAggregate?: number;
  eccCorrectedVolatile?: number;
  eccCorrectedAggregate?: number;
  /** nvmlDeviceGetEccMode: 1 enabled, 0 disabled (pending defaults to current); null = NOT_SUPPORTED. */
  eccMode?: { current?: number; pending?: number } | null;
  /**
   * NVSwitch fabric (nvmlDeviceGetGpuFabricInfo / ...InfoV): state 0 NOT_SUPPORTED, 1 NOT_STARTED,
   * 2 IN_PROGRESS, 3 COMPLETED; status an nvmlReturn_t; healthMask (v2 only). Absent/null = NOT_SUPPORTED.
   */
  fabric?: { state?: number; status?: number; cliqueId?: number; clusterUuid?: string; healthMask?: number } | null;
  pcie?: { replay?: number; gen?: number; maxGen?: number; width?: number; maxWidth?: number } | null;
  clocksEventReasons?: number | null;
  temperature?: number | null;
  slowdownTemp?: number | null;
  shutdownTemp?: number | null;
  /** errors[link] = [replay, recovery, crcFlit, crcData, eccData]; linkCountField null hides field 91. */
  nvlink?: { links?: number; inactive?: number[]; errors?: number[][]; linkCountField?: null } | null;
  recoveryAction?: number | null;
  inforomValid?: boolean | null;
}

/** A scripted event. Delivered once to each event set created before it appeared (ids ascend). */
export interface FakeEvent {
  id: number;
  gpu: number;
  /** nvmlEventType bit; 8 = XidCriticalError. */
  type?: number;
  /** The Xid for type 8. */
  data?: number;
  /** Make the wait return this code instead (e.g. 15 GPU_IS_LOST), with data.device = gpu. */
  rc?: number;
}

export interface FakeNvmlConfig {
  driverVersion?: string;
  /** NVML device count, when lower than gpus.length (a GPU the driver did not attach). */
  count?: number;
  gpus: FakeGpu[];
  events?: FakeEvent[];
  /** Return-code overrides for non-device calls (nvmlInit_v2, nvmlDeviceGetCount_v2, ...). */
  rc?: Record<string, number>;
  hang?: Record<string, number>;
}

/** Writes the config atomically (temp file + rename) so the library never reads half a file. */
export function writeFakeConfig(path: string, cfg: FakeNvmlConfig): void {
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(cfg));
  renameSync(tmp, path);
}

/** n healthy fake GPUs with distinct UUIDs and PCI addresses (bus 0x18, 0x28, ...). */
export function fakeGpus(n: number): FakeGpu[] {
  return Array.from({ length: n }, (_, i) => ({
    uuid: `GPU-${String(i).padStart(8, '0')}-aaaa-bbbb-cccc-${String(i).padStart(12, '0')}`,
    pci: `00000000:${(0x18 + i * 0x10).toString(16).toUpperCase().padStart(2, '0')}:00.0`,
    serial: `16543210${String(i).padStart(5, '0')}`,
  }));
}
