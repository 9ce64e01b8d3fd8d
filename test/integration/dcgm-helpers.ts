/**
 * Shared fixtures for the DCGM tests: the scripted fake DCGM library (native/fake-dcgm) beside a
 * fake NVML with the same GPUs (same PCI addresses and UUIDs), as on a node running nv-hostengine.
 */
import { join } from 'node:path';
import { buildFakeDcgm, writeFakeDcgmConfig, type FakeDcgmConfig, type FakeDcgmEvent } from '../../native/fake-dcgm/build.ts';
import type { FakeGpu } from '../../native/fake-nvml/build.ts';
import { FakeNvmlEnv } from './nvml-helpers.ts';

/** A fake NVML env plus a DCGM script for the same GPUs; sets FAKE_DCGM_CONFIG. */
export class FakeDcgmEnv extends FakeNvmlEnv {
  readonly dcgmLibrary = buildFakeDcgm();
  readonly dcgmScript = join(this.dir, 'dcgm.txt');
  dcgm: FakeDcgmConfig;
  private nextId = 1;

  constructor(gpus: number | FakeGpu[] = 2) {
    super(gpus);
    // DCGM numbers GPUs itself; give them in reverse so a test catches index-based matching.
    this.dcgm = {
      gpus: this.cfg.gpus.map((g, i) => ({ id: this.cfg.gpus.length - 1 - i, pci: String(g.pci), uuid: String(g.uuid) })),
    };
    this.writeDcgm();
    process.env.FAKE_DCGM_CONFIG = this.dcgmScript;
  }

  writeDcgm(): void {
    writeFakeDcgmConfig(this.dcgmScript, this.dcgm);
  }

  /** The DCGM gpuId of NVML GPU `index`. */
  dcgmId(index: number): number {
    return this.dcgm.gpus.find((g) => g.pci === this.cfg.gpus[index].pci)!.id;
  }

  /** A policy violation on NVML GPU `index`, delivered by the library's own thread. Returns the time written. */
  violation(index: number, e: Omit<FakeDcgmEvent, 'id' | 'gpu'>): number {
    this.dcgm.events = [...(this.dcgm.events ?? []), { ...e, gpu: this.dcgmId(index), id: this.nextId++ }];
    this.writeDcgm();
    return Date.now();
  }
}

/** GPU-monitor config for the DCGM channel on the fake, with test-friendly timings. */
export function dcgmConfig(env: FakeDcgmEnv, source: 'dcgm' | 'auto', dcgm: Record<string, unknown> = {}) {
  return { source, dcgm: { libraryPath: env.dcgmLibrary, probeInterval: 100, connectTimeout: 1_000, ...dcgm } };
}
