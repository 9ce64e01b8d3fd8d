/**
 * Regular expressions from configuration (user rules, NPD rules, escalations, exclusion lists,
 * autoCapture.match) run on RE2, not on V8's backtracking engine: RE2 matches in time linear in
 * the line, so no pattern can stall the agent, which a backtracking pattern such as `(.*a){20}x`
 * did on one matching kernel line (issue #22, point 7).
 *
 * Patterns are RE2 syntax (https://github.com/google/re2/wiki/Syntax), which JavaScript patterns
 * mostly are already. RE2 has no backreferences and no lookaround; such a pattern is refused with
 * its reason. The cost per character grows with the compiled program, so a program larger than
 * MAX_PROGRAM_SIZE instructions is refused too (real rules take 20 to 100).
 *
 * Two engines, one behaviour: re2js (RE2 in JavaScript) decides what is accepted, always, and runs
 * every pattern unless the caller asks for speed ({ native: true }: the patterns run on every
 * kernel line). Those run on Google's RE2 (npm `re2`, an optional native dependency) where it
 * loads, about 100 times faster with the agent's V8 flags (bench/userrules.ts); a pattern that
 * native RE2 refuses or answers differently on probes built from the pattern stays on re2js.
 */
import { createRequire } from 'node:module';
import { RE2JS } from 're2js';
import * as z from 'zod';
import { errorMessage, VigilError } from '../util/errors.ts';

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

/**
 * Distinct patterns that may run on native RE2 (one compiled object each, shared by every rule with
 * that pattern). Its automaton memory cannot be set per pattern (npm `re2` 1.24 keeps RE2's 8 MiB
 * default: measured 2.4 MiB of RSS per pattern built to need a new state at every character, after
 * 200 random 4 KiB lines), so their number bounds it; the rest run on re2js with DFA_MAX_MEM.
 */
export const NATIVE_MAX_PATTERNS = 16;

/** What the native engine's objects offer (npm `re2`: test and exec as a RegExp has them). */
export interface NativeRegex {
  test(s: string): boolean;
  exec(s: string): RegExpExecArray | null;
}
type NativeCtor = new (pattern: string, flags: string) => NativeRegex;

/** The native engine: undefined until a pattern asks for it, null when it does not load. */
let nativeCtor: NativeCtor | null | undefined;
let nativePath: string | undefined;
let nativeMissing = '';
/** Native patterns by source (flags inline), null for those that stay on re2js (refused or different). */
const nativeBySource = new Map<string, NativeRegex | null>();
let nativeCount = 0;
let nativeFallbacks = 0;

/**
 * npm `re2`, loaded on first use. VIGIL_REGEX_ENGINE=re2js keeps it unloaded (for tests and for
 * diagnosing a difference between the engines).
 */
function loadNative(): NativeCtor | null {
  if (nativeCtor !== undefined) return nativeCtor;
  nativeCtor = null;
  if (process.env.VIGIL_REGEX_ENGINE === 're2js') {
    nativeMissing = 'VIGIL_REGEX_ENGINE=re2js';
    return null;
  }
  try {
    const require = createRequire(import.meta.url);
    nativePath = require.resolve('re2');
    nativeCtor = require(nativePath) as NativeCtor;
  } catch (err) {
    nativePath = undefined;
    // Node's ABI-mismatch message spans lines and its first names only the file: keep the why.
    nativeMissing = `native re2 did not load: ${errorMessage(err)
      .replace(/\s*\n\s*/g, ' ')
      .slice(0, 400)}`;
  }
  return nativeCtor;
}

/**
 * For the start log: whether native RE2 loaded (why not), how many patterns run on it, and how many
 * it refused or answered differently (those run on re2js, as do those over NATIVE_MAX_PATTERNS).
 */
export function regexEngineInfo(): { loaded: boolean; native: number; fallbacks: number; why?: string } {
  return {
    loaded: !!nativeCtor,
    native: nativeCount,
    fallbacks: nativeFallbacks,
    ...(nativeCtor ? {} : { why: nativeMissing || 'not loaded' }),
  };
}

/** The path the kmsg read thread loads native RE2 from; undefined when it did not load here. */
export function nativeRe2Path(): string | undefined {
  return nativeCtor ? nativePath : undefined;
}

/**
 * `source` (RE2 syntax, flags inline) for npm `re2`, whose translation of JavaScript syntax (`/` to
 * `\/`, `(?<` to `(?P<`, `\p{Letter}`) would change the literal text inside `\Q...\E`: the quoted
 * text is written out as escaped literals instead.
 */
export function nativeSource(source: string): string {
  let out = '';
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (c !== '\\' || i + 1 >= source.length) {
      out += c;
      continue;
    }
    if (source[i + 1] !== 'Q') {
      out += c + source[++i];
      continue;
    }
    const end = source.indexOf('\\E', i + 2);
    const quoted = source.slice(i + 2, end < 0 ? undefined : end);
    out += quoted.replace(/[\\^$.|?*+()[\]{}/]/g, '\\$&');
    i = end < 0 ? source.length : end + 1;
  }
  // An empty pattern is `(?:)` either way; say so, so the translation has nothing to do.
  return out === '' ? '(?:)' : out;
}

