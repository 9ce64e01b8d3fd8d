import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parseConfig, ConfigError } from '../../src/config/load.ts';

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
  let err: unknown;
  try {
    parseConfig(
      'engine:\n  repeatWindow: 5x\nxid:\n  fatal: [abc]\nconditions:\n  names:\n    KernelReady: "bad name"\nlisten: nope\nbogus: 1\n',
      'f.yaml',
    );
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof ConfigError);
  const msg = (err as Error).message;
  assert.match(msg, /^f\.yaml: invalid configuration/);
  assert.match(msg, /engine\.repeatWindow: "5x" is not a duration/);
  assert.match(msg, /xid\.fatal\.0:/);
  assert.match(msg, /conditions\.names\.KernelReady:/);
  assert.match(msg, /listen: HOST:PORT/);
  assert.match(msg, /Unrecognized key.*bogus/);
});

test('monitor sections reject unknown keys and bad values with their path', () => {
  assert.throws(() => parseConfig('gpu:\n  watchdog: forever\n'), /gpu\.watchdog/);
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

test('an escalation with an invalid regex is refused', () => {
  assert.throws(
    () => parseConfig('engine:\n  escalations:\n    - {match: "(", count: 3, raise: X}\n'),
    /engine\.escalations\.0\.match: not a valid regular expression/,
  );
});
