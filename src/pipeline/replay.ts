/**
 * Replays a saved kernel log through the same classifier, pipeline and engine as the live agent,
 * on a clock taken from the lines themselves: the engine's repeat window, thresholds, escalations
 * and TTLs count the time between the lines as they were logged, not how fast the file is read.
 *
 * The format is told line by line (a dmesg tail appended to a kmsg dump is read as dmesg), or forced;
 * a line that is not in the forced format is still classified, as plain text, and counted. Lines
 * longer than `maxLineChars` are cut there (the rest is skipped without being held in memory) and
 * reported, so no fault is dropped without a word.
 */
import { StringDecoder } from 'node:string_decoder';
import { Registry } from 'prom-client';
import type { ConditionType, EmittedFinding, Finding, FindingSink } from '../api/types.ts';
import type { VigilConfig } from '../settings/index.ts';
import type { ConditionInfo, Engine } from '../engine/engine.ts';
import { KernelLogClassifier } from '../monitors/kernel-log/classify.ts';
import type { NpdConfig } from '../monitors/kernel-log/npd.ts';
import type { UserRule } from '../monitors/kernel-log/user-rules.ts';
import {
  fromUserSpace,
  isKmsgField,
  lineKind,
  lineTime,
  parseLine,
  syslogKernelUptimeMs,
  type LineTime,
  type LogFormat,
  type LogLine,
} from '../sources/kmsg/parse.ts';
import { VigilError } from '../util/errors.ts';
import { createPipeline } from './pipeline.ts';
import { allConditions, kernelLogClassifierOptions } from './settings.ts';
import { declaredConditions } from '../monitors/kernel-log/options.ts';

/** Where the replay clock starts: boot-relative times (kmsg, dmesg) count from here. */
export const REPLAY_BASE_MS = Date.UTC(2000, 0, 1);
/** Lines longer than this are cut (a kernel record is at most ~1 KiB; this is far beyond any). */
export const MAX_LINE_CHARS = 1024 * 1024;
/** How much of the start of the input must be free of NUL bytes to count as text. */
const TEXT_CHECK_BYTES = 64 * 1024;

export interface ReplayOptions {
  config: VigilConfig;
  rules: { userRules: readonly UserRule[]; npd: readonly NpdConfig[] };
  format?: 'auto' | LogFormat;
  /** Every finding the engine emits, with the number of the line that completed it. */
  onFinding: (f: EmittedFinding, line: number) => void;
  /** A line was cut at maxLineChars; `length` is how long it was. */
  onCut?: (line: number, length: number) => void;
  /** What the classifier raised on each line, before the engine (thresholds, repeats) sees it. */
  onClassified?: (findings: readonly Finding[], line: number) => void;
  maxLineChars?: number;
  /** Builds the engine (src/app's createEngine) on the replay's clock, from the condition table the rules give. */
  engine: (parts: { now: () => number; conditions: Map<ConditionType, ConditionInfo>; registry: Registry }) => Engine;
}

export interface ReplaySummary {
  lines: number;
  /** Lines read in each format (continuation lines count with the line they continue). */
  formats: Partial<Record<LogFormat, number>>;
  findings: number;
  /** Lines that were not in the forced format (classified as plain text), and the first of them. */
  unparsed: number;
  firstUnparsed?: number;
  /** Lines cut at maxLineChars, and the first of them. */
  cut: number;
  firstCut?: number;
  /** Syslog or console lines of user-space programs (not kernel records), not classified; set when any. */
  userSpace?: number;
}

/** The input is not a text log. */
export class NotTextError extends VigilError {
  constructor(message: string) {
    super('VIGIL_E_SCAN_NOT_TEXT', message);
  }
}

export class LogReplay {
  readonly engine: Engine;
  private readonly classifier: KernelLogClassifier;
  private readonly sink: FindingSink;
  private readonly clock = new ReplayClock();
  private readonly forced: LogFormat | undefined;
  private readonly tickMs: number;
  private readonly splitter: LineSplitter;
  private lastTick = REPLAY_BASE_MS;
  private previous: LogFormat | undefined;
  /** The last line was a user-space program's: its continuation lines are too. */
  private userSpaceBlock = false;
  private readonly s: ReplaySummary = { lines: 0, formats: {}, findings: 0, unparsed: 0, cut: 0 };

