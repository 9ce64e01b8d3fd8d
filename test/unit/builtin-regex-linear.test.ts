/**
 * Issue #22, point 7: built-in patterns stay on V8's backtracking engine, so each must take time
 * linear in the line. Proof by search: every fixture line is "pumped" (one or two of its
 * characters, a word, two words, or a word up to an opening bracket repeated until the line is
 * long, with and without the rest of the line after them, and with the rules' words the line held
 * put back after the run: how super-linear backtracking is found) and run through the classifier and the log
 * parsers at two lengths, 8x apart. Linear work grows about 8x, quadratic 64x; a case that grows
 * more than 24x, and takes more than 2 ms, is measured again (three rounds, each the best of five)
 * and fails the test only if every round agrees (a quadratic rule takes about 50 ms on the long line).
 * No absolute speed is asserted: only how the time grows with the line.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { BUILTIN_RULES, KernelLogClassifier } from '../../src/monitors/index.ts';
import { detectFormat, parseKmsgRecord, parseLine } from '../../src/sources/index.ts';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'kmsg');
const SHORT = 1024;
const LONG = SHORT * 8;
/** Growth above this (8x is linear, 64x quadratic) marks a case as super-linear. */
const MAX_GROWTH = 24;
/** Below this the timer's noise dominates: such a case is linear enough for any line the kernel writes. */
const NOISE_MS = 2;

function lines(name: string): string[] {
  return readFileSync(path.join(FIXTURES, name), 'utf8')
    .split('\n')
    .filter((l) => l !== '' && !l.startsWith('#'));
}

/**
 * Every pumped variant of `s`, about `n` long: a run of one or two of its characters at each
 * position, and a run of each of its words (a word a rule starts with, such as "traps:", repeated:
 * a `word.*tail` rule tries every copy to the end of the line).
 */
function* pumped(s: string, n: number): Generator<{ at: number; sub: string; line: string }> {
  // The same run after the same eight characters behaves the same: tried once.
  const tried = new Set<string>();
  const starts: { at: number; len: number }[] = [];
  for (let at = 0; at < s.length; at++) for (const len of [1, 2]) starts.push({ at, len });
  for (const w of s.matchAll(/\S{3,}/g)) starts.push({ at: w.index, len: w[0].length });
  // Two words ("segfault at "), with the space after them, so the copies stay apart.
  for (const w of s.matchAll(/(?<=^|\s)(?=(\S+ \S+ ))/g)) starts.push({ at: w.index, len: w[1].length });
  // From a word's start through an opening bracket or "=" ("XFS (", "task=", "stuck for 23s! ["):
  // copies with nothing closing them make `\(([^)]+)\)` scan from every copy to the end.
  for (const w of s.matchAll(/(?<=^|\s)\S/g))
    for (let j = w.index; j < Math.min(s.length, w.index + 48); j++)
      if ('([{='.includes(s[j])) starts.push({ at: w.index, len: j + 1 - w.index });
  // The rules' words this line holds: a run that cuts the rest of the line off still reaches the
  // rule its words select, which then looks past the run for a tail that is not there.
  const words = BUILTIN_RULES.flatMap((r) => r.keywords).filter((k) => s.includes(k));
  for (const { at, len } of starts) {
    const sub = s.slice(at, at + len);
    const key = `${s.slice(Math.max(0, at - 8), at)}|${sub}`;
    if (sub.length < len || tried.has(key)) continue;
    tried.add(key);
    const run = sub.repeat(Math.ceil(n / len));
    yield { at, sub, line: s.slice(0, at) + run + s.slice(at + len) };
    yield { at, sub, line: s.slice(0, at) + run };
    if (len > 2 && words.length) yield { at, sub, line: `${s.slice(0, at)}${run} ${words.join(' ')}` };
  }
}

function timeMs(f: () => void, runs: number): number {
  let best = Infinity;
  for (let i = 0; i < runs; i++) {
    const t = process.hrtime.bigint();
    f();
    best = Math.min(best, Number(process.hrtime.bigint() - t) / 1e6);
  }
  return best;
}

/** The cases whose time grows super-linearly from SHORT to LONG, as "sample | pumped part: growth". */
function superLinear(samples: readonly string[], run: (line: string) => void): string[] {
  const bad: string[] = [];
  for (const s of samples) {
    const short = [...pumped(s, SHORT)];
    const long = [...pumped(s, LONG)];
    for (let i = 0; i < short.length; i++) {
      const t1 = timeMs(() => run(short[i].line), 1);
      const t2 = timeMs(() => run(long[i].line), 1);
      if (t2 < NOISE_MS || t2 < MAX_GROWTH * t1) continue;
      // Suspect: measure again, best of five, short and long interleaved, in up to three rounds: a
      // GC pause or another process on a loaded machine is not blamed unless every round agrees.
      let r1 = 0;
      let r2 = 0;
      let confirmed = true;
      for (let round = 0; round < 3 && confirmed; round++) {
        r1 = r2 = Infinity;
        for (let k = 0; k < 5; k++) {
          r1 = Math.min(
            r1,
            timeMs(() => run(short[i].line), 1),
          );
          r2 = Math.min(
            r2,
            timeMs(() => run(long[i].line), 1),
          );
        }
        confirmed = r2 >= NOISE_MS && r2 >= MAX_GROWTH * r1;
      }
      if (confirmed) {
        bad.push(`${s.slice(0, 60)} | "${short[i].sub}" repeated at ${short[i].at}: ${r1.toFixed(2)} ms -> ${r2.toFixed(2)} ms`);
        break; // one case per sample line is proof enough, and keeps a failing run short
      }
    }
  }
  return bad;
}

test('every built-in kernel-log rule takes time linear in the line, on every pumped fault and benign line', () => {
  const samples = [...lines('faults.tsv').map((l) => l.split('\t')[2]), ...lines('benign.txt')];
  assert.ok(samples.length > 100, 'the fixtures hold the fault and benign lines');
  let at = 0;
  const classifier = new KernelLogClassifier();
  const bad = superLinear(samples, (message) => void classifier.classify({ message }, (at += 1000)));
  assert.deepEqual(bad, [], 'super-linear cases');
});

test('the log parsers (kmsg records, dmesg and syslog lines) take time linear in the line', () => {
  const raw = lines('raw-records.txt');
  assert.deepEqual(
    superLinear(raw, (l) => void parseKmsgRecord(l)),
    [],
    'kmsg records',
  );
  for (const name of ['dmesg.txt', 'dmesg-T.txt', 'syslog.txt']) {
    const ls = lines(name);
    const format = detectFormat(ls);
    assert.deepEqual(
      superLinear(ls, (l) => void parseLine(l, format)),
      [],
      `${name} (${format})`,
    );
  }
});
