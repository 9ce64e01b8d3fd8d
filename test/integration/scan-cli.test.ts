/** `vigil scan` as a user runs it: FIFOs, process substitution, huge lines, mixed and wrong formats, NPD files. */
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { gzipSync } from 'node:zlib';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const VIGIL = path.join(root, 'bin/vigil.js');
const NPD_STOCK = path.join(root, 'test/fixtures/kmsg/npd-kernel-monitor.json');
const tmp = mkdtempSync(path.join(os.tmpdir(), 'vigil-scan-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

function vigil(args: string[], input?: string) {
  const r = spawnSync(process.execPath, [VIGIL, ...args], { encoding: 'utf8', input, timeout: 120_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

function file(name: string, text: string): string {
  const p = path.join(tmp, name);
  writeFileSync(p, text);
  return p;
}

const rows = (out: string) =>
  out
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { line: number; reason: string; entity: string; condition: string });

const XID48 = '[  101.000002] NVRM: Xid (PCI:0000:3b:00): 48, pid=77, name=train, DBE (0x1,0x2)';
const LOCKUP = '[  104.000005] watchdog: BUG: soft lockup - CPU#6 stuck for 23s! [python3:4054]';

test('scan reads process substitution: vigil scan <(zcat log.gz)', () => {
  const gz = path.join(tmp, 'kern.log.gz');
  writeFileSync(gz, gzipSync(`${XID48}\n${LOCKUP}\n`));
  const r = spawnSync('bash', ['-c', `"${process.execPath}" "${VIGIL}" scan --json <(zcat "${gz}")`], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(
    rows(r.stdout).map((x) => x.reason),
    ['NvidiaXID48Error', 'SoftLockup'],
  );
});

test('scan reads a FIFO', async (t) => {
  const fifo = path.join(tmp, 'kern.fifo');
  assert.equal(spawnSync('mkfifo', [fifo]).status, 0);
  const child = spawn(process.execPath, [VIGIL, 'scan', '--json', fifo], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  await writeFile(fifo, `${XID48}\n${LOCKUP}\n`);
  assert.equal(await exited, 0, err);
  assert.deepEqual(
    rows(out).map((x) => x.reason),
    ['NvidiaXID48Error', 'SoftLockup'],
  );
});

test('a 600 MB line is cut at 1 MiB and reported: exit 2, no stack trace, the faults around it found', () => {
  const script =
    `{ echo '${XID48}'; head -c 629145600 /dev/zero | tr '\\0' a; echo; echo '${LOCKUP}'; } | ` +
    `"${process.execPath}" "${VIGIL}" scan --json -`;
  const r = spawnSync('bash', ['-c', script], { encoding: 'utf8', timeout: 300_000, maxBuffer: 64 << 20 });
  assert.equal(r.status, 2, r.stderr);
  assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  assert.match(r.stderr, /line 2 is 629145600 characters long; read its first 1048576 only/);
  assert.deepEqual(
    rows(r.stdout).map((x) => [x.line, x.reason]),
    [
      [1, 'NvidiaXID48Error'],
      [3, 'SoftLockup'],
    ],
  );
  const summary = JSON.parse(r.stderr.trim().split('\n').pop()!) as { summary: { cut: number; firstCut: number } };
  assert.deepEqual([summary.summary.cut, summary.summary.firstCut], [1, 2]);
});

test('--format kmsg on a dmesg file is not a quiet all-clear: faults found, lines counted, exit 2', () => {
  const log = file('dmesg.log', `${XID48}\n${LOCKUP}\n`);
  const r = vigil(['scan', '--format', 'kmsg', log]);
  assert.equal(r.code, 2);
  assert.match(r.err, /2 lines were not in kmsg format \(first: line 1\)/);
  assert.match(r.out, /NvidiaXID48Error/);
  const j = vigil(['scan', '--json', '--format', 'kmsg', log]);
  assert.equal(j.code, 2);
  const summary = JSON.parse(j.err.trim().split('\n').pop()!) as { summary: { unparsed: number; lines: number } };
  assert.deepEqual([summary.summary.lines, summary.summary.unparsed], [2, 2]);
});

test('a file that starts with kmsg records and goes on in dmesg and syslog is read to the end', () => {
  const log = file(
    'mixed.log',
    [
      '3,1844,1843439662,-;NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.',
      ...Array.from({ length: 60 }, (_, i) => `6,${1845 + i},${1843439662 + i},-;usb 1-1: benign ${i}`),
      XID48,
      'Dec  2 11:49:53 worker4 kernel: [  885.242168] NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)',
    ].join('\n') + '\n',
  );
  const r = vigil(['scan', '--json', log]);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(
    rows(r.out).map((x) => x.reason),
    ['NvidiaXID79Error', 'NvidiaXID48Error', 'NvidiaGPUInitFailed'],
  );
  assert.deepEqual(JSON.parse(r.err.trim()), {
    summary: { lines: 63, formats: { kmsg: 61, dmesg: 1, syslog: 1 }, findings: 3, unparsed: 0, cut: 0 },
  });
});

test('20 corrected AER errors 20 days apart do not raise PCIeCorrectedErrors (the log time counts, not the scan time)', () => {
  const aer = 'pcieport 0000:00:1c.5: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)';
  const apart = Array.from({ length: 20 }, (_, i) => `[${(100 + i * 20 * 86_400).toFixed(6)}] ${aer}`).join('\n');
  const r = vigil(['scan', '--json', file('aer-apart.log', `${apart}\n`)]);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(rows(r.out), []);
  const burst = Array.from({ length: 20 }, (_, i) => `[${(100 + i).toFixed(6)}] ${aer}`).join('\n');
  assert.deepEqual(
    rows(vigil(['scan', '--json', file('aer-burst.log', `${burst}\n`)]).out).map((x) => x.reason),
    ['PCIeCorrectedErrors'],
  );
});

test('--npd-config loads an NPD file; a line that an NPD rule and a built-in rule both match is printed once', () => {
  const log = file(
    'npd.log',
    [
      '[ 1.0] Killed process 1012 (heapster) total-vm:327128kB, anon-rss:306328kB, file-rss:11132kB, shmem-rss:12345kB',
      '[ 2.0] INFO: task docker:20744 blocked for more than 120 seconds.',
    ].join('\n') + '\n',
  );
  const r = vigil(['scan', '--json', '--npd-config', NPD_STOCK, log]);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(
    rows(r.out).map((x) => [x.line, x.reason, x.condition]),
    [
      [1, 'OOMKilling', 'KernelReady'],
      [2, 'AppBlocked', 'KernelReady'],
      [2, 'TaskHung', 'KernelReady'],
      [2, 'DockerHung', 'KernelDeadlock'],
    ],
  );
  // Without the flag the NPD reasons are not there.
  assert.deepEqual(
    rows(vigil(['scan', '--json', log]).out).map((x) => x.reason),
    ['OOMKilling', 'AppBlocked'],
  );
});

test('an NPD file for another log (journald, filelog) is refused by scan, run and check-config, naming the file', () => {
  for (const plugin of ['journald', 'filelog']) {
    const npd = file(
      `${plugin}-monitor.json`,
      JSON.stringify({ plugin, source: 'docker-monitor', rules: [{ type: 'temporary', reason: 'CorruptDockerImage', pattern: 'x' }] }),
    );
    const s = vigil(['scan', '--npd-config', npd, file('empty.log', '\n')]);
    assert.equal(s.code, 2);
    assert.match(s.err, new RegExp(`${plugin}-monitor\\.json: field "plugin": "${plugin}" is not supported`));
    const run = vigil(['run', '--standalone', '--listen', '127.0.0.1:0', '--state-dir', path.join(tmp, 'state'), '--npd-config', npd]);
    assert.equal(run.code, 2);
    assert.match(run.err, new RegExp(`${plugin}-monitor\\.json: field "plugin"`));
    const check = vigil(['check-config', file(`${plugin}.yaml`, `kernelLog:\n  npdConfigs: [${npd}]\n`)]);
    assert.equal(check.code, 2);
    assert.match(check.err, new RegExp(`${plugin}-monitor\\.json`));
  }
});
