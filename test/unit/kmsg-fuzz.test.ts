/**
 * The kernel log is input Vigil does not control: nothing in the parsers or the classifier may
 * throw, hang, or keep an unbounded message, whatever the bytes. Seeded, so failures reproduce.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { detectFormat, MAX_MESSAGE_CHARS, parseKmsgRecord, parseLine, type LogFormat } from '../../src/sources/index.ts';
import { KernelLogClassifier, loadNpdConfig } from '../../src/monitors/index.ts';
import { rng } from '../helpers/prng.ts';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'kmsg');
const FORMATS: LogFormat[] = ['kmsg', 'dmesg', 'syslog', 'plain'];

const seeds = readFileSync(path.join(FIXTURES, 'raw-records.txt'), 'utf8')
  .split('\n')
  .concat(
    readFileSync(path.join(FIXTURES, 'faults.tsv'), 'utf8')
      .split('\n')
      .map((l) => `3,1,2,-;${l.split('\t')[2] ?? ''}`),
  );

function mutate(s: string, rand: () => number): string {
  const chars = [...s];
  const n = 1 + Math.floor(rand() * 6);
  for (let i = 0; i < n; i++) {
    const at = Math.floor(rand() * (chars.length + 1));
    const op = rand();
    if (op < 0.3) chars.splice(at, 1);
    else if (op < 0.6) chars.splice(at, 0, String.fromCharCode(Math.floor(rand() * 0x10000)));
    else if (op < 0.8) chars.splice(at, 0, ['\\x', ';', ',', '\n', ' ', '(', ')', ':', '[', ']', '\\x0a'][Math.floor(rand() * 11)]);
    else chars.length = Math.min(chars.length, at); // truncate
  }
  return chars.join('');
}

function randomBytes(rand: () => number, len: number): string {
  const b = Buffer.alloc(len);
  for (let i = 0; i < len; i++) b[i] = Math.floor(rand() * 256);
  return b.toString(rand() < 0.5 ? 'utf8' : 'latin1');
}

function exercise(input: string, c: KernelLogClassifier, at: number): void {
  const rec = parseKmsgRecord(input);
  if (rec) {
    assert.ok(rec.message.length <= MAX_MESSAGE_CHARS);
    assert.ok(Number.isSafeInteger(rec.seq) && rec.level >= 0 && rec.level <= 7);
    c.classify(rec, at);
  }
  for (const f of FORMATS) {
    const l = parseLine(input, f);
    if (l) {
      assert.ok(l.message.length <= MAX_MESSAGE_CHARS);
      for (const finding of c.classify(l, at)) assert.ok(finding.message.length < 2048);
    }
  }
}

test('fuzz: mutated real records and random bytes never throw', () => {
  const rand = rng(20240830);
  const npd = [loadNpdConfig(path.join(FIXTURES, 'npd-kernel-monitor.json'))];
  const c = new KernelLogClassifier({ npd });
  let at = 1_700_000_000_000;
  for (let i = 0; i < 20_000; i++) {
    const input = i % 3 === 0 ? randomBytes(rand, Math.floor(rand() * 400)) : mutate(seeds[Math.floor(rand() * seeds.length)], rand);
    exercise(input, c, at++);
  }
  assert.equal(typeof detectFormat(seeds.map((s) => mutate(s, rand))), 'string');
});

test('fuzz: 1 MiB lines are cut, quickly, in every format', () => {
  const c = new KernelLogClassifier({ npd: [loadNpdConfig(path.join(FIXTURES, 'npd-kernel-monitor.json'))] });
  const mib = 1024 * 1024;
  const bodies = [
    'A'.repeat(mib),
    `NVRM: Xid (PCI:0000:01:00): 13, ${'x'.repeat(mib)}`,
    `BUG: ${'[#1] '.repeat(mib / 5)}`,
    '\\x0a'.repeat(mib / 4),
    `task ${'a:1 '.repeat(mib / 4)} blocked for more than 120 seconds.`,
    ` ${'('.repeat(mib)}`,
  ];
  const start = Date.now();
  for (const body of bodies) {
    for (const prefix of ['6,1,1,-;', '[  1.0] ', 'Aug 30 11:43:09 host kernel: ', '']) {
      const input = prefix + body;
      exercise(input, c, Date.now());
      const r = parseKmsgRecord(input);
      if (r) assert.equal(r.truncated, true);
    }
  }
  assert.ok(Date.now() - start < 10_000, `took ${Date.now() - start} ms`);
  assert.equal(detectFormat(['A'.repeat(mib), `6,1,1,-;${'B'.repeat(mib)}`, `6,2,1,-;${'C'.repeat(mib)}`]), 'kmsg');
});

test('fuzz: truncated records at every length', () => {
  const c = new KernelLogClassifier();
  const rec =
    '4,1843,1843308145,-,caller=T1;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: fallen off the bus and is not responding to commands.\\x0a\n SUBSYSTEM=pci\n DEVICE=+pci:0000:b3:00.0\n';
  for (let n = 0; n <= rec.length; n++) exercise(rec.slice(0, n), c, 1_700_000_000_000 + n);
  assert.equal(parseKmsgRecord(rec.slice(0, 10)), null);
});
