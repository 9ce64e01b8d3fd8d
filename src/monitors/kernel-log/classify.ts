/**
 * Turns kernel log lines into findings: built-in rules (rules.ts), user rules and NPD configs.
 *
 * Pure apart from small, bounded state, with the clock passed in as `at`:
 *  - a PCI -> GPU UUID map learnt from "NVRM: GPU at PCI:...: GPU-<uuid>" lines;
 *  - the start of the multi-record "NVRM: The NVIDIA GPU <pci>" / ... / "fallen off the bus and is
 *    not responding to commands." message, joined within `joinWindowMs` (the same text arriving
 *    as one record with embedded newlines is matched directly);
 *  - when each GPU last raised NvidiaXID79Error, so a GPU that falls off the bus is reported once
 *    even when both the fallen-off text and the Xid 79 line arrive (either order);
 *  - the NPD line buffers;
 *  - whether the line before was part of the records BERT prints "from previous boot", so its CPER
 *    lines raise PreviousBootHardwareError (and a machine-check record of the boot-time poll does,
 *    by the line's own boot timestamp: `uptimeMs`, or a kmsg record's `tsUsec`).
 */
import type { Finding, HealthySignal, SourceName } from '../../api/types.ts';
import type { NpdConfig } from './npd.ts';
import { NpdMatcher } from './npd.ts';
import {
  BERT_HEAD,
  BUILTIN_RULES,
  DEFAULT_FATAL_XIDS,
  DEFAULT_IGNORED_BLOCK_DEVICES,
  DEFAULT_PCIE_CORRECTED_THRESHOLD,
  fallenOffHit,
  normalizePci,
  previousBootCper,
  previousBootMachineCheck,
  type KernelRule,
  type RuleEnv,
  type RuleHit,
} from './rules.ts';
import type { UserRegex } from '../../config/regex.ts';
import { fillGroups, type UserRule } from './user-rules.ts';

/** What the classifier needs from a line (a KmsgRecord or a parsed LogLine both fit). */
export interface ClassifiableLine {
  message: string;
  seq?: number;
  level?: number;
  /** When the line was logged, in ms since boot, where its format says (dmesg "[secs]", kernel: [secs]). */
  uptimeMs?: number;
  /** A kmsg record's microseconds since boot (used when `uptimeMs` is not given). */
  tsUsec?: number;
}

export interface ClassifierOptions {
  /** Xids that raise NvidiaXID<N>Error; others raise NvidiaXID<N>Warning. */
  fatalXids?: Iterable<number>;
  /** Xid 154 recovery actions that raise NvidiaXID154Error (default: GPU reset, node reboot, drain and reset). */
  recoveryActionsFatal?: readonly number[];
  /** PCIeCorrectedErrors fires at `count` corrected errors on one device within `windowMs`. */
  pcieCorrectedThreshold?: { count: number; windowMs: number };
  /** Block devices whose I/O errors are ignored (default fd*, sr*, loop*). */
  ignoredBlockDevices?: RegExp;
  /** Maps a PCIe device (BDF) to the GPU below it, for AER findings (supplied by the GPU monitor). */
  gpuAbove?: (bdf: string) => string | undefined;
  userRules?: readonly UserRule[];
  npd?: readonly NpdConfig[];
  /** How long the parts of a multi-record message may be apart (default 2 s). */
  joinWindowMs?: number;
  /** A second NvidiaXID79Error for the same GPU within this window is dropped (default 5 min). */
  xid79DedupMs?: number;
  /** Log text kept in a finding's message (default 512 chars). */
  maxMessageChars?: number;
  source?: SourceName;
  /**
   * Called for a line that says an entity recovered (a rule hit with `clears`, such as "nfs: server
   * X OK"): the caller passes it to the engine, which clears those reasons' whenHealthy problems.
   */
  onHealthy?: (h: HealthySignal) => void;
}

