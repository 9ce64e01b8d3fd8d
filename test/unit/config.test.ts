import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ConfigError, durationValue, kubeconfigProblem, parseListen, regexProblem } from '../../src/config/index.ts';
import { parseConfig } from '../../src/settings/index.ts';
import { parseUserRules } from '../../src/monitors/index.ts';

/** The message of the ConfigError that parsing `yaml` throws. */
function configError(yaml: string, source = 'f.yaml'): string {
  try {
    parseConfig(yaml, source);
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.message;
  }
  assert.fail(`accepted: ${yaml}`);
}

function tempDir(t: { after: (fn: () => void) => void }): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-config-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test('an empty file is a complete configuration with every default', () => {
  const c = parseConfig('');
  assert.equal(c.listen, '127.0.0.1:9464');
  assert.equal(c.kernelLog.lookback, 300_000);
  assert.equal(c.kubernetes.heartbeat, 300_000);
  assert.ok(c.xid.fatal.includes(79));
  assert.ok(!c.xid.fatal.includes(13));
  assert.equal(c.conditions.names.AcceleratedHardwareReady, 'AcceleratedHardwareReady');
  assert.equal(c.gpu.enabled, true);
  assert.equal(c.monitors.hostRoot, '/');
});

test('docs/vigil.example.yaml documents exactly the defaults', () => {
  const example = parseConfig(readFileSync(new URL('../../docs/vigil.example.yaml', import.meta.url), 'utf8'), 'docs/vigil.example.yaml');
  assert.deepEqual(example, parseConfig(''));
});

test('every invalid field is named, all at once', () => {
  const msg = configError(
    'engine:\n  repeatWindow: 5x\nxid:\n  fatal: [abc]\nconditions:\n  names:\n    KernelReady: "bad name"\nlisten: nope\nbogus: 1\n',
  );
  assert.match(msg, /^f\.yaml: invalid configuration/);
  assert.match(msg, /engine\.repeatWindow: expected a duration .*not "5x"/);
  assert.match(msg, /xid\.fatal\.0:/);
  assert.match(msg, /conditions\.names\.KernelReady:/);
  assert.match(msg, /listen: "nope": expected HOST:PORT/);
  assert.match(msg, /Unrecognized key.*bogus/);
});

test('monitor sections reject unknown keys and bad values with their path', () => {
  assert.throws(() => parseConfig('gpu:\n  watchdog: forever\n'), /gpu\.watchdog/);
  assert.throws(() => parseConfig('gpu:\n  thresholds:\n    clockEventPols: 3\n'), /gpu\.thresholds.*clockEventPols/);
  assert.throws(
    () => parseConfig('gpu:\n  fatalXids: [1]\n'),
    /gpu.*fatalXids|Unrecognized key.*fatalXids/,
    'the Xid policy lives in one place: xid.fatal',
  );
  assert.throws(() => parseConfig('monitors:\n  networking:\n    enabeld: true\n'), /monitors\.networking.*enabeld|enabeld/);
  assert.throws(() => parseConfig('kernelLog:\n  lookback: -1\n'), /kernelLog\.lookback/);
});

test('YAML syntax errors and duplicate keys are refused with the file named', () => {
  assert.throws(() => parseConfig('a: [\n', 'x.yaml'), /x\.yaml: not valid YAML/);
  assert.throws(() => parseConfig('listen: a:1\nlisten: b:2\n', 'x.yaml'), /x\.yaml: not valid YAML/);
});

test('durations: one parser for units, compound values and plain milliseconds', () => {
  for (const [text, ms] of [
    ['250ms', 250],
    ['30s', 30_000],
    ['5m', 300_000],
    ['1h30m', 5_400_000],
    ['1.5h', 5_400_000],
    ['2d', 172_800_000],
    ['0', 0],
    [1500, 1500],
  ] as const) {
    assert.equal(durationValue.parse(text), ms, String(text));
  }
  for (const bad of ['5', '5x', '-1s', '1h 30m', 'm', '', -1, 1.5]) assert.throws(() => durationValue.parse(bad), String(bad));
});

test('listen must be HOST:PORT with a port from 0 to 65535', () => {
  assert.deepEqual(parseListen('127.0.0.1:9464'), { host: '127.0.0.1', port: 9464 });
  assert.deepEqual(parseListen(':0'), { host: '', port: 0 });
  assert.deepEqual(parseListen('node-1.example:65535'), { host: 'node-1.example', port: 65_535 });
  for (const bad of ['garbage', '9464', '127.0.0.1:65536', '127.0.0.1:99999', '127.0.0.1:-1', 'a b:80', 'host:', '127.0.0.1:80x']) {
    assert.equal(parseListen(bad), undefined, bad);
    assert.match(configError(`listen: "${bad}"\n`), /^\s+listen: .*expected HOST:PORT with a port from 0 to 65535/m, bad);
  }
});

