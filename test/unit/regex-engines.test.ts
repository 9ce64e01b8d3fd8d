/**
 * Configured patterns run on native RE2 (npm `re2`) where it loads and on re2js otherwise: the two
 * must give the same verdicts and groups, so behaviour never depends on which engine an install
 * has (issue #22, point 7). re2js alone decides what is accepted.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { compileNative, NATIVE_MAX_PATTERNS, nativeSource, UserRegex } from '../../src/config/index.ts';
import { ADVERSARIAL, BLOW_UP } from '../../bench/userrules.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const read = (f: string) => readFileSync(path.join(ROOT, f), 'utf8');

let nativeLoads = true;
try {
  createRequire(import.meta.url)('re2');
} catch {
  nativeLoads = false;
}
const needsNative = { skip: nativeLoads ? false : 'native re2 is not installed (an optional dependency)' };

/** [pattern, flags] as the agent compiles them. */
function corpusPatterns(): [string, string][] {
  const out: [string, string][] = [];
  // NPD files: the agent matches `(?:pattern)\z`.
  for (const f of ['test/fixtures/kmsg/npd-kernel-monitor.json', 'test/fixtures/kmsg/npd-readonly-monitor.json']) {
    for (const r of (JSON.parse(read(f)) as { rules: { pattern: string }[] }).rules) out.push([`(?:${r.pattern})\\z`, '']);
  }
  // User-rule and escalation examples in the docs, and the rules the tests load.
  for (const m of read('docs/configuration.md').matchAll(/pattern: '((?:[^'\\]|\\.)*)'/g)) out.push([m[1], '']);
  for (const f of ['test/unit/user-regex.test.ts', 'test/unit/kernel-log-user-rules.test.ts', 'test/unit/kernel-log-npd.test.ts']) {
    for (const m of read(f).matchAll(/pattern: '((?:[^'\\$]|\\.)*)'/g)) out.push([m[1].replace(/\\(.)/g, '$1'), '']);
  }
  out.push(['mlx5_core (?<pci>\\S+): .*Fatal', 'i'], ['^(?:NvidiaXID(13|31|43)Warning)$', '']);
  // Defaults of the exclusion lists.
  out.push(['^(loop|ram|zram|sr|fd|nbd)\\d*$', ''], ['^kworker/', '']);
  // RE2 syntax JavaScript lacks, and what npm re2's JavaScript translation touches.
  out.push(
    ['(?U)task a+ hung', ''],
    ['EXT4-fs (?i:ERROR) on [[:alnum:]]+', ''],
    ['\\Qfs[0].x\\E failed', ''],
    ['\\Qa/b(?<x>\\p{L}\\E+', ''],
    ['\\Qunterminated.*', ''],
    ['(?P<dev>sd[a-z]+)\\d*', ''],
    ['(?<dev>nvme\\d+)n\\d+', ''],
    ['path /var/(\\w+)/x', ''],
    ['[\\\\/]+', ''],
    ['\\x{41}\\x42\\pL\\p{Greek}+\\PN', ''],
    ['\\Aboot\\z', ''],
    ['\\bsda\\b|\\Bdb\\B', ''],
    ['(?i)kelvin ǅ straße', ''],
    ['café+', 'iu'],
    ['^b$', 'm'],
    ['a.b', 's'],
    ['(?s:a.b)(?-s:.)', ''],
    ['', ''],
    ['a{2,}?b{,3}', ''],
    ['[^a-z\\d]\\D\\W\\S', ''],
  );
  for (const c of [...ADVERSARIAL, BLOW_UP]) out.push([c.pattern, '']);
  return out;
}

/** Lines both engines see: every kernel-line fixture, the adversarial 4 KiB lines, and odd text. */
function corpusLines(): string[] {
  const lines: string[] = [];
  for (const f of ['benign.txt', 'dmesg-T.txt', 'dmesg.txt', 'equivalence.txt', 'syslog.txt', 'raw-records.txt']) {
    lines.push(...read(`test/fixtures/kmsg/${f}`).split('\n'));
  }
  for (const row of read('test/fixtures/kmsg/faults.tsv').split('\n')) lines.push(row.split('\t').at(-1)!);
  for (const c of [...ADVERSARIAL, BLOW_UP]) lines.push(c.miss(0), c.hit(0));
  lines.push(
    'task aaa hung',
    'EXT4-fs error on sda1',
    'fs[0].x failed',
    'a/b(?<x>\\p{L}\\E',
    'a/b(?<x>\\p{L}',
    'unterminated.*',
    'sdb12',
    'nvme0n1',
    'path /var/log/x',
    'a\\//b',
    'ABxλμν9',
    'boot',
    'sda db',
    'KELVIN ǆ STRASSE',
    'CAFÉÉ',
    'a\nb\nc',
    'a\nb',
    'aab',
    '!é_ ',
    'NvidiaXID31Warning',
    'mlx5_core 0000:3b:00.0: FW FATAL',
    'loop12',
    'kworker/0:1',
    '😀 emoji 😀 before a match: nvme1n1',
  );
  return lines;
}

