/**
 * Issue #22, point 7: what one kernel line costs the classifier when a user rule is adversarial.
 * Each pattern is loaded as a user rule, as an operator would write it, and the classifier is given
 * 4 KiB lines built to make it work hardest (a backtracking engine never finishes most of them):
 *
 *  - user_rule_worst_case_ms_per_line: the slowest of a set of patterns that backtrack
 *    catastrophically (the issue's two and the classic ones), per line, matching or not (target < 1 ms);
 *  - user_rule_worst_case_capture_ms_per_line: the same set on lines that match, for rules whose
 *    entity takes a group (the group-tracking search runs over the whole line);
 *  - user_rule_dfa_blowup_ms_per_line: `[ab]*a[ab]{20}x` on random lines, which needs a new automaton
 *    state at nearly every character (adversarial to RE2 itself);
 *  - user_rule_max_program_ms_per_line: the same kind of pattern at the program size bound
 *    (MAX_PROGRAM_SIZE): what any accepted pattern costs at most, about;
 *  - user_rule_worst_case_re2js_ms_per_line: the first figure where native RE2 (npm `re2`, an
 *    optional dependency) is missing and rules run on re2js (VIGIL_REGEX_ENGINE=re2js).
 *
 * The other figures are for the engine rules run on where native RE2 loads (each case's line says
 * which); where it does not, they are re2js's (about 3 ms, 335 ms with groups, 30 ms and 220 ms).
 *
 * Measured in a child process with the V8 flags the agent runs with (bin/vigil.js: interpreter
 * only, no optimizing compiler), which make re2js (JavaScript) several times slower than with them.
 * Run alone: `npx tsx bench/userrules.ts` (prints every pattern's figure; `--here` skips the child).
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { regexProblem, UserRegex } from '../src/config/regex.ts';
import { KernelLogClassifier } from '../src/monitors/kernel-log/classify.ts';
import { parseUserRules } from '../src/monitors/kernel-log/user-rules.ts';
import { rng } from '../test/helpers/prng.ts';

const LINE = 4096;
const LINES = 20;

interface Case {
  pattern: string;
  /** A line that does not match (the engine must rule out every way to match). */
  miss: (i: number) => string;
  /** A line that matches. */
  hit: (i: number) => string;
}

const rand = rng(7);
const ab = (n: number) => Array.from({ length: n }, () => (rand() < 0.5 ? 'a' : 'b')).join('');
const pad = (s: string) => s.repeat(Math.ceil(LINE / s.length)).slice(0, LINE - 1);

/** Patterns that take exponential or high-polynomial time on a backtracking engine (the issue's kind). */
export const ADVERSARIAL: readonly Case[] = [
  { pattern: '(.*a){20}x', miss: () => 'x' + pad('a'), hit: () => pad('a') + 'x' },
  { pattern: '(?:.*,){12}X', miss: () => 'X' + pad(','), hit: () => pad(',') + 'X' },
  { pattern: '(a+)+$', miss: () => pad('a') + '!', hit: () => pad('a') },
  { pattern: '^(a|a)*$', miss: () => pad('a') + '!', hit: () => pad('a') },
  { pattern: '^(\\w+\\s?)*$', miss: () => pad('word ') + '!', hit: () => pad('word ') },
  { pattern: '^(a|aa)+$', miss: () => pad('a') + '!', hit: () => pad('a') },
  { pattern: '(x+x+)+y', miss: () => pad('x'), hit: () => pad('x') + 'y' },
  { pattern: '(\\d+\\.?)+[a-z]', miss: () => pad('1.') + '!', hit: () => pad('1.') + 'z' },
];

/** A pattern whose automaton needs a new state at nearly every character of a random line: adversarial to RE2 itself. */
export const BLOW_UP: Case = { pattern: '[ab]*a[ab]{20}x', miss: () => 'x' + ab(LINE - 1), hit: () => ab(LINE - 23) + 'a' + ab(20) + 'x' };

function classifier(pattern: string, capture: boolean): KernelLogClassifier {
  const rule = {
    name: 'adversarial',
    pattern,
    reason: 'AdversarialRule',
    severity: 'Warning',
    condition: 'KernelReady',
    ...(capture ? { entity: 'e:{0}' } : {}),
  };
  return new KernelLogClassifier({ userRules: parseUserRules(JSON.stringify([rule]), 'bench.yaml') });
}

