import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { goRegexToJs, loadNpdConfig, NpdMatcher, parseNpdConfig, KernelLogClassifier } from '../../src/monitors/index.ts';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'kmsg');
const T0 = 1_700_000_000_000;

test("NPD's stock kernel-monitor.json loads as it is", () => {
  const cfg = loadNpdConfig(path.join(FIXTURES, 'npd-kernel-monitor.json'));
  assert.equal(cfg.plugin, 'kmsg');
  assert.equal(cfg.source, 'kernel-monitor');
  assert.equal(cfg.bufferSize, 10);
  assert.equal(cfg.lookbackMs, 300_000);
  assert.equal(cfg.rules.length, 14);
  assert.deepEqual(
    cfg.conditions.map((c) => [c.type, c.reason]),
    [
      ['KernelDeadlock', 'KernelHasNoDeadlock'],
      ['XfsShutdown', 'XfsHasNotShutDown'],
      ['CperHardwareErrorFatal', 'CperHardwareHasNoFatalError'],
    ],
  );
  // None of the stock patterns can match a newline, so each line is matched alone (fast path).
  assert.ok(cfg.rules.every((r) => !r.multiline));
});

test('temporary rules give Warning findings, permanent ones Fatal on their condition', () => {
  const m = new NpdMatcher(loadNpdConfig(path.join(FIXTURES, 'npd-kernel-monitor.json')));
  const [oom] = m.match('Killed process 1234 (python) total-vm:10000kB, anon-rss:5000kB, file-rss:0kB, shmem-rss:0kB', T0);
  assert.equal(oom.reason, 'OOMKilling');
  assert.equal(oom.severity, 'Warning');
  assert.equal(oom.condition, 'KernelReady');
  assert.deepEqual(oom.recovery, { kind: 'ttl', ttlMs: 600_000 });
  assert.equal(oom.entity, '');
  assert.equal(oom.attrs!.npdSource, 'kernel-monitor');

  const [xfs] = m.match('XFS (dm-0): Corruption of in-memory data detected.  Shutting down filesystem', T0);
  assert.equal(xfs.reason, 'XfsHasShutdown');
  assert.equal(xfs.severity, 'Fatal');
  assert.equal(xfs.condition, 'XfsShutdown');
  assert.deepEqual(xfs.recovery, { kind: 'untilReboot' });

  assert.equal(
    m
      .match('task docker:1234 blocked for more than 120 seconds.', T0)
      .map((f) => f.reason)
      .join(),
    'TaskHung,DockerHung',
  );
  assert.equal(m.match('{1}[Hardware Error]: event severity: fatal', T0)[0].condition, 'CperHardwareErrorFatal');
  assert.equal(m.match('divide error: 0000 [#1] SMP', T0)[0].reason, 'KernelOops');
});

test('patterns must match to the end of the line', () => {
  const m = new NpdMatcher(loadNpdConfig(path.join(FIXTURES, 'npd-kernel-monitor.json')));
  // "...seconds." must end the line; trailing text means no match.
  assert.deepEqual(m.match('INFO: task jbd2/sda1-8:123 blocked for more than 120 seconds. extra', T0), []);
  assert.deepEqual(m.match('{1}[Hardware Error]: event severity: corrected, more', T0), []);
  assert.equal(m.match('INFO: task jbd2/sda1-8:123 blocked for more than 120 seconds.', T0)[0].reason, 'TaskHung');
});

test('multi-line patterns match across the buffer; the message holds the matched lines', () => {
  const cfg = parseNpdConfig(
    JSON.stringify({
      source: 'gpu-monitor',
      conditions: [{ type: 'GpuLost', reason: 'GpuIsPresent', message: 'all GPUs present' }],
      rules: [
        {
          type: 'permanent',
          condition: 'GpuLost',
          reason: 'GpuFellOff',
          pattern: 'NVRM: The NVIDIA GPU (\\S+)\\nNVRM: .*\\nNVRM: fallen off the bus.*',
        },
      ],
    }),
    'gpu.json',
  );
  assert.equal(cfg.rules[0].multiline, true);
  const m = new NpdMatcher(cfg);
  assert.deepEqual(m.match('NVRM: The NVIDIA GPU 0000:b3:00.0', T0), []);
  assert.deepEqual(m.match('NVRM: (PCI ID: 10de:26b5) installed in this system has', T0), []);
  const [f] = m.match('NVRM: fallen off the bus and is not responding to commands.', T0);
  assert.equal(f.reason, 'GpuFellOff');
  assert.equal(f.severity, 'Fatal');
  assert.equal(f.message.split('\n').length, 3);
  assert.ok(f.message.startsWith('NVRM: The NVIDIA GPU 0000:b3:00.0\n'));
});