/** Short strings built from the pattern's own characters, on which both engines must agree. */
function probes(source: string): string[] {
  const literal = source.replace(/\\[QEAzbBdDsSwWpP]|\\(.)|[()[\]{}?*+|^$.]/gu, '$1');
  const alphabet = [...new Set([...literal, ...'aZ0 _-:é\n'])];
  let seed = 0;
  for (const ch of source) seed = (seed * 31 + ch.codePointAt(0)!) >>> 0;
  const next = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
  const out = ['', source, literal, literal.toUpperCase(), `x ${literal}\n${literal} y`];
  for (let n = 0; n < 10; n++) {
    const len = 1 + Math.floor(next() * 24);
    out.push(Array.from({ length: len }, () => alphabet[Math.floor(next() * alphabet.length)]).join(''));
  }
  return out;
}

/** A match as data, for comparing the engines: index, every group, named groups. */
function matchKey(m: RegExpExecArray | null): string {
  return m ? JSON.stringify([m.index, [...m], m.groups ? { ...m.groups } : null]) : 'null';
}

/** Native RE2 for `source` (flags inline), or null: not loaded, refused, or different from `re` on a probe. */
function agreeingNative(source: string, re: RE2JS): NativeRegex | null {
  const Native = loadNative();
  if (!Native) return null;
  try {
    const native = new Native(nativeSource(source), 'u');
    for (const p of probes(source)) {
      if (native.test(p) !== re.test(p) || matchKey(native.exec(p)) !== matchKey(re.exec(p) as RegExpExecArray | null)) return null;
    }
    return native;
  } catch {
    return null;
  }
}

/** `re` on native RE2, or null: not loaded, over the budget, refused, or different on a probe. */
function nativeFor(source: string, re: RE2JS): NativeRegex | null {
  const known = nativeBySource.get(source);
  if (known !== undefined) return known;
  if (!loadNative() || nativeCount >= NATIVE_MAX_PATTERNS) return null;
  const native = agreeingNative(source, re);
  if (native) nativeCount++;
  else nativeFallbacks++;
  nativeBySource.set(source, native);
  return native;
}

/**
 * For the engine parity test and diagnosis: `pattern` on native RE2 as a rule would run it (outside
 * the budget), or null where a rule would run on re2js. Throws what compile throws.
 */
export function compileNative(pattern: string, flags = ''): NativeRegex | null {
  const js = UserRegex.compile(pattern, flags);
  return agreeingNative(js.re2Source, RE2JS.compile(pattern, js.re2Flags));
}

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
    if (bit === undefined) throw new VigilError('VIGIL_E_PATTERN', `unsupported flag "${f}" (only i, m, s and u)`);
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
    /** Native RE2: undefined until the first match decides (a pattern only validated never loads it), null for re2js. */
    private native: NativeRegex | null | undefined,
  ) {
    this.re2Flags = re.flags();
  }

  /**
   * Compiles `pattern` (RE2 syntax); throws an Error whose message is the reason when it cannot be
   * used. `native`: run it on native RE2 where that loads and agrees (patterns run on every line);
   * decided at the first match, so validating a pattern never loads the native engine.
   */
  static compile(pattern: string, flags = '', opts: { native?: boolean } = {}): UserRegex {
    let re: RE2JS;
    try {
      re = RE2JS.compile(pattern, re2Flags(flags));
    } catch (err) {
      throw new VigilError('VIGIL_E_PATTERN', syntaxProblem(errorMessage(err)), { cause: err });
    }
    const size = re.programSize();
    if (size > MAX_PROGRAM_SIZE) {
      throw new VigilError(
        'VIGIL_E_PATTERN',
        `pattern too large: ${size} compiled instructions, at most ${MAX_PROGRAM_SIZE} (large counted repetitions such as {100} multiply it): split it into several rules`,
      );
    }
    // re2js takes no memory bound per pattern (only per RE2Set): its DFA is replaced by one with
    // the bound, built the same way. The version is pinned; a unit test checks this took effect.
    const re2 = re.re2();
    const Dfa = re2.dfa.constructor as new (prog: unknown, maxMem: number) => typeof re2.lazyDFA;
    re2.lazyDFA = new Dfa(re2.prog, DFA_MAX_MEM);
    return new UserRegex(pattern, flags, re, opts.native ? undefined : null);
  }

  /** The native pattern, decided on first use; null when re2js runs this pattern. */
  private get fast(): NativeRegex | null {
    if (this.native === undefined) {
      this.native = nativeFor(this.re2Source, this.re);
    }
    return this.native;
  }

  /** The engine that runs this pattern. */
  get engine(): 're2' | 're2js' {
    return this.fast ? 're2' : 're2js';
  }

  /** For the kmsg read thread: the source native RE2 takes, when this pattern runs on it. */
  get nativeSource(): string | undefined {
    return this.fast ? nativeSource(this.re2Source) : undefined;
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
    const fast = this.fast;
    return fast ? fast.test(s) : this.re.test(s);
  }

  /**
   * The first match with its groups (unmatched ones null), or null. The automaton decides first:
   * only a matching line pays for the slower search that tracks groups.
   */
  exec(s: string): RegExpExecArray | null {
    // Native RE2 runs its automaton first by itself.
    const fast = this.fast;
    if (fast) return fast.exec(s);
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
