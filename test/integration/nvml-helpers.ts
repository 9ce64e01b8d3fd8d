/**
 * Shared fixtures for the NVML tests: a scripted fake NVML library, a fake sysfs with NVIDIA PCI
 * functions, and a sink that records what a monitor publishes.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import type { Finding, FindingSink, HealthySignal, SourceReport } from '../../src/api/types.ts';
import { GpuMonitor } from '../../src/monitors/gpu/monitor.ts';
import type { GpuConfigInput } from '../../src/monitors/gpu/config.ts';
import {
  buildFakeNvml,
  fakeGpus,
  writeFakeConfig,
  type FakeEvent,
  type FakeGpu,
  type FakeNvmlConfig,
} from '../../native/fake-nvml/build.ts';

/**
 * VIGIL_TEST_SLOWDOWN (a number, default 1): how much slower than native these tests run. Under
 * qemu's user mode (scripts/test-arm64.sh) worker threads take seconds to start, so the waits below
 * (RecordingSink.waitFor, the files' `until` loops) and the fake monitor's default watchdog are
 * stretched by this factor (and nvml-events.test.ts' 100 ms Xid latency bound). Which findings the
 * tests expect is unchanged.
 */
export const SLOWDOWN = Math.max(1, Number(process.env.VIGIL_TEST_SLOWDOWN) || 1);
/** ms stretched by VIGIL_TEST_SLOWDOWN. */
export const slow = (ms: number): number => Math.round(ms * SLOWDOWN);

/** A temp dir holding the fake's JSON script and a fake sysfs; sets FAKE_NVML_CONFIG. */
export class FakeNvmlEnv {
  readonly dir = mkdtempSync(join(tmpdir(), 'vigil-nvml-'));
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

/** Records everything a monitor publishes, with arrival times. */
export class RecordingSink implements FindingSink {
  findings: (Finding & { receivedAt: number })[] = [];
  healthySignals: HealthySignal[] = [];
  private waiters: (() => void)[] = [];

  finding(f: Finding): void {
    this.findings.push({ ...f, receivedAt: Date.now() });
    this.wake();
  }

  healthy(h: HealthySignal): void {
    this.healthySignals.push(h);
    this.wake();
  }

  sources: SourceReport[] = [];

  source(r: SourceReport): void {
    this.sources.push(r);
    this.wake();
  }

  reasons(): string[] {
    return this.findings.map((f) => f.reason);
  }

  healthyFor(reason: string, entity?: string): HealthySignal[] {
    return this.healthySignals.filter(
      (h) => (h.reasons as readonly string[]).includes(reason) && (entity === undefined || h.entity === entity),
    );
  }

  clear(): void {
    this.findings = [];
    this.healthySignals = [];
  }

  /** Resolves with the first finding matching pred (past or future); rejects after timeoutMs (times VIGIL_TEST_SLOWDOWN). */
  async waitFor(pred: (f: Finding) => boolean, timeoutMs = 3_000): Promise<Finding & { receivedAt: number }> {
    timeoutMs = slow(timeoutMs);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.findings.find(pred);
      if (hit) return hit;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no matching finding within ${timeoutMs} ms; got ${JSON.stringify(this.reasons())}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
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
