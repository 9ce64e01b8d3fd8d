/**
 * GPU inventory: which NVIDIA GPUs the node has, from sysfs (before NVML is even loaded) and from
 * NVML, keyed by the PCI address form the kernel-log rules use, so a finding from either source
 * names the same GPU.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Entity } from '../../api/types.ts';
import type { GpuPoll } from '../../sources/nvml/protocol.ts';

/**
 * Normalises a PCI address to the kernel-log Xid form: lower-case, no `PCI:` prefix, no `.F`
 * function, 4-hex-digit domain. `PCI:0000:B3:00`, `00000000:B3:00.0` and `0000:b3:00.0` all give
 * `0000:b3:00`. Returns null for anything that is not a PCI address.
 */
export function normalizePci(addr: string): string | null {
  const m = /^(?:pci:)?([0-9a-f]{1,8}):([0-9a-f]{1,2}):([0-9a-f]{1,2})(?:\.[0-7])?$/.exec(addr.trim().toLowerCase());
  if (!m) return null;
  return `${m[1].slice(-4).padStart(4, '0')}:${m[2].padStart(2, '0')}:${m[3].padStart(2, '0')}`;
}

/** The entity every GPU finding uses (the kernel-log rules use the same, so the engine dedups). */
export function gpuEntity(pci: string): Entity {
  return `gpu:${pci}`;
}

export interface PciFunction {
  /** sysfs name, e.g. 0000:b3:00.0 */
  address: string;
  /** normalised, e.g. 0000:b3:00 */
  pci: string;
  /** PCI class, e.g. 0x030200 (3D controller) or 0x030000 (VGA) */
  class: string;
  /** PCI device id, e.g. 0x2330 */
  device: string | null;
}

async function readTrim(path: string): Promise<string | null> {
  try {
    return (await readFile(path, 'utf8')).trim().toLowerCase();
  } catch {
    return null;
  }
}

/**
 * NVIDIA display and 3D controllers (vendor 0x10de, class 0x03xxxx) under
 * `<sysRoot>/bus/pci/devices`. NVSwitches and audio functions (other classes) are not GPUs. An
 * empty list means the node has no NVIDIA GPU, and the GPU monitor stays off.
 */
export async function detectNvidiaPciFunctions(sysRoot = '/sys'): Promise<PciFunction[]> {
  const dir = join(sysRoot, 'bus/pci/devices');
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return [];
  }
  const found: PciFunction[] = [];
  for (const name of names.sort()) {
    const base = join(dir, name);
    if ((await readTrim(join(base, 'vendor'))) !== '0x10de') continue;
    const cls = await readTrim(join(base, 'class'));
    if (!cls || !/^0x03[0-9a-f]{4}$/.test(cls)) continue;
    const pci = normalizePci(name);
    if (!pci) continue;
    found.push({ address: name.toLowerCase(), pci, class: cls, device: await readTrim(join(base, 'device')) });
  }
  return found;
}

/**
 * NVSwitches on this node's PCI bus (vendor 0x10de, class 0x0680xx "other bridge"), as on HGX/DGX
 * A100 and H100 boards. Their presence means a fabric manager must run for the GPUs' NVLinks.
 */
export async function countNvSwitches(sysRoot = '/sys'): Promise<number> {
  const dir = join(sysRoot, 'bus/pci/devices');
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return 0;
  }
  let n = 0;
  for (const name of names) {
    const base = join(dir, name);
    if ((await readTrim(join(base, 'vendor'))) !== '0x10de') continue;
    if (/^0x0680[0-9a-f]{2}$/.test((await readTrim(join(base, 'class'))) ?? '')) n++;
  }
  return n;
}

/** One GPU as NVML enumerates it. */
export interface GpuInfo {
  index: number;
  uuid: string | null;
  name: string | null;
  /** Normalised PCI address (`0000:b3:00`). */
  pci: string | null;
  /** NVML's own form (`00000000:B3:00.0`). */
  busId: string | null;
  serial: string | null;
  driverVersion: string | null;
}

export class GpuInventory {
  private readonly byPciMap = new Map<string, GpuInfo>();
  private readonly byUuidMap = new Map<string, GpuInfo>();

  constructor(readonly gpus: readonly GpuInfo[] = []) {
    for (const g of gpus) {
      if (g.pci) this.byPciMap.set(g.pci, g);
      if (g.uuid) this.byUuidMap.set(g.uuid, g);
    }
  }

  /** Builds it from a poll, reusing what an earlier inventory knew about GPUs NVML can't name now. */
  static fromPoll(gpus: readonly GpuPoll[], driverVersion: string | null, previous?: GpuInventory): GpuInventory {
    return new GpuInventory(
      gpus.map((g) => {
        const id = g.identity;
        const old = previous?.byIndex(g.index);
        if (!id || id.uuid === null)
          return old ?? { index: g.index, uuid: null, name: null, pci: null, busId: null, serial: null, driverVersion };
        return {
          index: g.index,
          uuid: id.uuid,
          name: id.name,
          pci: id.busId ? normalizePci(id.busId) : null,
          busId: id.busId,
          serial: id.serial,
          driverVersion,
        };
      }),
    );
  }

  /** The GPU at a PCI address in any common form (`PCI:0000:B3:00`, `00000000:b3:00.0`, ...). */
  byPci(addr: string): GpuInfo | undefined {
    const pci = normalizePci(addr);
    return pci ? this.byPciMap.get(pci) : undefined;
  }

  byUuid(uuid: string): GpuInfo | undefined {
    return this.byUuidMap.get(uuid);
  }

  byIndex(index: number): GpuInfo | undefined {
    return this.gpus.find((g) => g.index === index);
  }

  /** Same GPUs at the same indexes (what a change of inventory means for event registration). */
  sameAs(other: GpuInventory): boolean {
    if (other.gpus.length !== this.gpus.length) return false;
    return this.gpus.every((g, i) => g.uuid === other.gpus[i].uuid && g.pci === other.gpus[i].pci);
  }
}

/** Entity of a GPU: by PCI when known (matching kernel-log findings), else by NVML index. */
export function entityOf(g: Pick<GpuInfo, 'pci' | 'index'>): Entity {
  return g.pci ? gpuEntity(g.pci) : `gpu:nvml-index-${g.index}`;
}

/** "GPU 2 (GPU-1234…, 0000:b3:00)" for messages. */
export function gpuLabel(g: Pick<GpuInfo, 'index' | 'uuid' | 'pci'>): string {
  const parts = [g.uuid, g.pci].filter((p): p is string => !!p);
  return `GPU ${g.index}${parts.length ? ` (${parts.join(', ')})` : ''}`;
}

/** Attributes every GPU finding carries, so kernel-log and NVML findings can be matched up. */
export function gpuAttrs(g: Pick<GpuInfo, 'index' | 'uuid' | 'pci'>): Record<string, string | number> {
  const a: Record<string, string | number> = { index: g.index };
  if (g.uuid) a.uuid = g.uuid;
  if (g.pci) a.pci = g.pci;
  return a;
}