/** Mean ms per line over LINES fresh lines (a warm-up line first). */
function perLine(c: KernelLogClassifier, line: (i: number) => string, expectFinding: boolean): number {
  const lines = Array.from({ length: LINES + 1 }, (_, i) => line(i));
  let at = Date.now();
  const got = c.classify({ message: lines[0] }, at++).length > 0;
  if (got !== expectFinding) throw new Error(`expected ${expectFinding ? 'a finding' : 'no finding'} on ${lines[0].slice(0, 40)}...`);
  const start = process.hrtime.bigint();
  for (let i = 1; i <= LINES; i++) c.classify({ message: lines[i] }, at++);
  return Number(process.hrtime.bigint() - start) / 1e6 / LINES;
}

/** The largest `[ab]*a[ab]{n}x` the bound accepts: its automaton has a new state at nearly every character. */
function largestBlowUp(): string {
  let n = 1;
  while (regexProblem(`[ab]*a[ab]{${n + 1}}x`) === undefined) n++;
  return `[ab]*a[ab]{${n}}x`;
}

/** The agent's V8 flags (bin/vigil.js). */
const AGENT_V8_FLAGS = ['--no-opt', '--no-sparkplug', '--max-semi-space-size=1'];

/** Runs the measurement in a child with the agent's V8 flags; its per-pattern lines go to stderr. */
export function benchUserRules(): Record<string, number> {
  const child = (args: string[], env: Record<string, string> = {}) =>
    JSON.parse(
      execFileSync(process.execPath, [...AGENT_V8_FLAGS, '--import', 'tsx', fileURLToPath(import.meta.url), '--json', ...args], {
        stdio: ['ignore', 'pipe', 'inherit'],
        encoding: 'utf8',
        env: { ...process.env, ...env },
      }),
    ) as Record<string, number>;
  const figures = child([]);
  process.stderr.write('  re2js only (VIGIL_REGEX_ENGINE=re2js):\n');
  const js = child(['--plain'], { VIGIL_REGEX_ENGINE: 're2js' });
  return { ...figures, user_rule_worst_case_re2js_ms_per_line: js.user_rule_worst_case_ms_per_line };
}

/** The engine a user rule with `pattern` runs on (native patterns are shared by source). */
const engineOf = (pattern: string) => UserRegex.compile(pattern, '', { native: true }).engine;

export function measureUserRules(log: (msg: string) => void = () => {}, plainOnly = false): Record<string, number> {
  const measure = (c: Case) => {
    const plain = classifier(c.pattern, false);
    const miss = perLine(plain, c.miss, false);
    const hit = perLine(plain, c.hit, true);
    const capture = plainOnly ? 0 : perLine(classifier(c.pattern, true), c.hit, true);
    log(
      `  ${c.pattern} (${engineOf(c.pattern)}): ${miss.toFixed(3)} ms (no match), ${hit.toFixed(3)} ms (match)${plainOnly ? '' : `, ${capture.toFixed(3)} ms (match, groups)`}`,
    );
    return { plain: Math.max(miss, hit), capture };
  };
  let worst = 0;
  let worstCapture = 0;
  for (const c of ADVERSARIAL) {
    const m = measure(c);
    worst = Math.max(worst, m.plain);
    worstCapture = Math.max(worstCapture, m.capture);
  }
  if (plainOnly) return { user_rule_worst_case_ms_per_line: worst };
  const blowUp = measure(BLOW_UP);
  const big = largestBlowUp();
  const max = perLine(classifier(big, false), () => 'x' + ab(LINE - 1), false);
  log(`  ${big} (${UserRegex.compile(big).programSize} instructions, ${engineOf(big)}): ${max.toFixed(3)} ms (no match)`);
  return {
    user_rule_worst_case_ms_per_line: worst,
    user_rule_worst_case_capture_ms_per_line: worstCapture,
    user_rule_dfa_blowup_ms_per_line: blowUp.plain,
    user_rule_max_program_ms_per_line: max,
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const plainOnly = process.argv.includes('--plain');
  if (process.argv.includes('--json')) console.log(JSON.stringify(measureUserRules((m) => process.stderr.write(`${m}\n`), plainOnly)));
  else if (process.argv.includes('--here')) console.log(measureUserRules((m) => console.log(m)));
  else console.log(benchUserRules());
}
