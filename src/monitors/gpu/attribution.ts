/**
 * Names the GPU behind a kernel-log finding: a PCI address becomes the GPU's index and UUID from
 * the NVML inventory, and a PCIe port's AER error is pinned on the GPU that sits below it.
 */
import { realpathSync } from 'node:fs';
import path from 'node:path';
import type { Finding, FindingSink } from '../../api/types.ts';
import type { GpuInfo } from './inventory.ts';

export interface GpuLookup {
  gpuByPci(pci: string): GpuInfo | undefined;
  inventory(): readonly GpuInfo[];
}

/** Adds {uuid, index} to findings that carry a GPU's PCI address, and names the GPU in the message. */
export function attributeGpu(out: FindingSink, gpus: GpuLookup): FindingSink {
  return {
    finding: (f: Finding) => {
      const pci = f.attrs?.pci ?? f.attrs?.gpu;
      const gpu = typeof pci === 'string' ? gpus.gpuByPci(pci) : undefined;
      if (!gpu || f.attrs?.uuid) return out.finding(f);
      out.finding({
        ...f,
        message: `${f.message} (GPU ${gpu.index}${gpu.uuid ? ` ${gpu.uuid}` : ''})`,
        attrs: { ...f.attrs, index: gpu.index, ...(gpu.uuid ? { uuid: gpu.uuid } : {}) },
      });
    },
    healthy: (h) => out.healthy(h),
    source: (r) => out.source(r),
  };
}

/**
 * The GPU at or below a PCIe device (BDF `0000:00:01.0`): its sysfs path runs through the ports
 * above it, e.g. /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0.
 */
export function gpuBelow(sysRoot: string, gpus: GpuLookup): (bdf: string) => string | undefined {
  const paths = new Map<string, string>();
  return (bdf) => {
    const want = bdf.toLowerCase();
    for (const g of gpus.inventory()) {
      if (!g.pci) continue;
      let p = paths.get(g.pci);
      if (p === undefined) {
        try {
          p = realpathSync(path.join(sysRoot, 'bus/pci/devices', `${g.pci}.0`));
        } catch {
          p = '';
        }
        paths.set(g.pci, p);
      }
      if (p.split('/').includes(want)) return g.pci;
    }
    return undefined;
  };
}
