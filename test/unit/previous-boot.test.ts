/**
 * The previous-boot policy (catalog "Previous boot"), as a table of real lines: a record the kernel
 * replays from before this boot raises PreviousBootHardwareError (a Warning), never a Fatal for this
 * boot; the same record outside the boot's first seconds, or one this boot raised as an exception,
 * keeps its own reason. Also: panics that name a cause give what docs/reasons.md says.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { lookupReason } from '../../src/catalog/index.ts';
import { KernelLogClassifier, PREVIOUS_BOOT_WINDOW_MS } from '../../src/monitors/index.ts';
import { paths } from '../../scripts/gen-catalog.ts';
import { replayText } from '../helpers/corpus.ts';

/** Replays text through the scan pipeline; the reasons (and messages) it raised, in order. */
function replay(text: string): { reasons: string[]; messages: string[] } {
  const found = replayText(text);
  return { reasons: found.map((f) => f.reason), messages: found.map((f) => f.message) };
}

// Sources: andikleen/mcelog#70 (an Intel J5005 logging a bank record 0.064 s into every boot),
// the Ryzen 5950X notebook page, yangxiaohua2009/custom-kernel#6 and intel/Intel-Linux-Processor-Microcode-Data-Files#58 (BERT).
const MCE_BANK = 'mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 4: a600000000020408';
const table: { name: string; text: string; want: string[]; evidence?: RegExp }[] = [
  {
    name: 'polled bank record 0.064 s into the boot (UC and PCC set, EN clear), syslog with the kernel time',
    text: `Sep 16 19:51:15 kernel: [    0.064265] ${MCE_BANK}`,
    want: ['PreviousBootHardwareError'],
    evidence: /bank 4 status a600000000020408 \(UC, PCC, EN clear\).*MCG status 0.*0\.064 s into the boot.*MachineCheckUncorrected/,
  },
  {
    name: 'the same record in dmesg form',
    text: `[    0.064265] ${MCE_BANK}`,
    want: ['PreviousBootHardwareError'],
  },
  {
    name: 'as a raw kmsg record (tsUsec 64265)',
    text: `2,512,64265,-;${MCE_BANK}`,
    want: ['PreviousBootHardwareError'],
  },
  {
    name: '"Machine check events logged" 0.064 s into the boot',
    text: 'Sep 16 19:51:15 kernel: [    0.064261] mce: [Hardware Error]: Machine check events logged',
    want: ['PreviousBootHardwareError'],
    evidence: /0\.064 s into the boot by the boot-time poll/,
  },
  {
    name: "the same bank record past the window is this boot's",
    text: `[  ${(PREVIOUS_BOOT_WINDOW_MS / 1000 + 1).toFixed(6)}] ${MCE_BANK}`,
    want: ['MachineCheckUncorrected'],
  },
  {
    name: 'a bank record without a boot time is judged as any other',
    text: MCE_BANK,
    want: ['MachineCheckUncorrected'],
  },
  {
    name: "an exception record (MCIP) is this boot's at any time",
    text: '<0>[790577.354149] mce: [Hardware Error]: CPU 6: Machine Check Exception: 4 Bank 1: bc800800060c0859',
    want: ['MachineCheckUncorrected'],
  },
  {
    name: 'the TSC 0 detail line raises nothing',
    text: 'Sep 16 19:51:15 kernel: [    0.064270] mce: [Hardware Error]: TSC 0 ADDR fef4c9e0',
    want: [],
  },
  {
    name: 'a fatal BERT record of the previous boot, with its detail lines: one warning',
    text: [
      '[    0.931221] BERT: Error records from previous boot:',
      '[    0.931222] [Hardware Error]: event severity: fatal',
      '[    0.931223] [Hardware Error]:  Error 0, type: fatal',
      '[    0.931224] [Hardware Error]:   section_type: Firmware Error Record Reference',
    ].join('\n'),
    want: ['PreviousBootHardwareError'],
    evidence: /BERT record from the previous boot, event severity fatal.*HardwareErrorFatal/,
  },
  {
    name: 'the BERT header alone raises nothing',
    text: '[    2.345569] BERT: Error records from previous boot:',
    want: [],
  },
  {
    name: 'pstore and ramoops registration raise nothing',
    text: '[    9.686309] pstore: Registered ramoops as persistent store backend\n[    9.690737] ramoops: using 0x40000@0x42100000, ecc: 0',
    want: [],
  },
];