  constructor(private readonly o: ReplayOptions) {
    const { config, rules } = o;
    const registry = new Registry();
    this.forced = o.format && o.format !== 'auto' ? o.format : undefined;
    this.tickMs = config.engine.tick;
    this.classifier = new KernelLogClassifier({
      ...kernelLogClassifierOptions(config, rules),
      source: 'file',
      // Recovery lines ("nfs: server X OK") clear their problems, as in the live agent.
      onHealthy: (h) => this.sink.healthy(h),
    });
    this.engine = o.engine({ now: () => this.clock.now, conditions: allConditions(config, declaredConditions(rules)), registry });
    this.engine.on((event) => {
      if (event.kind !== 'finding') return;
      this.s.findings++;
      o.onFinding(event.finding, this.s.lines);
    });
    this.sink = createPipeline({ config, registry, engine: this.engine });
    this.splitter = new LineSplitter(o.maxLineChars ?? MAX_LINE_CHARS, (text, length) => this.line(text, length));
  }

  /** Feeds decoded text; lines are split here and classified as they complete. */
  push(text: string): void {
    this.splitter.push(text);
  }

  /** Ends the input (classifies a last line without a newline) and returns the summary. */
  end(): ReplaySummary {
    this.splitter.end();
    return { ...this.s, formats: { ...this.s.formats } };
  }

  /** Classifies one line; `length` is set when the line was cut and says how long it was. */
  line(text: string, length?: number): void {
    const n = ++this.s.lines;
    if (length !== undefined) {
      this.s.cut++;
      this.s.firstCut ??= n;
      this.o.onCut?.(n, length);
    }
    const parsed = this.parse(text, n);
    if (!parsed) return;
    const at = this.clock.advance(parsed.time);
    if (at - this.lastTick >= this.tickMs) {
      this.engine.tick();
      this.lastTick = at;
    }
    if (!parsed.line.continuation && fromUserSpace(parsed.line)) {
      // A program's syslog line that says "I/O error" is not the kernel saying it.
      this.s.userSpace = (this.s.userSpace ?? 0) + 1;
      this.userSpaceBlock = true;
      return;
    }
    if (parsed.line.continuation && this.userSpaceBlock) return;
    this.userSpaceBlock = false;
    const findings = this.classifier.classify(parsed.line, at);
    this.o.onClassified?.(findings, n);
    for (const f of findings) this.sink.finding(f);
  }

  private parse(text: string, n: number): { line: LogLine; time?: LineTime } | null {
    const kind = lineKind(text);
    if (kind === 'blank') return null;
    if (kind === 'continuation') {
      const format = this.forced ?? this.previous ?? 'plain';
      if (format === 'kmsg' && isKmsgField(text)) return null;
      if (format !== 'dmesg' && format !== 'plain' && this.forced) this.unparsed(n);
      else this.count(format);
      const line = parseLine(text, 'dmesg');
      return line ? { line } : null;
    }
    let format: LogFormat = this.forced ?? kind;
    if (this.forced && this.forced !== 'plain' && kind !== this.forced) {
      this.unparsed(n);
      format = 'plain';
    } else {
      this.count(format);
    }
    let line = parseLine(text, format);
    let time = format === 'plain' ? undefined : lineTime(text, format);
    if (!line && format !== 'plain') {
      // A kmsg head with out-of-range numbers: still a line of text.
      line = parseLine(text, 'plain');
      time = undefined;
    }
    this.previous = format;
    if (!line) return null;
    // The kernel's own boot time, for the records a boot replays from before it (catalog: Previous boot).
    if (time?.kind === 'uptime') line.uptimeMs = time.ms;
    else if (format === 'syslog' && line.ident === 'kernel') {
      const up = syslogKernelUptimeMs(text);
      if (up !== undefined) line.uptimeMs = up;
    }
    return { line, ...(time ? { time } : {}) };
  }

