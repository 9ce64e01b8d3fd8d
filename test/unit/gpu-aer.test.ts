/**
 * sysfs AER counters of each GPU and the PCIe ports above it, on a fixture sysfs tree laid out as
 * the kernel lays it out (bus/pci/devices/<BDF> are links into devices/pci0000:00/...).
 */
import { strict as assert } from 'node:assert';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { lookupReason } from '../../src/catalog/index.ts';
import { aerDevices, checkAer, parseAerFile, readAer, type AerReading } from '../../src/monitors/index.ts';

const CORRECTABLE = (n: number) =>
  `RxErr 0\nBadTLP ${n}\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR ${n}\n`;
const FATAL = (n: number) => `Undefined 0\nDLP ${n}\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nTOTAL_ERR_FATAL ${n}\n`;
const NONFATAL = (n: number) => `Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO ${n}\nTOTAL_ERR_NONFATAL ${n}\n`;

/** Root port 0000:00:01.0 -> switch port 0000:01:00.0 -> GPU 0000:02:00.0 (and its audio function). */
function fixture(t: { after: (fn: () => void) => void }) {
  const root = mkdtempSync(join(tmpdir(), 'vigil-aer-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const chain = ['pci0000:00', '0000:00:01.0', '0000:01:00.0', '0000:02:00.0'];
  const real = (upTo: number) => join(root, 'devices', ...chain.slice(0, upTo + 1));
  mkdirSync(join(root, 'bus/pci/devices'), { recursive: true });
  for (let i = 1; i < chain.length; i++) {
    mkdirSync(real(i), { recursive: true });
    symlinkSync(real(i), join(root, 'bus/pci/devices', chain[i]));
  }
  const set = (bdf: string, c: number, nf: number, f: number) => {
    const d = join(root, 'bus/pci/devices', bdf);
    writeFileSync(join(d, 'aer_dev_correctable'), CORRECTABLE(c));
    writeFileSync(join(d, 'aer_dev_nonfatal'), NONFATAL(nf));
    writeFileSync(join(d, 'aer_dev_fatal'), FATAL(f));
  };
  for (const b of chain.slice(1)) set(b, 0, 0, 0);
  return { root, set };
}

const cfg = { correctedCount: 20, correctedWindowMs: 3_600_000 };

test('an aer_dev_* file is read by its TOTAL_ERR line, or summed on kernels without one', () => {
  assert.equal(parseAerFile(CORRECTABLE(7)), 7);
  assert.equal(parseAerFile('RxErr 2\nBadTLP 3\n'), 5);
  assert.equal(parseAerFile('garbage'), null);
});

test('the GPU and every port above it are read, nearest port first', (t) => {
  const { root } = fixture(t);
  assert.deepEqual(aerDevices(root, ['0000:02:00.0']), [
    { bdf: '0000:02:00.0', role: 'gpu', gpu: '0000:02:00.0' },
    { bdf: '0000:01:00.0', role: 'port', gpu: '0000:02:00.0' },
    { bdf: '0000:00:01.0', role: 'port', gpu: '0000:02:00.0' },
  ]);
  assert.deepEqual(aerDevices(root, ['0000:09:00.0']), [], 'a GPU not in sysfs is skipped');
  assert.deepEqual(readAer(root, '0000:01:00.0'), { correctable: 0, nonfatal: 0, fatal: 0 });
});

test('AER counters are judged by increase since the baseline: old totals are not faults, new errors are', (t) => {
  const { root, set } = fixture(t);
  const port = { bdf: '0000:01:00.0', role: 'port' as const, gpu: '0000:02:00.0' };
  // Old counts at the first reading (a healthy node with history): baseline only.
  set('0000:01:00.0', 500, 3, 1);
  let h: AerReading[] = [];
  let r = checkAer(port, 0, readAer(root, port.bdf), h, cfg, 1_000);
  assert.deepEqual(
    r.results.map((x) => x.status),
    ['skip'],
  );
  h = r.history;
  r = checkAer(port, 0, readAer(root, port.bdf), h, cfg, 61_000);
  assert.deepEqual(
    r.results.map((x) => [x.reason, x.status]),
    [
      ['PCIeUncorrectableError', 'ok'],
      ['PCIeUncorrectableNonFatal', 'ok'],
      ['PCIeCorrectedErrors', 'ok'],
    ],
  );
  h = r.history;
  // A new fatal error on the switch port above the GPU: Fatal, on the entity the kernel-log rule uses.
  set('0000:01:00.0', 500, 3, 2);
  r = checkAer(port, 0, readAer(root, port.bdf), h, cfg, 121_000);
  const fatal = r.results.find((x) => x.status === 'fail')!;
  assert.equal(fatal.reason, 'PCIeUncorrectableError');
  assert.equal(fatal.finding?.entity, 'pci:0000:01:00.0');
  assert.equal(fatal.finding?.source, 'sysfs');
  assert.equal(fatal.finding?.attrs?.gpu, '0000:02:00.0');
  assert.equal(lookupReason(fatal.reason)?.severity, 'Fatal');
  assert.match(fatal.message, /PCIe port 0000:01:00.0 above GPU 0000:02:00.0: 1 new uncorrectable fatal AER error/);
  h = r.history;
  // Corrected errors: 19 more within the hour is below the limit of 20; one more reaches it.
  set('0000:01:00.0', 519, 3, 2);
  r = checkAer(port, 0, readAer(root, port.bdf), h, cfg, 181_000);
  assert.equal(r.results.find((x) => x.reason === 'PCIeCorrectedErrors')?.status, 'ok');
  h = r.history;
  set('0000:01:00.0', 520, 4, 2);
  r = checkAer(port, 0, readAer(root, port.bdf), h, cfg, 241_000);
  assert.deepEqual(
    r.results.filter((x) => x.status === 'fail').map((x) => x.reason),
    ['PCIeUncorrectableNonFatal', 'PCIeCorrectedErrors'],
  );
  h = r.history;
  // Two hours later the same total is no longer "within the window".
  r = checkAer(port, 0, readAer(root, port.bdf), h, cfg, 241_000 + 7_200_000);
  assert.equal(r.results.find((x) => x.reason === 'PCIeCorrectedErrors')?.status, 'ok');
  // Counters that went down (a reset) start a new baseline instead of a negative increase.
  set('0000:01:00.0', 0, 0, 0);
  r = checkAer(port, 0, readAer(root, port.bdf), r.history, cfg, 241_000 + 7_260_000);
  assert.deepEqual(
    r.results.map((x) => x.status),
    ['skip'],
  );
});

test('a device without AER files is skipped, not failed', (t) => {
  const { root } = fixture(t);
  rmSync(join(root, 'bus/pci/devices/0000:00:01.0/aer_dev_fatal'));
  rmSync(join(root, 'bus/pci/devices/0000:00:01.0/aer_dev_nonfatal'));
  rmSync(join(root, 'bus/pci/devices/0000:00:01.0/aer_dev_correctable'));
  const dev = { bdf: '0000:00:01.0', role: 'port' as const, gpu: '0000:02:00.0' };
  const r = checkAer(dev, 0, readAer(root, dev.bdf), [], cfg, 1);
  assert.equal(r.results[0].status, 'skip');
  assert.match(r.results[0].message, /no AER counters/);
});
