/**
 * Configured patterns on RE2 (src/config/regex.ts): what a rule's groups, flags and an
 * escalation's `raise` template see, the Go syntax NPD files use, and patterns that a backtracking
 * engine takes forever on finishing (issue #22, point 7; their cost per line is bench/userrules.ts's).
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DFA_MAX_MEM, MAX_PROGRAM_SIZE, UserRegex } from '../../src/config/index.ts';
import { Escalator } from '../../src/engine/index.ts';
import { NpdMatcher, parseNpdConfig } from '../../src/monitors/index.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

test('a configured pattern gives numbered and named groups, undefined for a group that did not take part (as in JavaScript), and the match index', () => {
  const m = UserRegex.compile('mlx5_core (?<pci>\\S+): (warn)?(Fatal)').exec('kern: mlx5_core 0000:3b:00.0: Fatal');
  assert.ok(m);
  assert.equal(m.index, 6);
  assert.equal(m[0], 'mlx5_core 0000:3b:00.0: Fatal');
  assert.equal(m[1], '0000:3b:00.0');
  assert.equal(m[2], undefined);
  assert.equal(m[3], 'Fatal');
  assert.equal(m.groups?.pci, '0000:3b:00.0');
  assert.equal(UserRegex.compile('absent').exec('kern: mlx5_core'), null);
});

test('the flags i, m, s and u mean what they mean in JavaScript', () => {
  assert.equal(UserRegex.compile('fatal', 'i').test('FATAL'), true);
  assert.equal(UserRegex.compile('fatal').test('FATAL'), false);
  assert.equal(UserRegex.compile('^b$', 'm').test('a\nb\nc'), true);
  assert.equal(UserRegex.compile('^b$').test('a\nb\nc'), false);
  assert.equal(UserRegex.compile('a.b', 's').test('a\nb'), true);
  assert.equal(UserRegex.compile('a.b').test('a\nb'), false);
  assert.equal(UserRegex.compile('é+', 'u').test('café'), true);
  assert.equal(UserRegex.compile('(?i)fatal', 'm').re2Source, '(?m)(?i)fatal', 'flags travel inline to the read thread');
});

test('replace fills $1, $<name>, $& and $$ as String.replace does, and an escalation raises the reason it names', () => {
  const re = UserRegex.compile('^(?:NvidiaXID(?<code>\\d+)Warning)$');
  assert.equal(re.replace('NvidiaXID13Warning', 'NvidiaXID$1Repeated'), 'NvidiaXID13Repeated');
  assert.equal(re.replace('NvidiaXID13Warning', '$<code>-$&-$$'), '13-NvidiaXID13Warning-$');
  assert.equal(re.replace('Other', 'X$1'), 'Other', 'no match: unchanged');
  assert.equal(UserRegex.compile('(a)').replace('xay', '[$12]'), 'x[a2]y', '$12 without a 12th group is $1 then "2"');

  const esc = new Escalator([{ match: 'NvidiaXID(13|31|43)Warning', count: 2, windowMs: 60_000, raise: 'NvidiaXID$1Repeated' }]);
  const f = { reason: 'NvidiaXID31Warning', message: 'm', source: 'kmsg', entity: 'gpu:0000:3b:00', at: 1 } as const;
  assert.deepEqual(esc.observe(f, 1), []);
  assert.deepEqual(
    esc.observe({ ...f, at: 2 }, 2).map((x) => x.reason),
    ['NvidiaXID31Repeated'],
  );
});

test('NPD patterns run as Go RE2 syntax, including the flags and groups the JavaScript translation refused', () => {
  const cfg = parseNpdConfig(
    JSON.stringify({
      plugin: 'kmsg',
      source: 'kernel-monitor',
      rules: [
        { type: 'temporary', reason: 'Ungreedy', pattern: '(?U)task a+ hung' },
        { type: 'temporary', reason: 'InlineGroup', pattern: 'EXT4-fs (?i:ERROR) on [[:alnum:]]+' },
        { type: 'temporary', reason: 'Quoted', pattern: '\\Qfs[0].x\\E failed' },
      ],
    }),
    'npd.json',
  );
  const npd = new NpdMatcher(cfg);
  assert.deepEqual(
    npd.match('task aaa hung', 1).map((f) => f.reason),
    ['Ungreedy'],
  );
  assert.deepEqual(
    npd.match('EXT4-fs error on sda1', 2).map((f) => f.reason),
    ['InlineGroup'],
  );
  assert.deepEqual(
    npd.match('fs[0].x failed', 3).map((f) => f.reason),
    ['Quoted'],
  );
  assert.deepEqual(npd.match('fsX0].x failed', 4), [], '\\Q..\\E is literal');
  assert.throws(
    () => parseNpdConfig(JSON.stringify({ rules: [{ type: 'temporary', reason: 'Look', pattern: 'a(?=b)' }] }), 'npd.json'),
    /npd\.json: rules\[0\] \(Look\): field "pattern": lookahead and lookbehind/,
  );
});

test('each pattern has the automaton memory bound, not the 8 MiB default of re2js', () => {
  assert.equal(UserRegex.compile('mlx5_core (\\S+)').dfaMaxMem, DFA_MAX_MEM);
});

test('a pattern over the program size bound is refused, and one just under it is accepted', () => {
  assert.throws(
    () => UserRegex.compile('(?:ab){150}'),
    new RegExp(`^Error: pattern too large: \\d+ compiled instructions, at most ${MAX_PROGRAM_SIZE}`),
  );
  assert.ok(UserRegex.compile('(?:ab){100}').programSize <= MAX_PROGRAM_SIZE);
});

test('patterns that backtrack catastrophically on V8 finish on RE2 with the right answer on 32 KiB lines (a backtracking engine would run for years: the child is killed at 60 s)', () => {
  // [pattern, line = prefix + unit x count + suffix, matches]; what each costs per line is bench/userrules.ts's.
  const cases: [string, string, string, number, string, boolean][] = [
    // The required literal up front, so RE2 cannot rule the line out without matching.
    ['(.*a){20}x', 'x', 'a', 32768, '', false],
    ['(?:.*,){12}X', 'X', ',', 32768, '', false],
    // A matching line: the groups are tracked over the whole line.
    ['(.*a){20}x', '', 'a', 32768, 'x', true],
    ['(a+)+$', '', 'a', 32768, '!', false],
    ['(a|a)*$', '', 'a', 32768, '!', true],
    ['(\\w+\\s?)*$', '', 'word ', 6554, '!', true],
    ['^(a|aa)+$', '', 'a', 32768, '!', false],
  ];
  // A child process, so that an engine that backtracks is killed rather than freezing the test run.
  const script = `
    import { UserRegex } from ${JSON.stringify(pathToFileURL(path.join(ROOT, 'src/config/index.ts')).href)};
    const cases = ${JSON.stringify(cases)};
    process.stdout.write(JSON.stringify(cases.map(([p, pre, unit, n, post]) => UserRegex.compile(p).exec(pre + unit.repeat(n) + post) !== null)));
  `;
  const child = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(child.signal, null, `killed (${child.signal}): some pattern did not finish`);
  assert.equal(child.status, 0, child.stderr);
  assert.deepEqual(
    JSON.parse(child.stdout),
    cases.map((c) => c[5]),
  );
});
