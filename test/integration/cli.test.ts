/** The `vigil` command line as a user runs it: real process, real files, exit codes. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { tempDir } from '../helpers/temp-dir.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const tmp = tempDir('vigil-cli-');

/** One line of `vigil scan --json`. */
interface ScanRow {
  line: number;
  reason: string;
  severity: string;
  condition: string;
  message: string;
  entity: string;
}

function vigil(args: string[], input?: string) {
  const r = spawnSync(process.execPath, [path.join(root, 'bin/vigil.js'), ...args], { encoding: 'utf8', input, timeout: 60_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

function file(name: string, text: string): string {
  const p = path.join(tmp, name);
  writeFileSync(p, text);
  return p;
}

test('--help works and lists the commands', () => {
  const r = vigil(['--help']);
  assert.equal(r.code, 0);
  for (const cmd of ['run', 'scan', 'catalog', 'check-config', 'gpu']) assert.match(r.out, new RegExp(`\\b${cmd}\\b`));
});

test('scan --json prints one object per finding with the line where it completed', () => {
  const log = file(
    'mixed.log',
    [
      '[  100.000001] usb 1-1: new high-speed USB device number 2 using xhci_hcd',
      '[  101.000002] NVRM: Xid (PCI:0000:3b:00): 48, pid=77, name=train, DBE (0x1,0x2)',
      '[  102.000003] NVRM: The NVIDIA GPU 0000:5e:00.0',
      '               NVRM: (PCI ID: 10de:2330) installed in this system has',
      '               NVRM: fallen off the bus and is not responding to commands.',
      '[  103.000004] EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode',
      '[  104.000005] watchdog: BUG: soft lockup - CPU#6 stuck for 23s! [python3:4054]',
    ].join('\n') + '\n',
  );
  const r = vigil(['scan', '--json', log]);
  assert.equal(r.code, 0, r.err);
  const rows = r.out
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as ScanRow);
  assert.deepEqual(
    rows.map((x) => [x.line, x.reason, x.severity, x.condition, x.entity]),
    [
      [2, 'NvidiaXID48Error', 'Fatal', 'AcceleratedHardwareReady', 'gpu:0000:3b:00'],
      [5, 'NvidiaXID79Error', 'Fatal', 'AcceleratedHardwareReady', 'gpu:0000:5e:00'],
      [7, 'SoftLockup', 'Warning', 'KernelReady', 'cpu:6'],
    ],
  );
  for (const x of rows) assert.deepEqual(Object.keys(x).sort(), ['condition', 'entity', 'line', 'message', 'reason', 'severity']);
});

test('scan reads syslog and raw kmsg records, and stdin', () => {
  const syslog = file(
    'syslog.log',
    'Dec  2 11:49:53 worker4 kernel: [  885.242168] NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)\n',
  );
  const a = vigil(['scan', '--json', syslog]);
  assert.equal((JSON.parse(a.out) as ScanRow).reason, 'NvidiaGPUInitFailed');
  const b = vigil(['scan', '--json', '--format', 'kmsg', '-'], '3,1234,5678,-;nf_conntrack: nf_conntrack: table full, dropping packet\n');
  assert.equal(b.code, 0, b.err);
  assert.equal((JSON.parse(b.out) as ScanRow).reason, 'ConntrackExceededKernel');
});

test('scan exits 2 with a clear message on a missing file, a binary file or a bad format', () => {
  const missing = vigil(['scan', path.join(tmp, 'nope.log')]);
  assert.equal(missing.code, 2);
  assert.match(missing.err, /nope\.log/);
  const bin = file('bin.log', 'abc\u0000def\n');
  const b = vigil(['scan', bin]);
  assert.equal(b.code, 2);
  assert.match(b.err, /not a text log/);
  const fmt = vigil(['scan', '--format', 'xml', bin]);
  assert.equal(fmt.code, 2);
  assert.match(fmt.err, /xml/);
});

test('check-config accepts a good file and names the file, rule and field of a bad rule', () => {
  const good = file('good.yaml', 'xid:\n  fatal: [48, 79]\n');
  assert.equal(vigil(['check-config', good]).code, 0);
  const rules = file(
    'rules.yaml',
    'rules:\n  - name: broken\n    pattern: "([a-z"\n    reason: MyReason\n    severity: Warning\n    condition: KernelReady\n',
  );
  const cfg = file('with-rules.yaml', `kernelLog:\n  userRules: [${rules}]\n`);
  const r = vigil(['check-config', cfg]);
  assert.equal(r.code, 2);
  assert.match(r.err, /rules\.yaml/);
  assert.match(r.err, /broken/);
  assert.match(r.err, /pattern/);
  const bad = vigil(['check-config', file('bad.yaml', 'kubernetes:\n  heartbeat: often\n')]);
  assert.equal(bad.code, 2);
  assert.match(bad.err, /kubernetes\.heartbeat/);
});

test('run refuses an invalid configuration with exit 2 and the field named', () => {
  const r = vigil(['run', '--standalone', '--config', file('run-bad.yaml', 'engine:\n  tick: 0.5\n')]);
  assert.equal(r.code, 2);
  assert.match(r.err, /engine\.tick/);
});

test('catalog --json lists every reason with its public fields', () => {
  const r = vigil(['catalog', '--json']);
  const reasons = JSON.parse(r.out) as { name: string; severity: string; condition: string }[];
  const xid = reasons.find((x) => x.name === 'NvidiaXID{code}Error');
  assert.equal(xid?.severity, 'Fatal');
  assert.equal(xid?.condition, 'AcceleratedHardwareReady');
});

test('run --listen with an unusable address exits 2 naming --listen', () => {
  for (const value of ['garbage', '127.0.0.1:70000']) {
    const r = vigil(['run', '--standalone', '--listen', value]);
    assert.equal(r.code, 2, value);
    assert.match(r.err, /--listen/, value);
    assert.match(r.err, /HOST:PORT/, value);
  }
});

test('run --kubeconfig with a file that is not a kubeconfig exits 2 naming the file', () => {
  const r = vigil(['run', '--kubeconfig', '/etc/passwd', '--state-dir', path.join(tmp, 'state-kc')]);
  assert.equal(r.code, 2);
  assert.match(r.err, /--kubeconfig \/etc\/passwd: not a kubeconfig/);
});

test('check-config and run refuse every value that would break run, naming each field', () => {
  const regular = file('not-a-device.log', 'hello\n');
  const cfg = file(
    'breaks-run.yaml',
    `listen: 127.0.0.1:70000\nstateDir: ""\nengine:\n  tick: 0s\nkernelLog:\n  path: ${regular}\ngpu:\n  pollInterval: 0\n`,
  );
  for (const args of [
    ['check-config', cfg],
    ['run', '--standalone', '--config', cfg],
  ]) {
    const r = vigil(args);
    assert.equal(r.code, 2, args[0]);
    for (const field of ['listen', 'stateDir', 'engine\\.tick', 'kernelLog\\.path', 'gpu\\.pollInterval']) {
      assert.match(r.err, new RegExp(`^\\s+${field}: `, 'm'), `${args[0]}: ${field}`);
    }
    assert.match(r.err, /is a regular file/);
  }
});

test('check-config and run refuse a user rule RE2 cannot run (lookaround, backreference), naming the file, the rule and the field', () => {
  // User patterns are RE2 syntax (linear time): lookaround and backreferences do not exist there.
  const rules = file(
    're2-rules.yaml',
    'rules:\n  - {name: ok, pattern: "(.*a){20}x", reason: SoftLockup}\n  - {name: look, pattern: "mlx5(?!_core)", reason: SoftLockup}\n',
  );
  const cfg = file('re2.yaml', `kernelLog:\n  userRules: [${rules}]\n`);
  for (const args of [
    ['check-config', cfg],
    ['run', '--standalone', '--config', cfg],
  ]) {
    const r = vigil(args);
    assert.equal(r.code, 2, args[0]);
    assert.match(
      r.err,
      /re2-rules\.yaml: rule 1 \(look\): field "pattern": lookahead and lookbehind .* not supported: patterns are RE2 syntax/,
      args[0],
    );
  }
  const backref = file('backref-rules.yaml', '- {name: twice, pattern: "(\\\\w+) \\\\1", reason: SoftLockup}\n');
  const r = vigil(['check-config', file('backref.yaml', `kernelLog:\n  userRules: [${backref}]\n`)]);
  assert.equal(r.code, 2);
  assert.match(r.err, /backref-rules\.yaml: rule 0 \(twice\): field "pattern": backreferences/);
});