for (const row of table) {
  test(`previous boot: ${row.name}`, () => {
    const got = replay(row.text);
    assert.deepEqual(got.reasons, row.want);
    if (row.evidence) assert.match(got.messages[0], row.evidence);
  });
}

test('PreviousBootHardwareError is a Warning of KernelReady, never Fatal', () => {
  const r = lookupReason('PreviousBootHardwareError');
  assert.ok(r);
  assert.equal(r.severity, 'Warning');
  assert.equal(r.condition, 'KernelReady');
});

test('the BERT context ends at the first line without "[Hardware Error]"', () => {
  const c = new KernelLogClassifier();
  const at = Date.now();
  c.classify({ message: 'BERT: Error records from previous boot:' }, at);
  assert.equal(c.classify({ message: '[Hardware Error]: event severity: fatal' }, at)[0].reason, 'PreviousBootHardwareError');
  c.classify({ message: 'microcode: sig=0x706e5, pf=0x80, revision=0xa0' }, at);
  assert.equal(c.classify({ message: '[Hardware Error]: event severity: fatal' }, at)[0].reason, 'HardwareErrorFatal');
});

// Real panic lines (sources in test/fixtures/corpus/panics-and-xfs.yaml) and the reason the docs give them.
const panics: [string, string][] = [
  ['[62005.595383] Kernel panic - not syncing: Watchdog detected hard LOCKUP on cpu 74', 'HardLockup'],
  ['[46223316.649832] Kernel panic - not syncing: Hard LOCKUP', 'HardLockup'],
  ['[   36.560762] Kernel panic - not syncing: softlockup: hung tasks', 'SoftLockup'],
  ['[  243.567394] Kernel panic - not syncing: hung_task: blocked tasks', 'AppBlocked'],
  ['[ 3873.846309] Kernel panic - not syncing: Fatal Machine check', 'MachineCheckUncorrected'],
  ['<0>[790577.354164] Kernel panic - not syncing: Fatal local machine check', 'MachineCheckUncorrected'],
  ['[    5.390622] Kernel panic - not syncing: Fatal exception', 'KernelBug'],
];

test('a panic that names a cause gives what docs/reasons.md says: the cause only, any other panic KernelBug', () => {
  const md = readFileSync(paths.md, 'utf8');
  const policy = md.split('\n').find((l) => l.startsWith('- **Kernel splats.**'));
  assert.ok(policy, 'no Kernel splats policy in docs/reasons.md');
  for (const [line, reason] of panics) {
    assert.ok(policy.includes(`(${reason})`) || policy.includes(` ${reason}`), `the policy does not name ${reason}`);
    assert.deepEqual(replay(line).reasons, [reason], line);
  }
  assert.match(policy, /raises that cause's reason only, not KernelBug/);
});

test('an XFS log I/O error and the shutdown it leads to: XFSError on the error line, XFSShutdown on the shutdown line, as the docs say', () => {
  // siderolabs/talos#8733
  const got = replay(
    [
      '109.200.197.196: kern:   alert: [2024-05-13T15:13:11.99476118Z]: XFS (sdb6): log I/O error -5',
      '109.200.197.196: kern:   alert: [2024-05-13T15:13:11.99477118Z]: XFS (sdb6): Filesystem has been shut down due to log error (0x2).',
    ].join('\n'),
  );
  assert.deepEqual(got.reasons, ['XFSError', 'XFSShutdown']);
  const xfsError = readFileSync(paths.md, 'utf8')
    .split('\n')
    .find((l) => l.includes('XFSError') && l.includes('XFSShutdown (Fatal) is raised too'));
  assert.ok(xfsError, 'docs/reasons.md does not say XFSShutdown follows XFSError');
});
