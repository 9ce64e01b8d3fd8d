/** The replay behind `vigil scan`: the live pipeline and engine, on a clock taken from the lines. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import type { EmittedFinding } from '../../src/api/index.ts';
import { parseConfig } from '../../src/settings/index.ts';
import { loadNpdConfig, type NpdConfig } from '../../src/monitors/index.ts';
import { LineSplitter, replayStream, type ReplaySummary } from '../../src/pipeline/index.ts';
import { createReplay } from '../../src/app/index.ts';
import { lineKind, lineTime } from '../../src/sources/index.ts';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'kmsg');
const DAY = 86_400;

function replay(lines: string[], opts: { config?: string; npd?: NpdConfig[]; format?: 'auto' | 'kmsg' | 'dmesg' } = {}) {
  const found: { line: number; f: EmittedFinding }[] = [];
  const r = createReplay({
    config: parseConfig(opts.config ?? '{}'),
    rules: { userRules: [], npd: opts.npd ?? [] },
    format: opts.format ?? 'auto',
    onFinding: (f, line) => found.push({ line, f }),
  });
  r.push(lines.join('\n') + '\n');
  const summary: ReplaySummary = r.end();
  return { found, summary, reasons: found.map((x) => x.f.reason), engine: r.engine };
}

const aer = (bdf: string) => `pcieport ${bdf}: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)`;

test('20 corrected AER errors 20 days apart do not raise PCIeCorrectedErrors; 20 within the window do', () => {
  const apart = Array.from({ length: 20 }, (_, i) => `[${(100 + i * 20 * DAY).toFixed(6)}] ${aer('0000:00:1c.5')}`);
  assert.deepEqual(replay(apart).reasons, []);
  const syslogApart = Array.from({ length: 20 }, (_, i) => {
    const d = new Date(Date.UTC(2024, 0, 1) + i * 20 * DAY * 1000).toISOString().replace('.000Z', '+00:00');
    return `${d} worker4 kernel: ${aer('0000:00:1c.5')}`;
  });
  assert.deepEqual(replay(syslogApart).reasons, []);
  const burst = Array.from({ length: 20 }, (_, i) => `[${(100 + i).toFixed(6)}] ${aer('0000:00:1c.5')}`);
  const r = replay(burst);
  assert.deepEqual(r.reasons, ['PCIeCorrectedErrors']);
  assert.equal(r.found[0].line, 20, 'raised on the line that reached the threshold');
});

test('xid.ignore mutes an Xid, as in the agent', () => {
  const lines = ['[ 1.0] NVRM: Xid (PCI:0000:3b:00): 48, pid=77, name=train, DBE (0x1,0x2)'];
  assert.deepEqual(replay(lines).reasons, ['NvidiaXID48Error']);
  assert.deepEqual(replay(lines, { config: 'xid:\n  ignore: [48]\n' }).reasons, []);
});

test("the engine's escalations run: five Xid 13 within 10 minutes raise NvidiaXID13Repeated", () => {
  const lines = Array.from(
    { length: 5 },
    (_, i) => `[ ${10 + i * 70}.0] NVRM: Xid (PCI:0000:cb:00): 13, pid=1, name=x, Graphics SM Warp Exception`,
  );
  const r = replay(lines);
  assert.ok(r.reasons.includes('NvidiaXID13Repeated'), r.reasons.join());
  // Spread over an hour they do not.
  const slow = Array.from(
    { length: 5 },
    (_, i) => `[ ${10 + i * 900}.0] NVRM: Xid (PCI:0000:cb:00): 13, pid=1, name=x, Graphics SM Warp Exception`,
  );
  assert.ok(!replay(slow).reasons.includes('NvidiaXID13Repeated'));
});

test("repeats inside the engine's repeat window are emitted once; after it, again", () => {
  const lockup = 'watchdog: BUG: soft lockup - CPU#6 stuck for 23s! [python3:4054]';
  const r = replay([`[ 10.0] ${lockup}`, `[ 20.0] ${lockup}`, `[ 30.0] ${lockup}`, `[ 200.0] ${lockup}`]);
  assert.deepEqual(
    r.found.map((x) => [x.line, x.f.reason]),
    [
      [1, 'SoftLockup'],
      [4, 'SoftLockup'],
    ],
  );
});

test('every line is read in its own format: a dmesg tail after kmsg records is not dropped', () => {
  const r = replay([
    '3,1844,1843439662,-;NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.',
    ' SUBSYSTEM=pci',
    '[ 1900.000000] NVRM: Xid (PCI:0000:3b:00): 48, pid=77, name=train, DBE (0x1,0x2)',
    'Dec  2 11:49:53 worker4 kernel: [  885.242168] NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)',
    'nf_conntrack: nf_conntrack: table full, dropping packet',
  ]);
  assert.deepEqual(r.reasons, ['NvidiaXID79Error', 'NvidiaXID48Error', 'NvidiaGPUInitFailed', 'ConntrackExceededKernel']);
  assert.deepEqual(r.summary.formats, { kmsg: 1, dmesg: 1, syslog: 1, plain: 1 });
  assert.equal(r.summary.unparsed, 0);
});

test('a forced format reads lines that are not in it as plain text, and counts them', () => {
  const r = replay(['[ 1.0] NVRM: Xid (PCI:0000:3b:00): 48, pid=77, name=train, DBE (0x1,0x2)', '[ 2.0] usb 1-1: new device'], {
    format: 'kmsg',
  });
  assert.deepEqual(r.reasons, ['NvidiaXID48Error'], 'the fault is still found');
  assert.equal(r.summary.unparsed, 2);
  assert.equal(r.summary.firstUnparsed, 1);
});

test('an NPD event and a built-in finding with the same reason on one line are one finding', () => {
  const npd = [loadNpdConfig(path.join(FIXTURES, 'npd-kernel-monitor.json'))];
  const r = replay(
    [
      '[ 1.0] Killed process 1012 (heapster) total-vm:327128kB, anon-rss:306328kB, file-rss:11132kB, shmem-rss:12345kB',
      '[ 2.0] EXT4-fs error (device sda1): ext4_find_entry:1455: inode #2: comm ls: reading directory lblock 0',
    ],
    { npd },
  );
  assert.deepEqual(
    r.found.map((x) => [x.line, x.f.reason]),
    [
      [1, 'OOMKilling'],
      [2, 'Ext4Error'],
    ],
  );
});

test("NPD's conditions read False while healthy and True with the permanent rule's reason", () => {
  const npd = [loadNpdConfig(path.join(FIXTURES, 'npd-kernel-monitor.json'))];
  const r = replay(['[ 1.0] usb 1-1: new device'], { npd });
  const deadlock = () => r.engine.health().conditions.find((c) => c.type === 'KernelDeadlock')!;
  assert.deepEqual([deadlock().status, deadlock().reason, deadlock().message], ['False', 'KernelHasNoDeadlock', 'kernel has no deadlock']);
  const after = replay(['[ 5.0] INFO: task docker:20744 blocked for more than 120 seconds.'], { npd });
  const c = after.engine.health().conditions.find((x) => x.type === 'KernelDeadlock')!;
  assert.equal(c.status, 'True');
  assert.equal(c.reason, 'DockerHung');
  assert.match(c.message, /task docker:20744 blocked for more than 120 seconds\./);
  // The temporary rule on the same line is an event (a Warning) with its own reason.
  const taskHung = after.found.find((x) => x.f.reason === 'TaskHung')!;
  assert.equal(taskHung.f.severity, 'Warning');
  // Vigil's own conditions keep True = healthy.
  assert.equal(after.engine.health().conditions.find((x) => x.type === 'KernelReady')!.status, 'True');
});

test('line kinds and times: kmsg and dmesg count from boot, syslog and dmesg -T from a date', () => {
  assert.equal(lineKind('6,1,2,-;x'), 'kmsg');
  assert.equal(lineKind('[  12.5] x'), 'dmesg');
  assert.equal(lineKind('Dec  2 11:49:53 host kernel: x'), 'syslog');
  assert.equal(lineKind('just words'), 'plain');
  assert.equal(lineKind('   NVRM: more'), 'continuation');
  assert.equal(lineKind('  '), 'blank');
  assert.deepEqual(lineTime('6,1,2500000,-;x', 'kmsg'), { kind: 'uptime', ms: 2500 });
  assert.deepEqual(lineTime('<3>[  12.500000] x', 'dmesg'), { kind: 'uptime', ms: 12_500 });
  assert.deepEqual(lineTime('[Mon Jan  1 12:34:56 2022] x', 'dmesg'), { kind: 'wall', ms: Date.UTC(2022, 0, 1, 12, 34, 56) });
  assert.deepEqual(lineTime('Feb 29 01:02:03 host kernel: x', 'syslog'), { kind: 'yearless', ms: Date.UTC(2000, 1, 29, 1, 2, 3) });
  assert.deepEqual(lineTime('2024-08-30T11:43:09.5+02:00 host kernel: x', 'syslog'), {
    kind: 'wall',
    ms: Date.UTC(2024, 7, 30, 9, 43, 9, 500),
  });
  assert.equal(lineTime('no time here', 'syslog'), undefined);
});

test('syslog dates without a year keep counting forward across New Year', () => {
  // Ten corrected errors on Dec 31 and ten on Jan 2 are a day apart, not 20 in the 1 h window.
  const line = (date: string) => `${date} h kernel: ${aer('0000:00:1c.5')}`;
  const r = replay([
    ...Array.from({ length: 10 }, (_, i) => line(`Dec 31 23:0${i}:00`)),
    ...Array.from({ length: 10 }, (_, i) => line(`Jan  2 00:0${i}:00`)),
  ]);
  assert.deepEqual(r.reasons, []);
});

test('the line splitter cuts a long line at the cap and says how long it was', () => {
  const got: [string, number | undefined][] = [];
  const s = new LineSplitter(8, (text, length) => got.push([text, length]));
  s.push('short\nabcdefgh');
  s.push('ijklmnop');
  s.push('qrst\nlast');
  s.end();
  assert.deepEqual(got, [
    ['short', undefined],
    ['abcdefgh', 20],
    ['last', undefined],
  ]);
});

test('a stream with a NUL byte near its start is refused before anything is classified', async () => {
  const found: EmittedFinding[] = [];
  const r = createReplay({ config: parseConfig('{}'), rules: { userRules: [], npd: [] }, onFinding: (f) => found.push(f) });
  const chunks = Readable.from([Buffer.from('NVRM: Xid (PCI:0000:3b:00): 48, pid=77, name=train, DBE (0x1,0x2)\n'), Buffer.from([0, 1])]);
  await assert.rejects(replayStream(chunks, r), /NUL/);
  assert.deepEqual(found, []);
});