  private count(format: LogFormat): void {
    this.s.formats[format] = (this.s.formats[format] ?? 0) + 1;
  }

  private unparsed(n: number): void {
    this.s.unparsed++;
    this.s.firstUnparsed ??= n;
  }
}

/**
 * Reads a whole stream into a replay. Throws NotTextError when the first 64 KiB hold a NUL byte
 * (a binary file, a compressed log), before anything is classified.
 */
export async function replayStream(input: AsyncIterable<Buffer | string>, replay: LogReplay): Promise<ReplaySummary> {
  const decoder = new StringDecoder('utf8');
  let head: Buffer[] | undefined = [];
  let headBytes = 0;
  const flushHead = () => {
    const buf = Buffer.concat(head!);
    head = undefined;
    if (buf.includes(0)) throw new NotTextError('not a text log (it contains NUL bytes)');
    replay.push(decoder.write(buf));
  };
  for await (const chunk of input) {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    if (!head) {
      replay.push(decoder.write(buf));
      continue;
    }
    head.push(buf);
    headBytes += buf.length;
    if (headBytes >= TEXT_CHECK_BYTES) flushHead();
  }
  if (head) flushHead();
  replay.push(decoder.end());
  return replay.end();
}

/**
 * Splits text into lines with a length cap: a line longer than `maxChars` is cut there and the
 * rest skipped as it streams past, so a 600 MB line costs `maxChars` of memory, not 600 MB.
 */
export class LineSplitter {
  private parts: string[] = [];
  private kept = 0;
  /** Length of the current line so far, including what was skipped. */
  private length = 0;

  constructor(
    private readonly maxChars: number,
    private readonly onLine: (text: string, length?: number) => void,
  ) {}

  push(text: string): void {
    let pos = 0;
    while (pos < text.length) {
      const nl = text.indexOf('\n', pos);
      const end = nl < 0 ? text.length : nl;
      this.take(text, pos, end);
      if (nl < 0) return;
      this.emit();
      pos = nl + 1;
    }
  }

  end(): void {
    if (this.length > 0) this.emit();
  }

  private take(text: string, from: number, to: number): void {
    const room = this.maxChars - this.kept;
    if (room > 0 && to > from) {
      const piece = to - from <= room ? text.slice(from, to) : text.slice(from, from + room);
      this.parts.push(piece);
      this.kept += piece.length;
    }
    this.length += to - from;
  }

  private emit(): void {
    const text = this.parts.length === 1 ? this.parts[0] : this.parts.join('');
    const length = this.length;
    this.parts = [];
    this.kept = 0;
    this.length = 0;
    if (length > this.maxChars) this.onLine(text, length);
    else this.onLine(text);
  }
}

/**
 * The time of the line being replayed: never goes back. Boot-relative times count from
 * REPLAY_BASE_MS, and from the last time seen when they restart (the log of a later boot);
 * classic syslog dates, which carry no year, move to the next year when they wrap.
 */
class ReplayClock {
  now = REPLAY_BASE_MS;
  private bootBase = REPLAY_BASE_MS;
  private lastUptime = -1;
  private year = 2000;
  private lastYearless: number | undefined;

  advance(t: LineTime | undefined): number {
    if (!t) return this.now;
    let at: number;
    if (t.kind === 'uptime') {
      // A second of slack: lines of one boot can be logged slightly out of order.
      if (this.lastUptime >= 0 && t.ms + 1000 < this.lastUptime) this.bootBase = this.now;
      this.lastUptime = t.ms;
      at = this.bootBase + t.ms;
    } else if (t.kind === 'yearless') {
      at = this.inYear(t.ms);
      if (this.lastYearless !== undefined && at < this.lastYearless - 180 * 86_400_000) {
        this.year++;
        at = this.inYear(t.ms);
      }
      this.lastYearless = at;
    } else {
      at = t.ms;
    }
    if (at > this.now) this.now = at;
    return this.now;
  }

  private inYear(ms2000: number): number {
    const d = new Date(ms2000);
    return Date.UTC(this.year, d.getUTCMonth(), d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds());
  }
}
