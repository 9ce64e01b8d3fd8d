/**
 * The real-world corpus (test/fixtures/corpus): every line, replayed through the pipeline `vigil scan`
 * uses, raises exactly its label, and no benign line raises anything.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { lookupReason } from '../../src/catalog/index.ts';
import { DEFAULT_FATAL_XIDS } from '../../src/config/index.ts';
import { parseConfig } from '../../src/settings/index.ts';
import { KernelLogClassifier } from '../../src/monitors/index.ts';
import { createReplay } from '../../src/app/index.ts';
import { lineKind, lineTime, parseLine } from '../../src/sources/index.ts';
import { paths } from '../../scripts/gen-catalog.ts';
import { entryLines, family, FORMATS, judge, loadCorpus } from '../helpers/corpus.ts';

const corpus = loadCorpus();
const where = (e: (typeof corpus)[number]) => `${e.file}: ${entryLines(e)[0]}`;

test('every corpus line raises exactly its label (reason and entity) through the scan pipeline', () => {
  const wrong: string[] = [];
  for (const e of corpus) {
    const j = judge(e);
    if (!j.exact)
      wrong.push(
        `${where(e)}\n    want ${e.label}${e.entity !== undefined ? ` on "${e.entity}"` : ''}, got [${j.reasons.join(', ')}] on [${j.entities.join(', ')}]`,
      );
  }
  assert.deepEqual(wrong, [], `${wrong.length} of ${corpus.length} lines differ from their label:\n${wrong.join('\n')}`);
});

test('no benign corpus line raises anything', () => {
  const benign = corpus.filter((e) => e.label === 'none');
  const raised = benign.filter((e) => judge(e).reasons.length > 0).map(where);
  assert.deepEqual(raised, []);
});

test('the corpus holds at least 400 lines, a quarter of them benign near-misses, each with its source and a known format', () => {
  const lines = corpus.reduce((n, e) => n + entryLines(e).length, 0);
  assert.ok(lines >= 400, `${lines} lines`);
  const benign = corpus.filter((e) => e.label === 'none').length;
  assert.ok(benign * 4 >= corpus.length, `${benign} benign of ${corpus.length}`);
  for (const e of corpus) {
    assert.ok(e.format in FORMATS, `${where(e)}: unknown format ${e.format}`);
    assert.ok(
      /^https?:\/\/|\S+\/\S+ \S|LKML|Vigil reference/.test(e.source),
      `${where(e)}: source ${e.source} names no URL or repository and path`,
    );
  }
});

test('each corpus line is told as the format it is labelled with', () => {
  const wrong = corpus
    .filter((e) => lineKind(entryLines(e)[0]) !== FORMATS[e.format])
    .map((e) => `${where(e)}: ${e.format} should read as ${FORMATS[e.format]}, read as ${lineKind(entryLines(e)[0])}`);
  assert.deepEqual(wrong, []);
});

test('every corpus label is a reason in the catalog', () => {
  for (const e of corpus) if (e.label !== 'none') assert.ok(lookupReason(e.label), `${where(e)}: ${e.label} is not in the catalog`);
});

test('the corpus covers every reason family and line format the detection must hold on', () => {
  const families = new Set(corpus.map((e) => family(e.label)));
  for (const f of [
    'NvidiaXID',
    'NvidiaSXid',
    'NvidiaGSPTimeout',
    'NvidiaGPUInitFailed',
    'OOMKilling',
    'PCIeCorrectedErrors',
    'PCIeUncorrectableNonFatal',
    'PCIeUncorrectableError',
    'MachineCheckCorrected',
    'MachineCheckUncorrected',
    'BlockDeviceIOError',
    'Ext4Error',
    'XFSError',
    'FilesystemReadOnly',
    'AppBlocked',
    'SoftLockup',
    'HardLockup',
    'RCUStall',
    'NvidiaGPUNotProbed',
    'NvidiaGPUUnsupported',
    'NvidiaGPUResetRequired',
    'KernelBug',
    'none',
  ])
    assert.ok(families.has(f), `no corpus line for ${f}`);
  const formats = new Set(corpus.map((e) => e.format));
  for (const f of Object.keys(FORMATS)) assert.ok(formats.has(f), `no corpus line in format ${f}`);
});

test('a user-space program in syslog is counted, not classified, even when it prints a kernel message', () => {
  const found: string[] = [];
  const r = createReplay({
    config: parseConfig('{}'),
    rules: { userRules: [], npd: [] },
    onFinding: (f) => found.push(f.reason),
  });
  r.push('Mar 05 23:33:35 ivosung bumblebeed[1734]: NVRM: Xid (PCI:0000:01:00): 79, pid=0, GPU has fallen off the bus.\n');
  r.push('<13>1 2024-08-30T11:43:09Z node1 myapp - - - Out of memory: Killed process 1 (x) total-vm:1kB\n');
  r.push('Mar 05 23:33:36 ivosung kernel: NVRM: Xid (PCI:0000:01:00): 79, pid=0, GPU has fallen off the bus.\n');
  const s = r.end();
  assert.equal(s.userSpace, 2);
  assert.deepEqual(found, ['NvidiaXID79Error']);
});

test('docs/reasons.md states the Xid policy with the fatal list the configuration uses', () => {
  const md = readFileSync(paths.md, 'utf8');
  const line = md.split('\n').find((l) => l.startsWith('- **NVIDIA Xid.**'));
  assert.ok(line, 'no Xid policy sentence in docs/reasons.md');
  const listed = /default ([\d, ]+):/.exec(line)?.[1].split(', ').map(Number);
  assert.deepEqual(listed, [...DEFAULT_FATAL_XIDS]);
  for (const family of ['NVSwitch SXid', 'PCIe AER', 'Machine checks', 'Out of memory']) assert.ok(md.includes(`- **${family}.**`), family);
});

test('the console and journal formats carry their time and their source into the replay', () => {
  const wall = (iso: string) => ({ kind: 'wall', ms: Date.parse(iso) });
  assert.deepEqual(lineTime('kern  :err   : 2025-01-25T10:34:54,859532+00:00 x', 'dmesg'), wall('2025-01-25T10:34:54.859Z'));
  assert.deepEqual(lineTime('192.168.11.119: kern: err: [2026-04-22T21:25:20.466440686Z]: x', 'dmesg'), wall('2026-04-22T21:25:20.466Z'));
  assert.deepEqual(lineTime('Fri 2024-08-30 11:43:09 UTC host kernel: x', 'syslog'), wall('2024-08-30T11:43:09Z'));
  assert.deepEqual(lineTime('2023-09-08T17:20:30+0200 tarta fan[1]: y', 'syslog'), wall('2023-09-08T17:20:30+02:00'));
  assert.deepEqual(lineTime('<4>1 2024-08-30T11:43:09.123Z host kernel - - - x', 'syslog'), wall('2024-08-30T11:43:09.123Z'));
  assert.deepEqual(lineTime('Apr 15 13:58:08.549417 raspberrypi kernel: x', 'syslog'), {
    kind: 'yearless',
    ms: Date.UTC(2000, 3, 15, 13, 58, 8),
  });
  // A localised or relative dmesg time says nothing the clock can use; the line is still read.
  assert.equal(lineTime('[Di Okt  7 13:03:30 2025] x', 'dmesg'), undefined);
  assert.equal(lineTime('[  +0.000004] x', 'dmesg'), undefined);
  assert.deepEqual(parseLine('[Di Okt  7 13:03:30 2025] kernel BUG at fs/netfs/read_collect.c:316!', 'dmesg'), {
    message: 'kernel BUG at fs/netfs/read_collect.c:316!',
  });
  assert.deepEqual(parseLine('Sep 16 19:51:15 kernel: [    0.043437] mce: CPU supports 7 MCE banks', 'syslog'), {
    message: 'mce: CPU supports 7 MCE banks',
    ident: 'kernel',
  });
  assert.deepEqual(parseLine('<4>1 2024-08-30T11:43:09.123Z host kernel - - - x', 'syslog'), {
    message: 'x',
    ident: 'kernel',
    level: 4,
    facility: 'kern',
  });
  assert.deepEqual(parseLine('192.168.11.119: user: warning: [2026-04-22T21:25:20Z]: [talos] service started', 'dmesg'), {
    message: '[talos] service started',
    level: 4,
    facility: 'user',
  });
});

test('an Xid whose PCI address is redacted is still that Xid, on no GPU; a MIG Xid names its GPU and instances', () => {
  const c = new KernelLogClassifier();
  // The redacted shape public runbooks quote ("PCI:xxxx", "pid=xxx").
  const [redacted] = c.classify({ message: 'NVRM: Xid (PCI:xxxx): 79, pid=xxx, GPU has fallen off the bus' }, 1);
  assert.equal(redacted.reason, 'NvidiaXID79Error');
  assert.equal(redacted.entity, '');
  // The driver's MIG shape (open-gpu-kernel-modules kernel_rc.c): "PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u".
  const [mig] = c.classify({ message: 'NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 13, pid=9, name=a, Graphics Exception' }, 2);
  assert.equal(mig.reason, 'NvidiaXID13Warning');
  assert.equal(mig.entity, 'gpu:0000:3b:00');
  assert.equal(mig.attrs?.gpuInstance, 1);
  assert.equal(mig.attrs?.computeInstance, 2);
});
