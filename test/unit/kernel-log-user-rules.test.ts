import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadUserRules, parseUserRules, KernelLogClassifier } from '../../src/monitors/index.ts';

const T0 = 1_700_000_000_000;

const RULES = `
rules:
  - name: mlx5-fatal
    pattern: 'mlx5_core (?<pci>[0-9a-f:.]+): .*(?:Fatal|FW fatal)'
    contains: mlx5_core
    reason: Mlx5Fatal
    severity: Fatal
    condition: NetworkingReady
    recovery: untilReboot
    entity: 'pci:{pci}'
    message: 'ConnectX fatal error on {pci}'
  - name: ib-flap
    pattern: 'ib(\\d+): link (?:down|up)'
    flags: i
    reason: IBLinkFlap
    severity: Warning
    condition: NetworkingReady
    recovery: {ttl: 30m}
    entity: 'ib:{1}'
    threshold: {count: 3, window: 10m}
  - pattern: 'nvme nvme\\d+: I/O \\d+ QID \\d+ timeout'
    reason: BlockDeviceIOError
`;

test('user rules: parse, compile and classify with templates, thresholds and catalog defaults', () => {
  const rules = parseUserRules(RULES, '/etc/vigil/rules.yaml');
  assert.equal(rules.length, 3);
  assert.deepEqual(rules[1].threshold, { count: 3, windowMs: 600_000 });
  assert.deepEqual(rules[1].recovery, { kind: 'ttl', ttlMs: 1_800_000 });
  assert.equal(rules[2].name, 'rule-2');
  assert.equal(rules[2].severity, undefined, 'a catalog reason keeps its catalog severity');

  const c = new KernelLogClassifier({ userRules: rules });
  const [f] = c.classify({ message: 'mlx5_core 0000:3b:00.0: mlx5_health_try_recover: FW fatal error' }, T0);
  assert.equal(f.reason, 'Mlx5Fatal');
  assert.equal(f.entity, 'pci:0000:3b:00.0');
  assert.equal(f.severity, 'Fatal');
  assert.equal(f.condition, 'NetworkingReady');
  assert.deepEqual(f.recovery, { kind: 'untilReboot' });
  assert.equal(f.message, 'ConnectX fatal error on 0000:3b:00.0: mlx5_core 0000:3b:00.0: mlx5_health_try_recover: FW fatal error');
  assert.deepEqual(f.attrs, { rule: 'mlx5-fatal' });

  const [g] = c.classify({ message: 'IB0: Link Down' }, T0);
  assert.equal(g.entity, 'ib:0');
  assert.deepEqual(g.threshold, { count: 3, windowMs: 600_000 });

  // The built-in NVMe rule raises this line too (on blockdev:nvme0); the user rule's finding is its own.
  const nvme = c.classify({ message: 'nvme nvme0: I/O 123 QID 4 timeout, aborting' }, T0);
  assert.deepEqual(
    nvme.map((x) => x.entity),
    ['blockdev:nvme0', ''],
  );
  const h = nvme.find((x) => x.attrs?.rule === 'rule-2')!;
  assert.equal(h.reason, 'BlockDeviceIOError');
  assert.equal(h.entity, '');
  assert.equal(h.message, 'nvme nvme0: I/O 123 QID 4 timeout, aborting');

  // `contains` guards the regex; the built-ins still run alongside.
  assert.deepEqual(c.classify({ message: 'something else: FW fatal error' }, T0), []);
  const both = c.classify({ message: 'EXT4-fs error (device sda1): mlx5_core 0000:3b:00.0: x Fatal' }, T0).map((x) => x.reason);
  assert.deepEqual(both, ['Ext4Error', 'Mlx5Fatal']);
});

test('user rules: a top-level list, an empty file, and loading from disk', () => {
  assert.equal(parseUserRules('- {pattern: x, reason: SoftLockup}\n', 'f.yaml').length, 1);
  assert.deepEqual(parseUserRules('', 'f.yaml'), []);
  assert.deepEqual(parseUserRules('rules: []\n', 'f.yaml'), []);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-rules-'));
  try {
    const file = path.join(dir, 'r.yaml');
    writeFileSync(file, RULES);
    assert.equal(loadUserRules(file).length, 3);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('user rules: unknown reasons get a default recovery from their severity', () => {
  const [fatal, warn] = parseUserRules(
    '- {pattern: a, reason: NewFatal, severity: Fatal, condition: KernelReady}\n- {pattern: b, reason: NewWarn, severity: Warning, condition: KernelReady}\n',
    'f.yaml',
  );
  assert.deepEqual(fatal.recovery, { kind: 'untilReboot' });
  assert.deepEqual(warn.recovery, { kind: 'ttl', ttlMs: 3_600_000 });
});

test('user rules: validation errors name the file, the rule and the field', () => {
  const err = (yaml: string) => () => parseUserRules(yaml, '/etc/vigil/rules.yaml');
  assert.throws(
    err('rules:\n  - {pattern: ok, reason: SoftLockup}\n  - {name: broken, pattern: "a(b", reason: SoftLockup}\n'),
    /^Error: \/etc\/vigil\/rules\.yaml: rule 1 \(broken\): field "pattern": invalid regular expression/,
  );
  assert.throws(
    err('- {pattern: x, reason: NotInCatalog}\n'),
    /rules\.yaml: rule 0: field "severity": required because reason NotInCatalog/,
  );
  assert.throws(err('- {pattern: x, reason: NotInCatalog, severity: Warning}\n'), /rule 0: field "condition": required/);
  assert.throws(err('- {pattern: x, reason: lowercase}\n'), /rule 0: field "reason": expected a PascalCase reason/);
  assert.throws(err('- {name: n, pattern: x, reason: SoftLockup, severity: Bad}\n'), /rule 0 \(n\): field "severity"/);
  assert.throws(
    err('- {pattern: x, reason: SoftLockup, threshold: {count: 3, window: soon}}\n'),
    /rule 0: field "threshold\.window": expected a duration/,
  );
  assert.throws(err('- {pattern: x, reason: SoftLockup, recovery: {ttl: forever}}\n'), /rule 0: field "recovery/);
  assert.throws(err('- {pattern: x, reason: SoftLockup, flags: g}\n'), /rule 0: field "flags"/);
  assert.throws(err('- {pattern: x, reason: SoftLockup, sevrity: Fatal}\n'), /rule 0: unknown field "sevrity"/);
  assert.throws(err('- 5\n'), /rule 0: expected a mapping/);
  assert.throws(err('- {reason: SoftLockup}\n'), /rule 0: field "pattern"/);
  assert.throws(err('rules: {a: 1}\n'), /rules\.yaml: field "rules": expected a list/);
  assert.throws(err('other: 1\n'), /rules\.yaml: expected a list of rules/);
  assert.throws(err('rules: [\n'), /rules\.yaml: invalid YAML/);
});