test('zero durations that would spin or time out at once are refused, naming the field', () => {
  for (const [yaml, field] of [
    ['engine:\n  tick: 0s\n', 'engine.tick'],
    ['engine:\n  tick: 0\n', 'engine.tick'],
    ['gpu:\n  pollInterval: 0\n', 'gpu.pollInterval'],
    ['gpu:\n  watchdog: 0ms\n', 'gpu.watchdog'],
    ['monitors:\n  kernel:\n    checks:\n      limits: {interval: 0s}\n', 'monitors.kernel.checks.limits.interval'],
    ['monitors:\n  networking:\n    ena: {timeout: 0}\n', 'monitors.networking.ena.timeout'],
    ['monitors:\n  runtime:\n    units: {timeout: 0s}\n', 'monitors.runtime.units.timeout'],
    ['monitors:\n  storage:\n    statfsTimeout: 0\n', 'monitors.storage.statfsTimeout'],
  ] as const) {
    assert.match(configError(yaml), new RegExp(`^\\s+${field.replaceAll('.', '\\.')}: must be more than 0`, 'm'), yaml);
  }
  // Where 0 means something (only new records, no heartbeat), it stays allowed.
  const c = parseConfig('kernelLog:\n  lookback: 0\nkubernetes:\n  heartbeat: 0s\n');
  assert.equal(c.kernelLog.lookback, 0);
  assert.equal(c.kubernetes.heartbeat, 0);
});

test('an empty stateDir, clashing condition names and a bad Event namespace are refused', () => {
  assert.match(configError('stateDir: ""\n'), /^\s+stateDir: must not be empty/m);
  assert.match(
    configError('conditions:\n  names: {KernelReady: NodeBroken, StorageReady: NodeBroken}\n'),
    /conditions\.names\.StorageReady: "NodeBroken" is already the name of KernelReady/,
  );
  assert.match(configError('kubernetes:\n  eventNamespace: Kube_System\n'), /kubernetes\.eventNamespace: expected a Kubernetes namespace/);
});

test('kernelLog.path must be a character device or a FIFO; a missing one is left to the blind-source report', (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, 'kmsg.txt');
  writeFileSync(file, '6,1,1,-;hello\n');
  assert.match(
    configError(`kernelLog:\n  path: ${file}\n`),
    new RegExp(`kernelLog\\.path: ${file} is a regular file: expected the kernel log device`),
  );
  assert.match(configError(`kernelLog:\n  path: ${dir}\n`), /kernelLog\.path: .* is a directory/);
  assert.match(configError('kernelLog:\n  path: ""\n'), /kernelLog\.path:/);
  const fifo = path.join(dir, 'kmsg.fifo');
  execFileSync('mkfifo', [fifo]);
  assert.equal(parseConfig(`kernelLog:\n  path: ${fifo}\n`).kernelLog.path, fifo);
  assert.equal(parseConfig('kernelLog:\n  path: /dev/kmsg\n').kernelLog.path, '/dev/kmsg');
  assert.equal(parseConfig(`kernelLog:\n  path: ${path.join(dir, 'missing')}\n`).kernelLog.path, path.join(dir, 'missing'));
  assert.equal(parseConfig(`kernelLog:\n  enabled: false\n  path: ${file}\n`).kernelLog.enabled, false, 'not checked when off');
});

test('kubernetes.kubeconfig must be a kubeconfig, checked without the Kubernetes client', (t) => {
  const dir = tempDir(t);
  assert.match(configError('kubernetes:\n  kubeconfig: /etc/passwd\n'), /kubernetes\.kubeconfig: \/etc\/passwd: not a kubeconfig/);
  assert.match(kubeconfigProblem(path.join(dir, 'none')) ?? '', /cannot read: ENOENT/);
  assert.match(kubeconfigProblem(dir) ?? '', /not a regular file/);
  const empty = path.join(dir, 'empty.yaml');
  writeFileSync(empty, 'apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n');
  assert.match(kubeconfigProblem(empty) ?? '', /lists no cluster/);
  const good = path.join(dir, 'kubeconfig');
  writeFileSync(
    good,
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]',
      'users: [{name: u, user: {token: t}}]',
      'contexts: [{name: x, context: {cluster: c, user: u}}]',
      'current-context: x',
      '',
    ].join('\n'),
  );
  assert.equal(kubeconfigProblem(good), undefined);
  assert.equal(parseConfig(`kubernetes:\n  kubeconfig: ${good}\n`).kubernetes.kubeconfig, good);
  assert.equal(parseConfig('kubernetes:\n  mode: "off"\n  kubeconfig: /etc/passwd\n').kubernetes.mode, 'off', 'not used, not checked');
});

