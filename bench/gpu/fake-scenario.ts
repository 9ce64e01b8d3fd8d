/**
 * STAND-IN for a GPU node, for running bench/gpu/gpu-check.sh on a machine without one (`--fake`):
 * builds the fake NVML library (native/fake-nvml), writes one scenario that drives both it and the
 * fake `nvidia-smi` (bench/gpu/fake-nvidia-smi.js), and a fake sysfs with the GPUs and an NVSwitch.
 * Prints shell assignments (LIBRARY=, SYSROOT=, FAKE_NVML_CONFIG=) for the script to eval.
 * On a real GPU node none of this runs: the script uses the driver's library and nvidia-smi.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildFakeNvml, writeFakeConfig, type FakeNvmlConfig } from '../../native/fake-nvml/build.ts';

const dir = process.argv[2];
if (!dir) throw new Error('usage: fake-scenario.ts <work dir>');

// Every field the fake nvidia-smi prints is set here explicitly, so both doubles read one truth.
const scenario: FakeNvmlConfig = {
  driverVersion: '570.124.06',
  gpus: [
    {
      // An SXM H100 on an NVSwitch board: NVLink, fabric, some history in its counters.
      uuid: 'GPU-1f6b2c0e-58a1-4c3e-9d1a-000000000001',
      name: 'NVIDIA H100 80GB HBM3',
      serial: '1654922000001',
      pci: '00000000:18:00.0',
      eccUncorrectedVolatile: 0,
      eccCorrectedVolatile: 12,
      eccMode: { current: 1, pending: 1 },
      remappedRows: { corr: 2, unc: 0, pending: 0, failure: 0 },
      pcie: { replay: 3, gen: 5, maxGen: 5, width: 16, maxWidth: 16 },
      clocksEventReasons: 0x1,
      temperature: 38,
      slowdownTemp: 87,
      shutdownTemp: 92,
      nvlink: { links: 18, errors: Array.from({ length: 18 }, () => [0, 0, 40, 2, 0]) },
      fabric: { state: 3, status: 0, cliqueId: 1, clusterUuid: 'fake-cluster-01', healthMask: 0 },
      recoveryAction: 0,
      inforomValid: true,
    },
    {
      // A PCIe card in the same node: no NVLink, no fabric, ECC off.
      uuid: 'GPU-1f6b2c0e-58a1-4c3e-9d1a-000000000002',
      name: 'NVIDIA L40S',
      serial: '1654922000002',
      pci: '00000000:28:00.0',
      eccUncorrectedVolatile: null,
      eccMode: null,
      remappedRows: { corr: 0, unc: 0, pending: 0, failure: 0 },
      pcie: { replay: 0, gen: 4, maxGen: 4, width: 16, maxWidth: 16 },
      clocksEventReasons: 0x4,
      temperature: 41,
      slowdownTemp: 88,
      shutdownTemp: 93,
      nvlink: null,
      fabric: null,
      recoveryAction: 0,
      inforomValid: true,
    },
  ],
  events: [],
};

const library = buildFakeNvml();
const config = join(dir, 'fake-nvml.json');
writeFakeConfig(config, scenario);
const sys = join(dir, 'sys');
const dev = (name: string, cls: string, device: string) => {
  const d = join(sys, 'bus/pci/devices', name);
  mkdirSync(d, { recursive: true });
  writeFileSync(join(d, 'vendor'), '0x10de\n');
  writeFileSync(join(d, 'class'), `${cls}\n`);
  writeFileSync(join(d, 'device'), `${device}\n`);
};
dev('0000:18:00.0', '0x030200', '0x2330');
dev('0000:28:00.0', '0x030200', '0x26b9');
dev('0000:05:00.0', '0x068000', '0x22a3'); // NVSwitch
// A fabric manager process, so the NVSwitch board is healthy.
mkdirSync(join(dir, 'proc', '4100'), { recursive: true });
writeFileSync(join(dir, 'proc', '4100', 'stat'), '4100 (nv-fabricmanage) S 1 4100 4100 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n');
console.log(`LIBRARY='${library}'\nSYSROOT='${sys}'\nFAKE_NVML_CONFIG='${config}'`);