const UUID_LINE = /NVRM: GPU at PCI:([0-9a-fA-F:.]+): (GPU-[0-9a-fA-F-]{36})/;
const FALLEN_START = /NVRM: The NVIDIA GPU ((?:PCI:)?[0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)/;
const FALLEN_END = 'fallen off the bus and is not responding to commands';
// The same message's other ending: the driver refuses the GPU. Open nvidia.ko on a GPU without GSP
// ("... installed in this system is not supported by open / nvidia.ko because it does not include the
// required GPU / System Processor (GSP)."), or a legacy GPU ("... is not supported by the 367.57 /
// NVIDIA Linux driver release.", "... is not supported by the / NVIDIA 390.xx driver release.").
const UNSUPPORTED = /not supported by (?:open\b|the\s*$|the (?:NVIDIA )?\d)/m;

function unsupportedHit(pci: string | undefined): RuleHit {
  return {
    reason: 'NvidiaGPUUnsupported',
    entity: pci ? `gpu:${pci}` : '',
    summary: `the NVIDIA driver does not support GPU ${pci ?? '(unknown PCI address)'} and left it unused`,
    ...(pci ? { attrs: { pci } } : {}),
  };
}
const MAX_GPUS = 256;

function escapeRe(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}

/**
 * One regex that finds any of `words`, with shared prefixes factored out ("achine Check|achine check"
 * becomes "achine (?:C|c)heck"): the regex engine then tries one branch per first character at each
 * position instead of every word, which keeps the test fast as rules are added.
 */
export function trieRegExp(words: readonly string[], flags = ''): RegExp {
  type Node = Map<string, Node>;
  const root: Node = new Map();
  const END = '';
  for (const w of words) {
    let n = root;
    for (const ch of w) {
      let next = n.get(ch);
      if (!next) n.set(ch, (next = new Map<string, Node>()));
      n = next;
    }
    n.set(END, new Map<string, Node>());
  }
  const render = (n: Node): string => {
    if (n.has(END)) return ''; // a shorter word ends here: any longer one holds it
    const branches = [...n].map(([ch, child]) => escapeRe(ch) + render(child));
    return branches.length === 1 ? branches[0] : `(?:${branches.join('|')})`;
  };
  return new RegExp(render(root) || '(?!)', flags);
}

export class KernelLogClassifier {
  private readonly env: RuleEnv;
  private readonly rules: readonly KernelRule[];
  /** One search for every keyword of every built-in rule: most lines stop here. */
  private readonly prefilter: RegExp;
  /** For each word the search finds, the rules (a bit per index in `rules`) that word can start. */
  private readonly wordRules = new Map<string, number>();
  private readonly userRules: readonly UserRule[];
  private readonly npd: NpdMatcher[];
  private readonly joinWindowMs: number;
  private readonly xid79DedupMs: number;
  private readonly maxChars: number;
  private readonly source: SourceName;
  private readonly onHealthy: ((h: HealthySignal) => void) | undefined;
  private readonly uuids = new Map<string, string>();
  private readonly xid79At = new Map<string, number>();
  private fallenStart: { pci: string; at: number } | undefined;
  /** Inside the records printed under the BERT header (until a line without "[Hardware Error]"). */
  private bert = false;

  constructor(opts: ClassifierOptions = {}) {
    this.env = {
      fatalXids: new Set(opts.fatalXids ?? DEFAULT_FATAL_XIDS),
      ...(opts.recoveryActionsFatal ? { recoveryActionsFatal: opts.recoveryActionsFatal } : {}),
      pcieCorrectedThreshold: opts.pcieCorrectedThreshold ?? { ...DEFAULT_PCIE_CORRECTED_THRESHOLD },
      ignoredBlockDevices: opts.ignoredBlockDevices ?? DEFAULT_IGNORED_BLOCK_DEVICES,
      ...(opts.gpuAbove ? { gpuAbove: opts.gpuAbove } : {}),
    };
    this.rules = BUILTIN_RULES;
    const words = new Set<string>(['NVRM']);
    for (const r of this.rules) for (const k of r.prefilter ?? r.keywords) words.add(k);
    // A word that holds another ("NVRM: Xid" holds "NVRM") adds nothing to the test.
    const needed = [...words].filter((w) => ![...words].some((o) => o !== w && w.includes(o)));
    if (this.rules.length > 31) throw new Error('the rule bit mask holds 31 rules');
    this.rules.forEach((r, i) => {
      for (const k of r.prefilter ?? r.keywords)
        for (const w of needed) if (k.includes(w)) this.wordRules.set(w, (this.wordRules.get(w) ?? 0) | (1 << i));
    });
    this.prefilter = trieRegExp(needed, 'g');
    this.userRules = opts.userRules ?? [];
    this.source = opts.source ?? 'kmsg';
    this.onHealthy = opts.onHealthy;
    this.maxChars = opts.maxMessageChars ?? 512;
    this.npd = (opts.npd ?? []).map((c) => new NpdMatcher(c, { source: this.source, maxMessageChars: this.maxChars }));
    this.joinWindowMs = opts.joinWindowMs ?? 2000;
    this.xid79DedupMs = opts.xid79DedupMs ?? 300_000;
  }

  /**
   * Every pattern through which a line can become a finding: a line that matches none of them is
   * noise, which the kmsg reader may shed when it falls behind. (An NPD multi-line rule's pattern
   * is tested on the line alone, so its context lines can be shed.)
   */
  keepPatterns(): (RegExp | UserRegex)[] {
    return [this.prefilter, ...this.userRules.map((r) => r.re), ...this.npd.flatMap((n) => n.config.rules.map((r) => r.re))];
  }

  /** Known PCI address -> GPU UUID pairs (from the driver's "GPU at PCI" lines). */
  gpuUuids(): ReadonlyMap<string, string> {
    return this.uuids;
  }

  /** Classifies one line observed at `at` (ms since the epoch). */
  classify(line: ClassifiableLine, at: number): Finding[] {
    const msg = line.message;
    if (typeof msg !== 'string' || msg === '') return [];
    const out: Finding[] = [];
    if (this.bert && !msg.includes('[Hardware Error]')) this.bert = false;
    // The rules whose words occur in the line; nearly every line has none and stops here.
    const mask = this.rulesFor(msg);
    if (mask !== 0) {
      const hit = this.builtin(msg, at, mask, line);
      if (hit?.clears) this.onHealthy?.({ reasons: hit.clears, entity: hit.entity, source: this.source, at });
      else if (hit) out.push(this.toFinding(hit, msg, at));
    }
    for (const r of this.userRules) {
      const f = this.user(r, msg, at);
      if (f) out.push(f);
    }
    // An NPD event with the reason a rule above already gave this line is the same finding, once.
    // A permanent NPD rule still counts: it drives its own condition.
    for (const n of this.npd) {
      for (const f of n.match(msg, at)) if (f.severity === 'Fatal' || !out.some((o) => o.reason === f.reason)) out.push(f);
    }
    return out;
  }

  /**
   * Tries `lines` on the combined test and the built-in rules it selects, and keeps nothing: no
   * finding, no state. V8 compiles a regular expression on its first use and to machine code on
   * its second, per RegExp object, so this instance's first fault would pay for it otherwise (the
   * combined test alone took about 1.4 ms on a fresh agent's first Xid in bench:compare's trace).
   */
  warm(lines: readonly string[]): void {
    for (const msg of lines) {
      const mask = this.rulesFor(msg);
      for (let i = 0; i < this.rules.length; i++) if ((mask & (1 << i)) !== 0) this.rules[i].match(msg, this.env);
    }
  }

  /** A bit per built-in rule (index in `rules`) that a word in `msg` can start. */
  private rulesFor(msg: string): number {
    let mask = 0;
    this.prefilter.lastIndex = 0;
    for (let m = this.prefilter.exec(msg); m; m = this.prefilter.exec(msg)) {
      mask |= this.wordRules.get(m[0]) ?? 0;
      this.prefilter.lastIndex = m.index + 1; // words may overlap
    }
    return mask;
  }

  private builtin(msg: string, at: number, mask: number, line: ClassifiableLine): RuleHit | null {
    if (msg.includes('NVRM')) {
      const nv = this.nvidiaState(msg, at);
      if (nv !== undefined) return nv;
    }
    if (msg.includes(BERT_HEAD)) {
      this.bert = true;
      return null;
    }
    for (let i = 0; i < this.rules.length; i++) {
      const rule = this.rules[i];
      if ((mask & (1 << i)) === 0 || !rule.keywords.some((k) => msg.includes(k))) continue;
      const hit = rule.match(msg, this.env);
      if (!hit) continue;
      if (hit.attrs?.xid === 79 && this.seenXid79(hit.entity, at)) return null;
      return this.previousBoot(hit, msg, line) ?? hit;
    }
    return null;
  }

  /** The hit as a record of the previous boot (see the catalog's "Previous boot" policy), or null. */
  private previousBoot(hit: RuleHit, msg: string, line: ClassifiableLine): RuleHit | null {
    if (hit.reason === 'MachineCheckCorrected' || hit.reason === 'MachineCheckUncorrected') {
      const up = line.uptimeMs ?? (typeof line.tsUsec === 'number' ? line.tsUsec / 1000 : undefined);
      return up === undefined ? null : previousBootMachineCheck(msg, hit, up);
    }
    // BERT prints its records without GHES's "{N}" sequence prefix.
    if (this.bert && !msg.includes('}[Hardware Error]')) return previousBootCper(hit);
    return null;
  }

  /** The stateful NVIDIA lines; undefined means "not one of them, try the rules". */
  private nvidiaState(msg: string, at: number): RuleHit | null | undefined {
    const u = UUID_LINE.exec(msg);
    if (u) {
      if (this.uuids.size >= MAX_GPUS && !this.uuids.has(normalizePci(u[1]))) this.uuids.delete(this.uuids.keys().next().value!);
      this.uuids.set(normalizePci(u[1]), u[2].toLowerCase().replace(/^gpu-/, 'GPU-'));
      return null;
    }
    const start = FALLEN_START.exec(msg);
    if (start) this.fallenStart = { pci: normalizePci(start[1]), at };
    const unsupported = UNSUPPORTED.test(msg);
    if (!unsupported && !msg.includes(FALLEN_END)) return start ? null : undefined;
    // The end of the multi-line message: in this record, or within the window after its start.
    const s = this.fallenStart;
    this.fallenStart = undefined;
    const pci = s && at - s.at <= this.joinWindowMs ? s.pci : undefined;
    if (unsupported) return unsupportedHit(pci);
    const hit = fallenOffHit(pci, this.env);
    return this.seenXid79(hit.entity, at) ? null : hit;
  }

  /** Records an Xid 79 for the GPU; true when one was already reported within the window. */
  private seenXid79(entity: string, at: number): boolean {
    const last = this.xid79At.get(entity);
    if (last !== undefined && at - last >= 0 && at - last < this.xid79DedupMs) return true;
    if (this.xid79At.size >= MAX_GPUS) {
      for (const [k, t] of this.xid79At) if (at - t >= this.xid79DedupMs) this.xid79At.delete(k);
      if (this.xid79At.size >= MAX_GPUS) this.xid79At.clear();
    }
    this.xid79At.set(entity, at);
    return false;
  }

  private toFinding(hit: RuleHit, msg: string, at: number): Finding {
    const f: Finding = { reason: hit.reason, message: `${hit.summary}: ${this.logText(msg)}`, source: this.source, entity: hit.entity, at };
    const attrs = hit.attrs ? { ...hit.attrs } : undefined;
    const pci = attrs?.pci;
    if (attrs && typeof pci === 'string') {
      const uuid = this.uuids.get(pci);
      if (uuid) attrs.uuid = uuid;
    }
    if (attrs) f.attrs = attrs;
    if (hit.threshold) f.threshold = hit.threshold;
    return f;
  }

  private user(r: UserRule, msg: string, at: number): Finding | null {
    if (r.contains && !r.contains.some((c) => msg.includes(c))) return null;
    if (!r.re.test(msg)) return null;
    // Groups only for a template that takes them: tracking them costs more than the match.
    const m = r.entity?.includes('{') || r.message?.includes('{') ? r.re.exec(msg) : null;
    const text = this.logText(msg);
    const f: Finding = {
      reason: r.reason,
      message: r.message ? `${fillGroups(r.message, m)}: ${text}` : text,
      source: this.source,
      entity: r.entity ? fillGroups(r.entity, m) : '',
      at,
      attrs: { rule: r.name },
    };
    if (r.severity) f.severity = r.severity;
    if (r.condition) f.condition = r.condition;
    if (r.recovery) f.recovery = r.recovery;
    if (r.threshold) f.threshold = r.threshold;
    return f;
  }

  /** The log text for a message: one line, cut to maxMessageChars. */
  private logText(msg: string): string {
    const flat = msg.length > this.maxChars * 2 ? msg.slice(0, this.maxChars * 2) : msg;
    const one = flat.replace(/\s*\n\s*/g, ' ').trim();
    return one.length > this.maxChars ? `${one.slice(0, this.maxChars)}...` : one;
  }
}