test('configured patterns run on RE2: backtracking-prone ones are accepted; lookaround, backreferences and oversized programs are refused with the reason', () => {
  // Exponential on a backtracking engine, linear on RE2: nothing to refuse.
  for (const ok of [
    '(a+)+',
    '(a|a)*',
    '(\\w+\\s?)*$',
    '(.*a){20}x',
    '(?:.*,){12}X',
    'mlx5_core (?<pci>\\S+): .*Fatal',
    '(?P<dev>[[:alnum:]]+)\\z',
  ]) {
    assert.equal(regexProblem(ok), undefined, ok);
  }
  for (const look of ['foo(?=bar)', 'foo(?!bar)', '(?<=a)b', '(?<!a)b']) {
    assert.match(regexProblem(look) ?? 'accepted', /^lookahead and lookbehind .* not supported: patterns are RE2 syntax/, look);
  }
  for (const backref of ['(a)\\1', '(?<x>a)\\k<x>']) {
    assert.match(regexProblem(backref) ?? 'accepted', /^backreferences .* not supported: patterns are RE2 syntax/, backref);
  }
  assert.match(regexProblem('(?:.*a){200}x') ?? 'accepted', /^pattern too large: \d+ compiled instructions, at most 250/);
  assert.match(regexProblem('([a-z') ?? '', /^invalid regular expression \(RE2 syntax\): missing closing \]/);
  assert.match(regexProblem('x', 'g') ?? '', /unsupported flag "g"/);
});

test('config regexes RE2 cannot run are refused, naming the field', () => {
  assert.match(
    configError('engine:\n  escalations:\n    - {match: "(", count: 3, raise: X}\n'),
    /engine\.escalations\.0\.match: "\(": invalid regular expression \(RE2 syntax\)/,
  );
  assert.match(
    configError('engine:\n  escalations:\n    - {match: "NvidiaXID(?!13)", count: 3, raise: X}\n'),
    /engine\.escalations\.0\.match: "NvidiaXID\(\?!13\)": lookahead and lookbehind/,
  );
  assert.match(
    configError('monitors:\n  networking:\n    excludedInterfaces: ["^(eth)\\\\1$"]\n'),
    /monitors\.networking\.excludedInterfaces\.0: "\^\(eth\)\\\\1\$": backreferences/,
  );
  assert.match(
    configError('diagnostics:\n  autoCapture:\n    match: "(?<=X)Y"\n'),
    /diagnostics\.autoCapture\.match: .*lookahead and lookbehind/,
  );
  // The patterns, which froze the agent on V8, are fine on RE2.
  assert.equal(
    parseConfig('engine:\n  escalations:\n    - {match: "(.*a){20}x", count: 3, raise: X}\n').engine.escalations[0].match,
    '(.*a){20}x',
  );
});

test('a user rule RE2 cannot run is refused, naming the file, the rule and the field', () => {
  assert.throws(
    () => parseUserRules('rules:\n  - {name: look, pattern: "mlx5: (?!ok)", reason: SoftLockup}\n', '/etc/vigil/rules.yaml'),
    /^Error: \/etc\/vigil\/rules\.yaml: rule 0 \(look\): field "pattern": lookahead and lookbehind/,
  );
  assert.throws(
    () => parseUserRules('- {pattern: "(x+)y\\\\1", reason: SoftLockup}\n', 'r.yaml'),
    /r\.yaml: rule 0: field "pattern": backreferences/,
  );
  assert.equal(
    parseUserRules('- {name: slow-on-v8, pattern: "(.*a){20}x", reason: SoftLockup}\n', 'r.yaml')[0].re.test('a'.repeat(30) + 'x'),
    true,
  );
  assert.throws(
    () => parseUserRules('- {pattern: x, reason: SoftLockup, threshold: {count: 2, window: 0s}}\n', 'r.yaml'),
    /threshold\.window/,
  );
});

test('src/config imports nothing from src/monitors (monitors import their sections from it)', () => {
  const dir = new URL('../../src/config/', import.meta.url);
  for (const name of readdirSync(dir)) {
    const text = readFileSync(new URL(name, dir), 'utf8');
    assert.doesNotMatch(text, /from '\.\.\/monitors\//, name);
  }
});

test('sourceRetry (issue #22 point 14): 1s to 5m by default; a zero step or a max below initial is refused, naming the field', () => {
  assert.deepEqual(parseConfig('').sourceRetry, { initial: 1000, max: 300_000 });
  assert.deepEqual(parseConfig('sourceRetry: {initial: 100ms, max: 2s}\n').sourceRetry, { initial: 100, max: 2000 });
  assert.match(configError('sourceRetry: {initial: 0}\n'), /sourceRetry\.initial/);
  assert.match(configError('sourceRetry: {initial: 10s, max: 1s}\n'), /sourceRetry\.max.*at least sourceRetry\.initial/);
  assert.match(configError('sourceRetry: {intial: 1s}\n'), /sourceRetry.*intial/);
});