test(
  'native RE2 and re2js give the same verdict, index and groups for every pattern in the fixtures, docs and tests, and the adversarial set',
  needsNative,
  () => {
    const lines = corpusLines();
    let compared = 0;
    for (const [pattern, flags] of corpusPatterns()) {
      let js: UserRegex;
      try {
        js = UserRegex.compile(pattern, flags);
      } catch {
        continue; // refused for both engines (the tests' refusal cases)
      }
      const native = compileNative(pattern, flags);
      assert.ok(native, `${pattern} /${flags}: native RE2 refused it or answered a probe differently`);
      for (const line of lines) {
        const what = `${JSON.stringify(pattern)} /${flags} on ${JSON.stringify(line.slice(0, 60))}`;
        const verdict = js.test(line);
        assert.equal(native.test(line), verdict, `test: ${what}`);
        if (!verdict) continue;
        const a: RegExpExecArray = js.exec(line)!;
        const b: RegExpExecArray = native.exec(line)!;
        assert.deepEqual(
          [b.index, [...b], b.groups ? { ...b.groups } : undefined],
          [a.index, [...a], a.groups ? { ...a.groups } : undefined],
          `exec: ${what}`,
        );
        compared++;
      }
    }
    assert.ok(compared > 200, `${compared} matches compared`);
  },
);

test('text inside \\Q...\\E reaches native RE2 as literals, not through its JavaScript translation', () => {
  assert.equal(nativeSource('\\Qa/b(?<x>\\p{L}\\E+'), 'a\\/b\\(\\?<x>\\\\p\\{L\\}+');
  assert.equal(nativeSource('x\\\\Q/'), 'x\\\\Q/', 'an escaped backslash before Q starts no quote');
  assert.equal(nativeSource('\\Qend'), 'end');
  assert.equal(nativeSource(''), '(?:)');
});

/** Runs `code` (ESM, with tsx) in a fresh Node with `env` added; returns its stdout as JSON. */
function inChild(code: string, env: Record<string, string> = {}): unknown {
  const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    encoding: 'utf8',
  });
  return JSON.parse(out);
}

const RULES_CODE = `
import { parseUserRules } from './src/monitors/kernel-log/user-rules.ts';
import { KernelLogClassifier } from './src/monitors/kernel-log/classify.ts';
import { regexEngineInfo } from './src/config/regex.ts';
const rules = parseUserRules(JSON.stringify([{ name: 'r', pattern: 'ib(\\\\d+): (?<what>link down)', reason: 'IbLinkDown', severity: 'Warning', condition: 'KernelReady', entity: 'ib:{1}', message: '{what}' }]), 'rules.yaml');
const c = new KernelLogClassifier({ userRules: rules });
const f = c.classify({ message: 'mlx: ib3: link down' }, 1);
console.log(JSON.stringify({ engine: rules[0].re.engine, loaded: regexEngineInfo().loaded, findings: f.map((x) => [x.reason, x.entity, x.message]) }));
`;

test('with VIGIL_REGEX_ENGINE=re2js a user rule runs on re2js, native RE2 is never loaded, and the rule finds what it finds on native RE2', () => {
  const js = inChild(RULES_CODE, { VIGIL_REGEX_ENGINE: 're2js' }) as { engine: string; loaded: boolean; findings: unknown };
  assert.equal(js.engine, 're2js');
  assert.equal(js.loaded, false);
  assert.deepEqual(js.findings, [['IbLinkDown', 'ib:3', 'link down: mlx: ib3: link down']]);
  if (!nativeLoads) return;
  const native = inChild(RULES_CODE) as { engine: string; loaded: boolean; findings: unknown };
  assert.deepEqual([native.engine, native.loaded], ['re2', true]);
  assert.deepEqual(native.findings, js.findings);
});

test('validating patterns never loads native RE2; a rule loads it at its first line', needsNative, () => {
  const r = inChild(`
import { createRequire } from 'node:module';
import { regexProblem, UserRegex } from './src/config/regex.ts';
const loaded = () => Object.keys(createRequire(import.meta.url).cache).some((k) => k.endsWith('.node') && k.includes('re2'));
regexProblem('ib(\\\\d+)');
const re = UserRegex.compile('ib(\\\\d+)', '', { native: true });
const before = loaded();
re.test('ib0');
console.log(JSON.stringify({ before, after: loaded() }));
`) as { before: boolean; after: boolean };
  assert.deepEqual(r, { before: false, after: true });
});

test(
  `at most ${NATIVE_MAX_PATTERNS} distinct patterns run on native RE2 (its automaton memory is fixed per pattern); the rest run on re2js and match the same`,
  needsNative,
  () => {
    const r = inChild(`
import { UserRegex, NATIVE_MAX_PATTERNS } from './src/config/regex.ts';
const res = Array.from({ length: NATIVE_MAX_PATTERNS + 4 }, (_, i) => UserRegex.compile('dev' + i + ' (\\\\w+)', '', { native: true }));
const again = UserRegex.compile('dev0 (\\\\w+)', '', { native: true });
console.log(JSON.stringify({ engines: res.map((re) => re.engine), again: again.engine, groups: res.map((re, i) => re.exec('x dev' + i + ' fail')?.[1]) }));
`) as { engines: string[]; again: string; groups: string[] };
    assert.deepEqual(r.engines, [...Array<string>(NATIVE_MAX_PATTERNS).fill('re2'), 're2js', 're2js', 're2js', 're2js']);
    assert.equal(r.again, 're2', 'a pattern already on native RE2 shares its compiled object');
    assert.deepEqual(r.groups, Array<string>(NATIVE_MAX_PATTERNS + 4).fill('fail'));
  },
);
