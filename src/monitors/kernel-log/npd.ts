/**
 * Runs node-problem-detector system-log-monitor JSON files unchanged (e.g. NPD's
 * config/kernel-monitor.json), with NPD's semantics:
 *  - every line is pushed into a buffer of the last `bufferSize` lines (default 10), and each rule's
 *    Go regex must match the buffer, joined with "\n", up to its very end (Go `pattern + \z`);
 *  - `temporary` rules give Warning findings; `permanent` ones Fatal findings on the rule's
 *    `condition` (untilReboot: NPD never sets them back, short of a restart);
 *  - `conditions[]` declare extra condition types with their healthy reason and message, exported
 *    for the engine, which reports them with NPD's polarity (False while healthy, True with the
 *    permanent rule's reason); `skipList` substrings drop a line before matching;
 *  - only `"plugin": "kmsg"` files load: rules written for journald or a log file are refused;
 *  - `patternGeneratedMessageSuffix` turns the message into "<log>; <suffix>".
 * Patterns are Go RE2 syntax, and they run on RE2 (re2js) as they are: linear time, as in NPD.
 */
import { readFileSync } from 'node:fs';
import type { ConditionType, Finding, SourceName } from '../../api/types.ts';
import { CONDITION_TYPES } from '../../api/types.ts';
import { ruleReason } from '../../catalog/index.ts';
import { parseDuration } from '../../util/duration.ts';
import { UserRegex } from '../../config/regex.ts';
import { errorMessage, VigilError } from '../../util/errors.ts';

/** A condition type an NPD file declares, with its healthy reason and message. */
export interface NpdCondition {
  type: ConditionType;
  reason: string;
  message: string;
}

export interface NpdRule {
  type: 'temporary' | 'permanent';
  condition?: ConditionType;
  reason: string;
  pattern: string;
  /** Matches a whole buffer, anchored at its end. */
  re: UserRegex;
  /** False when the pattern cannot match a newline, so the current line alone decides. */
  multiline: boolean;
  suffix?: string;
}

export interface NpdConfig {
  file: string;
  plugin: string;
  source: string;
  logPath?: string;
  lookbackMs?: number;
  delayMs?: number;
  bufferSize: number;
  skipList: readonly string[];
  conditions: readonly NpdCondition[];
  rules: readonly NpdRule[];
}

const POSIX: Record<string, string> = {
  alnum: '0-9A-Za-z',
  alpha: 'A-Za-z',
  ascii: '\\x00-\\x7F',
  blank: '\\t ',
  cntrl: '\\x00-\\x1F\\x7F',
  digit: '0-9',
  graph: '!-~',
  lower: 'a-z',
  print: ' -~',
  punct: '!-\\/:-@\\[-`{-~',
  space: '\\t\\n\\v\\f\\r ',
  upper: 'A-Z',
  word: '0-9A-Za-z_',
  xdigit: '0-9A-Fa-f',
};