test('skipList drops lines; patternGeneratedMessageSuffix is appended', () => {
  const cfg = parseNpdConfig(
    JSON.stringify({
      plugin: 'kmsg',
      skipList: ['vigil-ignore'],
      rules: [{ type: 'temporary', reason: 'Boom', pattern: 'boom.*', patternGeneratedMessageSuffix: 'see runbook X' }],
    }),
    'x.json',
  );
  const m = new NpdMatcher(cfg);
  assert.deepEqual(m.match('boom vigil-ignore', T0), []);
  assert.equal(m.match('  boom now  ', T0)[0].message, 'boom now; see runbook X');
});

test('the classifier runs NPD configs next to the built-in rules', () => {
  const npd = [loadNpdConfig(path.join(FIXTURES, 'npd-readonly-monitor.json'))];
  const c = new KernelLogClassifier({ npd });
  const f = c.classify({ message: 'EXT4-fs (sda1): Remounting filesystem read-only' }, T0);
  assert.deepEqual(
    f.map((x) => [x.reason, x.severity ?? '-', x.condition ?? '-']),
    [
      ['FilesystemReadOnly', '-', '-'],
      ['FilesystemIsReadOnly', 'Fatal', 'ReadonlyFilesystem'],
    ],
  );
});

test('Go regex syntax is translated', () => {
  assert.deepEqual(goRegexToJs('(?i)foo\\z'), { source: 'foo(?![\\s\\S])', flags: 'i' });
  assert.equal(goRegexToJs('(?P<dev>[[:alnum:]]+)').source, '(?<dev>[0-9A-Za-z]+)');
  assert.equal(goRegexToJs('\\Qa.b\\E+').source, 'a\\.b+');
  assert.equal(new RegExp(goRegexToJs('(?s)a.b').source, goRegexToJs('(?s)a.b').flags).test('a\nb'), true);
  assert.throws(() => goRegexToJs('(?U)a+'), /ungreedy/);
  assert.throws(() => goRegexToJs('a(?i:b)'), /inline flag/);
});

test('validation errors name the file, the rule and the field', () => {
  const bad = (o: unknown) => () => parseNpdConfig(JSON.stringify(o), '/etc/npd/bad.json');
  assert.throws(() => parseNpdConfig('{ nope', '/etc/npd/bad.json'), /\/etc\/npd\/bad\.json: invalid JSON/);
  assert.throws(
    bad({
      rules: [
        { type: 'temporary', reason: 'A', pattern: 'ok' },
        { type: 'temporary', reason: 'Broken', pattern: 'a(b' },
      ],
    }),
    /bad\.json: rules\[1\] \(Broken\): field "pattern": invalid regular expression/,
  );
  assert.throws(bad({ rules: [{ type: 'sometimes', reason: 'A', pattern: 'x' }] }), /rules\[0\] \(A\): field "type"/);
  assert.throws(bad({ rules: [{ type: 'permanent', reason: 'A', pattern: 'x' }] }), /rules\[0\] \(A\): field "condition": required/);
  assert.throws(
    bad({ rules: [{ type: 'permanent', condition: 'Nope', reason: 'A', pattern: 'x' }] }),
    /field "condition": Nope is not declared/,
  );
  assert.throws(bad({ rules: [{ type: 'temporary', pattern: 'x' }] }), /rules\[0\]: field "reason"/);
  assert.throws(bad({ bufferSize: 0 }), /field "bufferSize"/);
  assert.throws(bad({ lookback: 'soon' }), /field "lookback": invalid duration/);
  assert.throws(bad({ conditions: [{ reason: 'x' }] }), /conditions\[0\]: field "type"/);
  assert.throws(bad([]), /expected a JSON object/);
  // Permanent rules may use Vigil's built-in condition types without declaring them.
  assert.doesNotThrow(bad({ rules: [{ type: 'permanent', condition: 'KernelReady', reason: 'A', pattern: 'x' }] }));
});
