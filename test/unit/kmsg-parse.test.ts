import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { detectFormat, MAX_MESSAGE_CHARS, parseKmsgRecord, parseLine, unescapeKmsg, type LogFormat } from '../../src/sources/index.ts';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'kmsg');
const lines = (name: string) =>
  readFileSync(path.join(FIXTURES, name), 'utf8')
    .split('\n')
    .filter((l) => l !== '');

test('parseKmsgRecord: header fields, level and facility', () => {
  const r = parseKmsgRecord('3,1844,1843439662,-;NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.\n');
  assert.ok(r);
  assert.equal(r.seq, 1844);
  assert.equal(r.level, 3);
  assert.equal(r.facility, 0);
  assert.equal(r.tsUsec, 1843439662);
  assert.equal(r.message, 'NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.');
  assert.deepEqual(r.fields, {});
  assert.equal(r.truncated, undefined);
  // A record written from user space as "<3>..." has facility 1: PRI 11.
  const u = parseKmsgRecord('11,7,99,-;vigil-test hello');
  assert.equal(u?.level, 3);
  assert.equal(u?.facility, 1);
});

test('parseKmsgRecord: extra header fields and KEY=VALUE continuation lines', () => {
  const r = parseKmsgRecord(
    '3,1845,1843500000,-,caller=T896;pcieport 0000:00:1c.5: AER: PCIe Bus Error: severity=Corrected\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:1c.5\n',
  );
  assert.ok(r);
  assert.equal(r.message, 'pcieport 0000:00:1c.5: AER: PCIe Bus Error: severity=Corrected');
  assert.deepEqual(r.fields, { SUBSYSTEM: 'pci', DEVICE: '+pci:0000:00:1c.5' });
});

test('parseKmsgRecord: \\xNN escapes become the bytes they stand for (newlines, backslash, UTF-8)', () => {
  const r = parseKmsgRecord(
    '4,1843,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed in this system has\\x0aNVRM: fallen off the bus and is not responding to commands.\\x0a',
  );
  assert.equal(
    r?.message,
    'NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\nNVRM: fallen off the bus and is not responding to commands.\n',
  );
  assert.equal(unescapeKmsg('a \\x5c b caf\\xc3\\xa9'), 'a \\ b café');
  assert.equal(unescapeKmsg('no escapes'), 'no escapes');
  assert.equal(unescapeKmsg('bad \\xZZ and cut \\x4'), 'bad \\xZZ and cut \\x4');
});

test('parseKmsgRecord: rejects what is not a record', () => {
  for (const bad of [
    '',
    'hello',
    ';msg',
    '3,4;msg',
    'a,b,c,-;msg',
    '3,-1,5,-;msg',
    '3,1,2',
    `3,1,2,${'x'.repeat(300)};m`,
    '99999999999999999999999,1,1,-;x',
  ]) {
    assert.equal(parseKmsgRecord(bad), null, JSON.stringify(bad.slice(0, 40)));
  }
});

test('parseKmsgRecord: caps the message and says so', () => {
  const r = parseKmsgRecord(`6,1,1,-;${'A'.repeat(MAX_MESSAGE_CHARS + 100)}`);
  assert.equal(r?.message.length, MAX_MESSAGE_CHARS);
  assert.equal(r?.truncated, true);
});

test('raw-records fixture parses in kmsg format, continuation lines skipped', () => {
  const raw = lines('raw-records.txt');
  assert.equal(detectFormat(raw), 'kmsg');
  const parsed = raw.map((l) => parseLine(l, 'kmsg')).filter((l) => l !== null);
  assert.equal(parsed.length, 6);
  assert.equal(parsed[1].seq, 1843);
  assert.ok(parsed[1].message.includes('\nNVRM: fallen off the bus'));
  assert.equal(parsed[4].message, 'vigil-test escaped backslash \\ and café');
  assert.equal(parsed[5].message, 'watchdog: BUG: soft lockup - CPU#6 stuck for 23s! [VM Thread:4054]');
  assert.equal(parsed[5].level, 4);
});

test('dmesg: timestamps, caller ids and indented continuation lines', () => {
  const d = lines('dmesg.txt');
  assert.equal(detectFormat(d), 'dmesg');
  const p = d.map((l) => parseLine(l, 'dmesg'));
  assert.deepEqual(p[0], { message: 'NVRM: The NVIDIA GPU 0000:b3:00.0' });
  assert.deepEqual(p[1], { message: 'NVRM: (PCI ID: 10de:26b5) installed in this system has', continuation: true });
  assert.deepEqual(p[2], { message: 'NVRM: fallen off the bus and is not responding to commands.', continuation: true });
  assert.equal(p[9]!.message, 'kexec[896]: segfault at 0 ip 0000000000000000 sp 00007ffeaf0ff420 error 14 in dash[561ac3c57000+4000]');
  assert.equal(p[10]!.message, 'end_request: I/O error, dev sde, sector 52428288');
  assert.deepEqual(parseLine('<3>[  12.5] oops', 'dmesg'), { message: 'oops', level: 3 });
});

test('dmesg -T: human timestamps, including a padded day', () => {
  const d = lines('dmesg-T.txt');
  assert.equal(detectFormat(d), 'dmesg');
  assert.equal(parseLine(d[1], 'dmesg')!.message.slice(0, 36), 'NVRM: Xid (PCI:0000:cb:00): 109, pid');
  assert.equal(parseLine(d[2], 'dmesg')!.message, 'BUG: something bad happened');
});

test('syslog: ident, optional kernel timestamp, RFC 3339 time', () => {
  const s = lines('syslog.txt');
  assert.equal(detectFormat(s), 'syslog');
  assert.deepEqual(parseLine(s[0], 'syslog'), {
    message: 'NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)',
    ident: 'kernel',
  });
  assert.deepEqual(parseLine(s[2], 'syslog'), { message: '(root) CMD (/usr/lib64/sa/sa1 1 1)', ident: 'CROND' });
  assert.equal(parseLine(s[3], 'syslog')!.message, 'nf_conntrack: nf_conntrack: table full, dropping packet');
  assert.equal(parseLine(s[4], 'syslog')!.message.slice(0, 34), 'nvidia-nvswitch0: SXid (PCI:0000:c');
});

test('plain lines and blanks; unknown formats fall back to plain', () => {
  assert.deepEqual(parseLine('NVRM: Xid (PCI:0000:44:00): 79, x\r\n', 'plain'), { message: 'NVRM: Xid (PCI:0000:44:00): 79, x' });
  assert.equal(parseLine('   ', 'plain'), null);
  assert.equal(detectFormat(['just', 'some words', 'here']), 'plain');
  assert.equal(detectFormat([]), 'plain');
  // A syslog file with a non-matching line keeps it whole rather than dropping it.
  assert.deepEqual(parseLine('garbage line', 'syslog'), { message: 'garbage line' });
  for (const f of ['kmsg', 'dmesg', 'syslog', 'plain'] as LogFormat[]) {
    const big = parseLine('x'.repeat(MAX_MESSAGE_CHARS * 2), f);
    if (big) {
      assert.ok(big.message.length <= MAX_MESSAGE_CHARS);
      assert.equal(big.truncated, true);
    }
  }
});
