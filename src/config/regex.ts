/**
 * Regular expressions from configuration (user rules, NPD rules, escalations, exclusion lists,
 * autoCapture.match) run on RE2 (re2js, pure JavaScript), not on V8's backtracking engine: RE2
 * matches in time linear in the line, so no pattern can stall the agent, which a backtracking
 * pattern such as `(.*a){20}x` did on one matching kernel line (issue #22, point 7).
 *
 * Patterns are RE2 syntax (https://github.com/google/re2/wiki/Syntax), which JavaScript patterns
 * mostly are already. RE2 has no backreferences and no lookaround; such a pattern is refused with
 * its reason. The cost per character grows with the compiled program, so a program larger than
 * MAX_PROGRAM_SIZE instructions is refused too (real rules take 20 to 100).
 */
import { RE2JS } from 're2js';
import * as z from 'zod';
import { errorMessage } from '../util/errors.ts';

/**
 * Compiled instructions a pattern may take (real rules take 20 to 100). Matching a line that keeps
 * RE2's automaton from caching costs time in proportion to line and program; with the agent's V8
 * flags (interpreter only: bin/vigil.js) the worst pattern this allows costs about 0.2 s on a 4 KiB
 * line (bench/userrules.ts).
 */
export const MAX_PROGRAM_SIZE = 250;

/**
 * Memory for each pattern's lazily built automaton (re2js's default is 8 MiB). Past it RE2 drops
 * the cache and, on a line that keeps needing new states, runs its NFA: this bounds both the memory
 * a rule can take and how long an adversarial line spends building states (measured on a 4 KiB
 * line of a 500-instruction pattern with V8's optimizing compiler: 86 ms with 8 MiB, 20 ms with 256 KiB).
 */
export const DFA_MAX_MEM = 256 * 1024;

/** What configured patterns are used for: a test of a name or line. */
export interface LineTest {
  test(s: string): boolean;
}

/** JavaScript-style flags accepted from configuration, as RE2 flags (`u` changes nothing: RE2 reads code points). */
const FLAG_BITS: Record<string, number> = { i: RE2JS.CASE_INSENSITIVE, m: RE2JS.MULTILINE, s: RE2JS.DOTALL, u: 0 };

/** RE2 flags for JavaScript-style flags; throws on a flag RE2 has no equivalent of. */
function re2Flags(flags: string): number {
  let bits = 0;
  for (const f of flags) {
    const bit = FLAG_BITS[f];
    if (bit === undefined) throw new Error(`unsupported flag "${f}" (only i, m, s and u)`);
    bits |= bit;
  }
  return bits;
}

/** A configured pattern compiled for RE2: `test` and `exec` as a JavaScript RegExp has them (no `g` state). */
export class UserRegex {
  /** RE2 flags, for rebuilding the pattern elsewhere (the kmsg read thread). */
  readonly re2Flags: number;

  private constructor(
    readonly source: string,
    readonly flags: string,
    private readonly re: RE2JS,
  ) {
    this.re2Flags = re.flags();
  }

  /** Compiles `pattern` (RE2 syntax); throws an Error whose message is the reason when it cannot be used. */
  static compile(pattern: string, flags = ''): UserRegex {
    let re: RE2JS;
    try {
      re = RE2JS.compile(pattern, re2Flags(flags));
    } catch (err) {
      throw new Error(syntaxProblem(errorMessage(err)), { cause: err });
    }
    const size = re.programSize();
    if (size > MAX_PROGRAM_SIZE) {
      throw new Error(
        `pattern too large: ${size} compiled instructions, at most ${MAX_PROGRAM_SIZE} (large counted repetitions such as {100} multiply it): split it into several rules`,
      );
    }
    // re2js takes no memory bound per pattern (only per RE2Set): its DFA is replaced by one with
    // the bound, built the same way. The version is pinned; a unit test checks this took effect.
    const re2 = re.re2();
    const Dfa = re2.dfa.constructor as new (prog: unknown, maxMem: number) => typeof re2.lazyDFA;
    re2.lazyDFA = new Dfa(re2.prog, DFA_MAX_MEM);
    return new UserRegex(pattern, flags, re);
  }

  /** The automaton's memory bound (for the test that the bound is in force). */
  get dfaMaxMem(): number {
    return this.re.re2().lazyDFA.maxMem;
  }

  /** The pattern with its flags inline (`(?i)…`): what RE2 elsewhere (the kmsg read thread) compiles to the same program. */
  get re2Source(): string {
    const inline = this.flags.replace(/u/g, '');
    return inline ? `(?${inline})${this.source}` : this.source;
  }

  /** Instructions in the compiled program (what the matching cost per character grows with). */
  get programSize(): number {
    return this.re.programSize();
  }

  test(s: string): boolean {
    return this.re.test(s);
  }

  /**
   * The first match with its groups (unmatched ones null), or null. The automaton decides first:
   * only a matching line pays for the slower search that tracks groups.
   */
  exec(s: string): RegExpExecArray | null {
    if (!this.re.test(s)) return null;
    return this.re.exec(s) as RegExpExecArray | null;
  }

  /** `s` with its first match replaced by `template`, which takes $1, $<name>, $& and $$ as String.replace does. */
  replace(s: string, template: string): string {
    const m = this.exec(s);
    if (!m) return s;
    const groups = m.length - 1;
    const filled = template.replace(/\$(\$|&|<([^>]*)>|\d\d?)/g, (all, what: string, name: string | undefined) => {
      if (what === '$') return '$';
      if (what === '&') return m[0];
      if (name !== undefined) return m.groups ? (m.groups[name] ?? '') : all;
      // $12 is group 12 when there is one, else group 1 followed by "2".
      const n = Number(what);
      if (n >= 1 && n <= groups) return m[n] ?? '';
      const one = Number(what[0]);
      if (what.length === 2 && one >= 1 && one <= groups) return (m[one] ?? '') + what[1];
      return all;
    });
    return s.slice(0, m.index) + filled + s.slice(m.index + m[0].length);
  }
}

/** A readable reason from an RE2 syntax error, saying what RE2 does not have and why. */
function syntaxProblem(message: string): string {
  const text = message.replace(/^error parsing regexp: /, '');
  const at = /`([^`]*)`/.exec(text)?.[1] ?? '';
  if (/^\(\?(?:=|!|<=|<!)/.test(at)) {
    return `lookahead and lookbehind ("(?=", "(?!", "(?<=", "(?<!") are not supported: patterns are RE2 syntax, which matches in linear time and has no lookaround (match the text itself, or use "contains")`;
  }
  if (/^\\(?:[1-9]|k)/.test(at)) {
    return `backreferences ("\\1", "\\k<name>") are not supported: patterns are RE2 syntax, which matches in linear time and has no backreferences`;
  }
  return `invalid regular expression (RE2 syntax): ${text}`;
}

/** Why a pattern cannot be used (invalid RE2 syntax, lookaround, backreference, too large); undefined when it is fine. */
export function regexProblem(pattern: string, flags = ''): string | undefined {
  try {
    UserRegex.compile(pattern, flags);
    return undefined;
  } catch (err) {
    return errorMessage(err);
  }
}

/** A regular expression given as a string (RE2 syntax): refused when RE2 cannot compile it. */
export const regexString = z.string().superRefine((s, ctx) => {
  const problem = regexProblem(s);
  if (problem) ctx.addIssue({ code: 'custom', message: `${JSON.stringify(s)}: ${problem}` });
});

/** A list of regular expressions with a default; each one checked as `regexString`. */
export const regexList = (d: string[]) => z.array(regexString).default(d);
