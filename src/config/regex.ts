/**
 * Regular expressions from configuration (user rules, escalations, exclusion lists) run on
 * JavaScript's backtracking engine, so one written with catastrophic backtracking could stall the
 * agent on a single kernel line. They are refused at load when they can backtrack exponentially:
 *
 * - nested quantifiers such as `(a+)+`, `(a*)*`, `(\w+\s?)*` (found by scslre), and
 * - a repetition whose alternatives overlap, such as `(a|a)*`, `(\w|\d)+`, `(a|ab|b)*` (found by
 *   intersecting the alternatives' languages with refa).
 *
 * Polynomial cases (`.*a.*b`) are allowed: kernel lines are short, so they cost little.
 */
import { createRequire } from 'node:module';
import type * as Regexpp from '@eslint-community/regexpp';
import type * as Refa from 'refa';
import type * as Scslre from 'scslre';
import * as z from 'zod';
import { errorMessage } from '../util/errors.ts';

/** The analysers, loaded on first use (about 100 ms and some memory that most configs never need). */
interface Analysers {
  regexpp: typeof Regexpp;
  refa: typeof Refa;
  scslre: typeof Scslre;
}
let analysers: Analysers | undefined;
function load(): Analysers {
  if (!analysers) {
    const require = createRequire(import.meta.url);
    analysers = {
      regexpp: require('@eslint-community/regexpp') as Analysers['regexpp'],
      refa: require('refa') as Analysers['refa'],
      scslre: require('scslre') as Analysers['scslre'],
    };
  }
  return analysers;
}

/** Exponential backtracking needs a repeated group: `(…)*`, `(…)+`, `(…){n,}`. Anything else is skipped cheaply. */
const REPEATED_GROUP = /\)(?:[*+]|\{)/;

/** A bounded repetition above this many iterations is treated like an unbounded one. */
const MAX_SAFE_REPEAT = 16;
/** Automaton size past which a pattern is not analysed further (it is accepted). */
const MAX_NODES = 20_000;

/**
 * Why a pattern cannot be used: a syntax error or exponential backtracking. Undefined when it is
 * fine. `flags` are JavaScript RegExp flags.
 */
export function regexProblem(pattern: string, flags = ''): string | undefined {
  try {
    new RegExp(pattern, flags);
  } catch (err) {
    return `invalid regular expression: ${errorMessage(err).replace(/^Invalid regular expression: /, '')}`;
  }
  if (!REPEATED_GROUP.test(pattern)) return undefined;
  let ast: { pattern: Regexpp.AST.Pattern; flags: Regexpp.AST.Flags };
  try {
    const parser = new (load().regexpp.RegExpParser)();
    ast = { pattern: parser.parsePattern(pattern, 0, pattern.length, { unicode: flags.includes('u') }), flags: parser.parseFlags(flags) };
  } catch {
    // V8 accepted it, so this is syntax the analyser does not know yet; nothing to check against.
    return undefined;
  }
  return nestedQuantifier(ast) ?? overlappingAlternatives(ast, pattern);
}

function nestedQuantifier(ast: { pattern: Regexpp.AST.Pattern; flags: Regexpp.AST.Flags }): string | undefined {
  const { reports } = load().scslre.analyse(ast, { reportTypes: { Move: false, Self: true, Trade: true }, assumeRejectingSuffix: true });
  const r = reports.find((x) => x.exponential);
  if (!r) return undefined;
  const where =
    r.type === 'Self'
      ? `"${r.quant.raw}" inside "${r.parentQuant.raw}"`
      : r.type === 'Trade'
        ? `"${r.startQuant.raw}" and "${r.endQuant.raw}"`
        : `"${r.quant.raw}"`;
  return `catastrophic backtracking: nested quantifiers ${where} can take exponential time on a line of repeated "${r.character.pick}" (rewrite it so each character can be matched only one way)`;
}

function overlappingAlternatives(ast: { pattern: Regexpp.AST.Pattern; flags: Regexpp.AST.Flags }, source: string): string | undefined {
  const { ENFA, JS, isDisjointWith } = load().refa;
  let expression: Refa.NoParent<Refa.Node>;
  let maxCharacter: number;
  try {
    ({ expression, maxCharacter } = JS.Parser.fromAst(ast).parse({
      backreferences: 'disable',
      assertions: 'ignore',
      simplify: false,
      maxNodes: MAX_NODES,
    }));
  } catch {
    return undefined;
  }
  const options = { maxCharacter };
  const nonEmpty = (alts: readonly Refa.NoParent<Refa.Concatenation>[]): Refa.ENFA => {
    const a = ENFA.fromRegex(alts, options, {}, new ENFA.LimitedNodeFactory(MAX_NODES));
    a.withoutEmptyWord();
    return a;
  };
  const text = (n: { source?: { start: number; end: number } }) =>
    n.source ? `"${source.slice(n.source.start, n.source.end)}"` : 'a group';

  /** Whether two alternatives can match one word: each repetition then doubles the ways to match. */
  const overlap = (alts: readonly Refa.NoParent<Refa.Concatenation>[], tail?: Refa.ENFA): boolean => {
    const langs = alts.map((a) => {
      const l = nonEmpty([a]);
      if (tail) l.append(tail);
      return l;
    });
    for (let i = 0; i < langs.length; i++) {
      for (let j = i + 1; j < langs.length; j++) if (!isDisjointWith(langs[i], langs[j], MAX_NODES)) return true;
    }
    return false;
  };

  const visit = (node: Refa.NoParent<Refa.Node>, inLoop: boolean): string | undefined => {
    switch (node.type) {
      case 'Expression':
        return first(node.alternatives, (c) => visit(c, inLoop));
      case 'Concatenation':
        return first(node.elements, (e) => visit(e, inLoop));
      case 'Alternation':
        // Inside a repetition, two alternatives that match the same text double the work per iteration.
        if (inLoop && node.alternatives.length > 1 && overlap(node.alternatives)) {
          return `catastrophic backtracking: the alternatives of ${text(node)} overlap inside a repetition, which can take exponential time (make the alternatives match different text)`;
        }
        return first(node.alternatives, (c) => visit(c, inLoop));
      case 'Quantifier': {
        const loop = node.max > MAX_SAFE_REPEAT;
        if (loop && node.alternatives.length > 1) {
          // (A|B)* is ambiguous when some text splits into iterations two ways: A·(A|B)* and B·(A|B)* meet.
          const rest = nonEmpty(node.alternatives);
          rest.quantify(0, Infinity);
          if (overlap(node.alternatives, rest)) {
            return `catastrophic backtracking: the alternatives of ${text(node)} can split the same text in more than one way, which takes exponential time (make the alternatives match different text)`;
          }
        }
        return first(node.alternatives, (c) => visit(c, inLoop || loop));
      }
      default:
        return undefined;
    }
  };
  try {
    return visit(expression, false);
  } catch {
    // Too large to analyse within MAX_NODES: accept rather than refuse a pattern we cannot judge.
    return undefined;
  }
}

function first<T>(items: readonly T[], f: (item: T) => string | undefined): string | undefined {
  for (const item of items) {
    const r = f(item);
    if (r !== undefined) return r;
  }
  return undefined;
}

/** A regular expression given as a string: refused when invalid or prone to catastrophic backtracking. */
export const regexString = z.string().superRefine((s, ctx) => {
  const problem = regexProblem(s);
  if (problem) ctx.addIssue({ code: 'custom', message: `${JSON.stringify(s)}: ${problem}` });
});

/** A list of regular expressions with a default; each one checked as `regexString`. */
export const regexList = (d: string[]) => z.array(regexString).default(d);