/** Translates a Go RE2 pattern to a JS RegExp source and flags; throws on what JS cannot express. */
export function goRegexToJs(pattern: string): { source: string; flags: string } {
  let src = pattern;
  let flags = '';
  const lead = /^\(\?([imsU]+)\)/.exec(src);
  if (lead) {
    if (lead[1].includes('U')) throw new VigilError('VIGIL_E_NPD_CONFIG', 'the ungreedy flag (?U) has no JS equivalent');
    flags = [...new Set(lead[1].split(''))].join('');
    src = src.slice(lead[0].length);
  }
  if (/\(\?[imsU-]+[:)]/.test(src))
    throw new VigilError('VIGIL_E_NPD_CONFIG', 'inline flag groups other than a leading (?flags) are not supported');
  src = src.replace(/\\Q([\s\S]*?)(?:\\E|$)/g, (_m, lit: string) => lit.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&'));
  src = src.replace(/\(\?P</g, '(?<');
  src = src.replace(/\[:(\^?)(\w+):\]/g, (m, neg: string, name: string) => {
    const cls = POSIX[name];
    if (!cls) throw new VigilError('VIGIL_E_NPD_CONFIG', `unknown POSIX class [:${name}:]`);
    if (neg) throw new VigilError('VIGIL_E_NPD_CONFIG', `negated POSIX class [:^${name}:] is not supported`);
    return cls;
  });
  src = src.replace(/\\z/g, '(?![\\s\\S])').replace(/\\A/g, '(?<![\\s\\S])');
  if (/\\[pP][A-Za-z]/.test(src)) {
    src = src.replace(/\\([pP])([A-Za-z])/g, '\\$1{$2}');
    flags += 'u';
  }
  return { source: src, flags };
}

/** Whether a translated pattern could match "\n" and so needs the joined buffer. */
function mayMatchNewline(source: string, flags: string): boolean {
  return flags.includes('s') || /\\[nsWD]|\[\^|\\x0[aA]|\\x\{0*[aA]\}|\\u000[aA]|\\012|\\c[Jj]|\\[pP]/.test(source);
}

/** Whether a Go pattern could match "\n"; true (the joined buffer, always right) when unsure. */
function goMayMatchNewline(pattern: string): boolean {
  try {
    const js = goRegexToJs(pattern);
    return mayMatchNewline(js.source, js.flags);
  } catch {
    return true;
  }
}

/** Parses and validates an NPD system-log-monitor JSON text. Throws with file, rule and field named. */
export function parseNpdConfig(text: string, file: string): NpdConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new VigilError('VIGIL_E_NPD_CONFIG', `${file}: invalid JSON: ${errorMessage(err)}`, { cause: err });
  }
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw new VigilError('VIGIL_E_NPD_CONFIG', `${file}: expected a JSON object`);
  const o = raw as Record<string, unknown>;
  const str = (key: string, v: unknown, where = file): string => {
    if (typeof v !== 'string') throw new VigilError('VIGIL_E_NPD_CONFIG', `${where}: field "${key}": expected a string`);
    return v;
  };
  const optStr = (key: string): string | undefined => (o[key] === undefined ? undefined : str(key, o[key]));

  const plugin = optStr('plugin') ?? 'kmsg';
  // Vigil reads the kernel log only; rules written for another log must not run on it.
  if (plugin !== 'kmsg') {
    throw new VigilError(
      'VIGIL_E_NPD_CONFIG',
      `${file}: field "plugin": "${plugin}" is not supported: Vigil runs NPD system-log-monitor files on the kernel log ` +
        '(/dev/kmsg) only, so only "plugin": "kmsg" files can be loaded',
    );
  }
  const bufferSize = o.bufferSize === undefined ? 10 : o.bufferSize;
  if (typeof bufferSize !== 'number' || !Number.isInteger(bufferSize) || bufferSize < 1 || bufferSize > 1000) {
    throw new VigilError('VIGIL_E_NPD_CONFIG', `${file}: field "bufferSize": expected an integer from 1 to 1000`);
  }
  const dur = (key: string): number | undefined => {
    const v = optStr(key);
    if (v === undefined || v === '') return undefined;
    const ms = parseDuration(v);
    if (ms === undefined) throw new VigilError('VIGIL_E_NPD_CONFIG', `${file}: field "${key}": invalid duration "${v}"`);
    return ms;
  };
  const skip = o.skipList ?? [];
  if (!Array.isArray(skip) || skip.some((s) => typeof s !== 'string'))
    throw new VigilError('VIGIL_E_NPD_CONFIG', `${file}: field "skipList": expected a list of strings`);

  const condList = o.conditions ?? [];
  if (!Array.isArray(condList)) throw new VigilError('VIGIL_E_NPD_CONFIG', `${file}: field "conditions": expected a list`);
  const conditions: NpdCondition[] = condList.map((c, i) => {
    const where = `${file}: conditions[${i}]`;
    if (!c || typeof c !== 'object') throw new VigilError('VIGIL_E_NPD_CONFIG', `${where}: expected an object`);
    const cc = c as Record<string, unknown>;
    return { type: str('type', cc.type, where), reason: str('reason', cc.reason, where), message: str('message', cc.message ?? '', where) };
  });
  const declared = new Set<string>([...conditions.map((c) => c.type), ...CONDITION_TYPES]);

  const ruleList = o.rules ?? [];
  if (!Array.isArray(ruleList)) throw new VigilError('VIGIL_E_NPD_CONFIG', `${file}: field "rules": expected a list`);
  const rules = ruleList.map((r, i) => compileNpdRule(r, i, file, declared));

  const cfg: NpdConfig = {
    file,
    plugin,
    source: optStr('source') ?? 'npd',
    bufferSize,
    skipList: skip as string[],
    conditions,
    rules,
  };
  const logPath = optStr('logPath');
  if (logPath !== undefined) cfg.logPath = logPath;
  const lookbackMs = dur('lookback');
  if (lookbackMs !== undefined) cfg.lookbackMs = lookbackMs;
  const delayMs = dur('delay');
  if (delayMs !== undefined) cfg.delayMs = delayMs;
  return cfg;
}

/** Reads and parses an NPD system-log-monitor JSON file. */
export function loadNpdConfig(file: string): NpdConfig {
  return parseNpdConfig(readFileSync(file, 'utf8'), file);
}

function compileNpdRule(raw: unknown, i: number, file: string, declared: Set<string>): NpdRule {
  const o = (raw && typeof raw === 'object' ? raw : {}) as Record<string, unknown>;
  const where = `${file}: rules[${i}]${typeof o.reason === 'string' ? ` (${o.reason})` : ''}`;
  if (!raw || typeof raw !== 'object') throw new VigilError('VIGIL_E_NPD_CONFIG', `${where}: expected an object`);
  if (o.type !== 'temporary' && o.type !== 'permanent')
    throw new VigilError('VIGIL_E_NPD_CONFIG', `${where}: field "type": expected "temporary" or "permanent"`);
  if (typeof o.reason !== 'string' || o.reason === '')
    throw new VigilError('VIGIL_E_NPD_CONFIG', `${where}: field "reason": expected a non-empty string`);
  if (typeof o.pattern !== 'string' || o.pattern === '')
    throw new VigilError('VIGIL_E_NPD_CONFIG', `${where}: field "pattern": expected a non-empty string`);
  let re: UserRegex;
  try {
    // NPD matches `pattern + \z` with Go's RE2; so does this, with the same engine's port.
    re = UserRegex.compile(`(?:${o.pattern})\\z`, '', { native: true });
  } catch (err) {
    throw new VigilError('VIGIL_E_NPD_CONFIG', `${where}: field "pattern": ${errorMessage(err)}`, { cause: err });
  }
  const rule: NpdRule = { type: o.type, reason: o.reason, pattern: o.pattern, re, multiline: goMayMatchNewline(o.pattern) };
  if (o.condition !== undefined && o.condition !== '') {
    if (typeof o.condition !== 'string') throw new VigilError('VIGIL_E_NPD_CONFIG', `${where}: field "condition": expected a string`);
    rule.condition = o.condition;
  }
  if (o.type === 'permanent') {
    if (!rule.condition) throw new VigilError('VIGIL_E_NPD_CONFIG', `${where}: field "condition": required for a permanent rule`);
    if (!declared.has(rule.condition))
      throw new VigilError('VIGIL_E_NPD_CONFIG', `${where}: field "condition": ${rule.condition} is not declared in "conditions"`);
  }
  if (o.patternGeneratedMessageSuffix !== undefined) {
    if (typeof o.patternGeneratedMessageSuffix !== 'string')
      throw new VigilError('VIGIL_E_NPD_CONFIG', `${where}: field "patternGeneratedMessageSuffix": expected a string`);
    if (o.patternGeneratedMessageSuffix) rule.suffix = o.patternGeneratedMessageSuffix;
  }
  return rule;
}

/** Longest line NPD rules see. */
const MAX_LINE = 4096;

export interface NpdOptions {
  /** Condition for temporary rules, which NPD reports as events only (default KernelReady). */
  defaultCondition?: ConditionType;
  /** How long a temporary finding stays active (default 10 min). */
  temporaryTtlMs?: number;
  source?: SourceName;
  maxMessageChars?: number;
}

/** One NPD config's buffer and rules. Pure apart from the buffer; the clock comes in as `at`. */
export class NpdMatcher {
  private readonly buffer: string[] = [];
  private readonly anyMultiline: boolean;

  constructor(
    readonly config: NpdConfig,
    private readonly opts: NpdOptions = {},
  ) {
    this.anyMultiline = config.rules.some((r) => r.multiline);
  }

  match(message: string, at: number): Finding[] {
    // Trimmed as NPD's kmsg watcher does, and cut: the kernel's own limit is 1 KiB per record, and
    // the matching cost grows with the line.
    const line = message.trim().slice(0, MAX_LINE);
    if (line === '') return [];
    for (const s of this.config.skipList) if (line.includes(s)) return [];
    this.buffer.push(line);
    if (this.buffer.length > this.config.bufferSize) this.buffer.shift();
    let joined: string | undefined;
    const out: Finding[] = [];
    for (const rule of this.config.rules) {
      let text: string;
      if (rule.multiline && this.anyMultiline) {
        joined ??= this.buffer.join('\n');
        const m = rule.re.exec(joined);
        if (!m) continue;
        text = coveredLines(this.buffer, joined, m.index);
      } else {
        if (!rule.re.test(line)) continue;
        text = line;
      }
      out.push(this.finding(rule, text, at));
    }
    return out;
  }

  private finding(rule: NpdRule, text: string, at: number): Finding {
    const max = this.opts.maxMessageChars ?? 512;
    let message = text.length > max ? `${text.slice(0, max)}...` : text;
    if (rule.suffix) message = `${message}; ${rule.suffix}`;
    const permanent = rule.type === 'permanent';
    return {
      reason: ruleReason(rule.reason),
      message,
      source: this.opts.source ?? 'kmsg',
      entity: '',
      at,
      severity: permanent ? 'Fatal' : 'Warning',
      condition: rule.condition ?? this.opts.defaultCondition ?? 'KernelReady',
      recovery: permanent ? { kind: 'untilReboot' } : { kind: 'ttl', ttlMs: this.opts.temporaryTtlMs ?? 600_000 },
      attrs: { npdSource: this.config.source, npdFile: this.config.file },
    };
  }
}

/** The buffered lines a match starting at `start` covers, joined as NPD reports them. */
function coveredLines(buffer: readonly string[], joined: string, start: number): string {
  let pos = 0;
  for (let i = 0; i < buffer.length; i++) {
    const end = pos + buffer[i].length;
    if (start <= end) return buffer.slice(i).join('\n');
    pos = end + 1;
  }
  return buffer[buffer.length - 1] ?? joined;
}
