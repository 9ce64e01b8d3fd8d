/**
 * Shared fixtures for the NVML tests: a scripted fake NVML library, a fake sysfs with NVIDIA PCI
 * functions; the sink that records what a monitor publishes is test/helpers/recording-sink.ts.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { GpuMonitor, type GpuConfigInput } from '../../src/monitors/index.ts';
import {
  buildFakeNvml,
  fakeGpus,
  writeFakeConfig,
  type FakeEvent,
  type FakeGpu,
  type FakeNvmlConfig,
} from '../../native/fake-nvml/build.ts';

export { SLOWDOWN, slow } from '../helpers/slowdown.ts';
import { slow } from '../helpers/slowdown.ts';
export { RecordingSink } from '../helpers/recording-sink.ts';
import { RecordingSink } from '../helpers/recording-sink.ts';
import { tempDir } from '../helpers/temp-dir.ts';

/** A temp dir holding the fake's JSON script and a fake sysfs; sets FAKE_NVML_CONFIG. */
export class FakeNvmlEnv {
  readonly dir = tempDir('vigil-nvml-');
  readonly configPath = join(this.dir, 'nvml.json');
  readonly sysRoot = join(this.dir, 'sys');
  readonly libraryPath: string;
  cfg: FakeNvmlConfig;
  private nextEventId = 1;

  constructor(gpus: number | FakeGpu[] = 2, opts: { omit?: string[]; pciFunctions?: number } = {}) {
    this.libraryPath = buildFakeNvml({ omit: opts.omit ?? [] });
    const list = typeof gpus === 'number' ? fakeGpus(gpus) : gpus;
    this.cfg = { driverVersion: '550.54.15', gpus: list, events: [] };
    this.write();
    process.env.FAKE_NVML_CONFIG = this.configPath;
    makeSysfs(this.sysRoot, opts.pciFunctions ?? list.length);
  }

  write(): void {
    writeFakeConfig(this.configPath, this.cfg);
  }

  /** Edits one GPU's script and rewrites the file. */
  gpu(index: number, patch: Partial<FakeGpu>): void {
    this.cfg.gpus[index] = { ...this.cfg.gpus[index], ...patch };
    this.write();
  }

  /** Delivers an event to waiting event sets (type 8 = Xid). Returns the delivery time. */
  event(e: Omit<FakeEvent, 'id'>): number {
    this.cfg.events = [...(this.cfg.events ?? []), { ...e, id: this.nextEventId++ }];
    this.write();
    return Date.now();
  }

  cleanup(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** n NVIDIA 3D controllers at the fake GPUs' addresses, plus things that must not count. */
export function makeSysfs(root: string, n: number): void {
  const dev = (name: string, vendor: string, cls: string, device = '0x2330') => {
    const d = join(root, 'bus/pci/devices', name);
    mkdirSync(d, { recursive: true });
    writeFileSync(join(d, 'vendor'), `${vendor}\n`);
    writeFileSync(join(d, 'class'), `${cls}\n`);
    writeFileSync(join(d, 'device'), `${device}\n`);
  };
  mkdirSync(join(root, 'bus/pci/devices'), { recursive: true });
  for (let i = 0; i < n; i++) {
    const bus = (0x18 + i * 0x10).toString(16).padStart(2, '0');
    dev(`0000:${bus}:00.0`, '0x10de', '0x030200');
    dev(`0000:${bus}:00.1`, '0x10de', '0x040300', '0x22e8'); // the GPU's HD-audio function
  }
  dev('0000:00:00.0', '0x8086', '0x060000', '0x09a2'); // host bridge
  dev('0000:05:00.0', '0x10de', '0x068000', '0x22a3'); // NVSwitch: a bridge, not a GPU
}

/** A monitor on the fake library with test-friendly timings; the caller must stop() it. */
export function fakeMonitor(
  env: FakeNvmlEnv,
  config: GpuConfigInput = {},
  now?: () => number,
): { monitor: GpuMonitor; registry: Registry; logs: { obj: Record<string, unknown>; msg: string }[] } {
  const registry = new Registry();
  const logs: { obj: Record<string, unknown>; msg: string }[] = [];
  const monitor = new GpuMonitor({
    config: { libraryPath: env.libraryPath, watchdog: slow(2_000), eventWait: 100, ...config },
    registry,
    sysRoot: env.sysRoot,
    ownTimer: false,
    log: (obj, msg) => logs.push({ obj, msg }),
    ...(now ? { now } : {}),
  });
  return { monitor, registry, logs };
}

/**
 * Two fake GPUs behind a started GPU monitor whose NVML events run (the parity tests' setup):
 * what it found, and GPU 1's PCI address, which the kernel-log lines name. Stopped after the test.
 */
export async function eventsOnTwoGpus(t: {
  after: (fn: () => Promise<void>) => void;
}): Promise<{ env: FakeNvmlEnv; sink: RecordingSink; pci: string }> {
  const env = new FakeNvmlEnv(2);
  const { monitor } = fakeMonitor(env);
  t.after(async () => {
    await monitor.stop();
    env.cleanup();
  });
  const sink = new RecordingSink();
  await monitor.start(sink);
  if (monitor.snapshot().events.status !== 'running') throw new Error(`NVML events are ${monitor.snapshot().events.status}, not running`);
  return { env, sink, pci: monitor.inventory()[1].pci! };
}
