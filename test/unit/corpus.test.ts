/**
 * The real-world corpus (test/fixtures/corpus): every line, replayed through the pipeline `vigil scan`
 * uses, raises exactly its label, and no benign line raises anything.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { lookupReason } from '../../src/catalog/index.ts';
import { DEFAULT_FATAL_XIDS } from '../../src/config/xid.ts';
import { parseConfig } from '../../src/config/load.ts';
import { LogReplay } from '../../src/pipeline/index.ts';
import { lineKind } from '../../src/sources/kmsg/parse.ts';
import { paths } from '../../scripts/gen-catalog.ts';
import { entryLines, family, FORMATS, judge, loadCorpus } from '../helpers/corpus.ts';

const corpus = loadCorpus();
const where = (e: (typeof corpus)[number]) => `${e.file}: ${entryLines(e)[0]}`;

test('every corpus line raises exactly its label (reason and entity) through the scan pipeline', () => {
  const wrong: string[] = [];
  for (const e of corpus) {
    const j = judge(e);
    if (!j.exact) wrong.push(`${where(e)}\n    want ${e.label}${e.entity !== undefined ? ` on "${e.entity}"` : ''}, got [${j.reasons.join(', ')}] on [${j.entities.join(', ')}]`);
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
    assert.ok(/^https?:\/\/|\S+\/\S+ \S|LKML|Vigil reference/.test(e.source), `${where(e)}: source ${e.source} names no URL or repository and path`);
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
    'KernelBug',
    'none',
  ])
    assert.ok(families.has(f), `no corpus line for ${f}`);
  const formats = new Set(corpus.map((e) => e.format));
  for (const f of Object.keys(FORMATS)) assert.ok(formats.has(f), `no corpus line in format ${f}`);
});

test('a user-space program in syslog is counted, not classified, even when it prints a kernel message', () => {
  const found: string[] = [];
  const r = new LogReplay({
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
