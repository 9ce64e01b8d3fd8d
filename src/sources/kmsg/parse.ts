/**
 * Pure parsers for kernel log text: raw /dev/kmsg records, and the file formats the same messages
 * appear in (dmesg output, syslog/kern.log, bare messages). No I/O. Every function here accepts
 * any input, including random bytes and megabyte lines, and returns null instead of throwing.
 */

/** Longest message kept; longer ones are cut and flagged `truncated` (the kernel's own limit is ~1 KiB). */
export const MAX_MESSAGE_CHARS = 16 * 1024;

/** One /dev/kmsg record. */
export interface KmsgRecord {
  seq: number;
  /** Syslog level 0 (emerg) .. 7 (debug): prio & 7. */
  level: number;
  /** Syslog facility: prio >> 3. 0 is the kernel; user-space writes get 1 or more. */
  facility: number;
  /** Monotonic microseconds since boot. */
  tsUsec: number;
  /** The text with `\xNN` escapes decoded (so one record may hold several lines). */
  message: string;
  /** Continuation lines ` KEY=VALUE` (SUBSYSTEM, DEVICE...). */
  fields: Record<string, string>;
  /** Set when the message was longer than MAX_MESSAGE_CHARS and was cut. */
  truncated?: true;
}

/** One kernel message taken from any log format. */
export interface LogLine {
  message: string;
  seq?: number;
  level?: number;
  /** Syslog ident (`kernel`, `CROND`...) when the format carries one. */
  ident?: string;
  /** A dmesg line indented under the previous one: the rest of a multi-line record. */
  continuation?: true;
  truncated?: true;
}

export type LogFormat = 'kmsg' | 'dmesg' | 'syslog' | 'plain';

const DIGITS = /^\d{1,20}$/;

/**
 * Parses `prio,seq,ts_usec,flags[,...];message` plus optional ` KEY=VALUE` lines.
 * Returns null for anything that is not a well-formed record header.
 */
export function parseKmsgRecord(text: string): KmsgRecord | null {
  if (typeof text !== 'string') return null;
  const semi = text.indexOf(';');
  // A real header is short ("6,1234,123456789,-"); a far-away ';' means this is not a record.
  if (semi <= 0 || semi > 256) return null;
  const header = text.slice(0, semi).split(',');
  if (header.length < 4) return null;
  const [p, s, t] = header as [string, string, string];
  if (!DIGITS.test(p) || !DIGITS.test(s) || !DIGITS.test(t)) return null;
  const prio = Number(p);
  const seq = Number(s);
  const tsUsec = Number(t);
  if (!Number.isSafeInteger(prio) || !Number.isSafeInteger(seq) || !Number.isSafeInteger(tsUsec)) return null;

  let end = text.indexOf('\n', semi + 1);
  if (end < 0) end = text.length;
  const raw = capped(text.slice(semi + 1, end));
  const rec: KmsgRecord = { seq, level: prio & 7, facility: prio >> 3, tsUsec, message: unescapeKmsg(raw.text), fields: {} };
  if (raw.truncated) rec.truncated = true;

  // Continuation lines: " KEY=VALUE", each on its own line after the message.
  let pos = end + 1;
  let nFields = 0;
  while (pos < text.length && text.charCodeAt(pos) === 0x20 && nFields < 32) {
    let next = text.indexOf('\n', pos);
    if (next < 0) next = text.length;
    const line = text.slice(pos + 1, Math.min(next, pos + 1 + 4096));
    const eq = line.indexOf('=');
    if (eq > 0) {
      rec.fields[line.slice(0, eq)] = unescapeKmsg(line.slice(eq + 1));
      nFields++;
    }
    pos = next + 1;
  }
  return rec;
}

/** Decodes `\xNN` escapes; runs of escaped bytes are decoded as UTF-8 (the kernel escapes byte by byte). */
export function unescapeKmsg(s: string): string {
  if (s.indexOf('\\x') < 0) return s;
  return s.replace(/(?:\\x[0-9a-fA-F]{2})+/g, (run) => Buffer.from(run.replace(/\\x/g, ''), 'hex').toString('utf8'));
}

function capped(s: string): { text: string; truncated: boolean } {
  return s.length > MAX_MESSAGE_CHARS ? { text: s.slice(0, MAX_MESSAGE_CHARS), truncated: true } : { text: s, truncated: false };
}

// dmesg: "[  123.456789] msg", "[Fri Aug 30 11:43:09 2024] msg", optional "<3>" (dmesg -r) and
// an optional caller id "[  T896]" after the timestamp.
const DMESG = /^(?:<(\d{1,3})>)?\[\s*(?:\d+\.\d+|[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]?\d \d\d:\d\d:\d\d \d{4})\](?:\[\s*[TC]\d+\])? ?/;
// syslog: "Aug 30 11:43:09 host ident[pid]: msg" or RFC 3339 "2024-08-30T11:43:09.123+00:00 host ident: msg".
const SYSLOG =
  /^(?:[A-Z][a-z]{2} [ \d]?\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)) (\S+) ([^\s:[]+)(?:\[\d+\])?: ?/;
const KMSG_HEAD = /^\d{1,3},\d{1,20},\d{1,20},[^;]{0,64};/;
// The kernel timestamp syslog daemons leave after "kernel: ".
const KTIME = /^\[\s*\d+\.\d+\] ?/;

/** Guesses the format of a log file from a sample of its lines (majority of recognised lines wins). */
export function detectFormat(sampleLines: readonly string[]): LogFormat {
  let kmsg = 0,
    dmesg = 0,
    syslog = 0,
    seen = 0;
  for (const line of sampleLines) {
    if (typeof line !== 'string' || line.trim() === '') continue;
    if (line.charCodeAt(0) === 0x20 || line.charCodeAt(0) === 0x09) continue; // continuation lines
    seen++;
    const head = line.slice(0, 128);
    if (KMSG_HEAD.test(head)) kmsg++;
    else if (DMESG.test(head)) dmesg++;
    else if (SYSLOG.test(head)) syslog++;
  }
  const best = Math.max(kmsg, dmesg, syslog);
  if (seen === 0 || best * 2 < seen) return 'plain';
  return best === kmsg ? 'kmsg' : best === dmesg ? 'dmesg' : 'syslog';
}

/** What one line of a log file is: a line in one of the formats, the rest of the previous line, or blank. */
export type LineKind = LogFormat | 'continuation' | 'blank';

/** Tells the format of one line by itself, so a file that mixes formats loses no line. */
export function lineKind(line: string): LineKind {
  if (typeof line !== 'string' || line.trim() === '') return 'blank';
  const c = line.charCodeAt(0);
  if (c === 0x20 || c === 0x09) return 'continuation';
  const head = line.slice(0, 128);
  if (KMSG_HEAD.test(head)) return 'kmsg';
  if (DMESG.test(head)) return 'dmesg';
  if (SYSLOG.test(head)) return 'syslog';
  return 'plain';
}

/** A " KEY=VALUE" line that belongs to the kmsg record above it. */
export function isKmsgField(line: string): boolean {
  return /^ [A-Za-z0-9_]+=/.test(line);
}

/**
 * When a line was logged, as far as its format says. `uptime`: ms since boot (kmsg, dmesg
 * "[secs]"); `wall`: ms since the epoch (dmesg -T, RFC 3339 syslog; a time without a zone is read
 * as UTC: only the gaps between lines matter); `yearless`: a classic syslog "Aug 30 11:43:09",
 * as ms since the epoch of that date in the year 2000 (a leap year, so Feb 29 exists).
 */
export type LineTime = { kind: 'uptime' | 'wall' | 'yearless'; ms: number };

const MONTHS = 'JanFebMarAprMayJunJulAugSepOctNovDec';
const DMESG_TIME = /^(?:<\d{1,3}>)?\[\s*(?:(\d{1,12})\.(\d{1,9})|[A-Z][a-z]{2} ([A-Z][a-z]{2}) ([ \d]?\d) (\d\d):(\d\d):(\d\d) (\d{4}))\]/;
const SYSLOG_TIME = /^(?:([A-Z][a-z]{2}) ([ \d]?\d) (\d\d):(\d\d):(\d\d)|(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d))) /;

/** The time a line carries in its format; undefined when it carries none (plain text, continuations). */
export function lineTime(line: string, format: LogFormat): LineTime | undefined {
  if (typeof line !== 'string') return undefined;
  const head = line.slice(0, 128);
  switch (format) {
    case 'kmsg': {
      const m = /^\d{1,3},\d{1,20},(\d{1,20}),/.exec(head);
      const usec = m ? Number(m[1]) : NaN;
      return Number.isSafeInteger(usec) ? { kind: 'uptime', ms: usec / 1000 } : undefined;
    }
    case 'dmesg': {
      const m = DMESG_TIME.exec(head);
      if (!m) return undefined;
      if (m[1] !== undefined) return { kind: 'uptime', ms: Number(m[1]) * 1000 + Number(`0.${m[2]}`) * 1000 };
      const ms = utc(Number(m[8]), m[3], m[4], m[5], m[6], m[7]);
      return ms === undefined ? undefined : { kind: 'wall', ms };
    }
    case 'syslog': {
      const m = SYSLOG_TIME.exec(head);
      if (!m) return undefined;
      if (m[6] !== undefined) {
        const ms = Date.parse(m[6]);
        return Number.isFinite(ms) ? { kind: 'wall', ms } : undefined;
      }
      const ms = utc(2000, m[1], m[2], m[3], m[4], m[5]);
      return ms === undefined ? undefined : { kind: 'yearless', ms };
    }
    default:
      return undefined;
  }
}

function utc(year: number, mon: string, day: string, h: string, m: string, s: string): number | undefined {
  const month = MONTHS.indexOf(mon);
  if (month < 0 || month % 3 !== 0) return undefined;
  const ms = Date.UTC(year, month / 3, Number(day), Number(h), Number(m), Number(s));
  return Number.isFinite(ms) ? ms : undefined;
}

/** Extracts the kernel message from one line of a log file; null for blank or non-matching lines. */
export function parseLine(line: string, format: LogFormat): LogLine | null {
  if (typeof line !== 'string') return null;
  if (line.endsWith('\n')) line = line.slice(0, -1);
  if (line.endsWith('\r')) line = line.slice(0, -1);
  if (line.trim() === '') return null;
  switch (format) {
    case 'kmsg': {
      if (line.charCodeAt(0) === 0x20) return null; // a KEY=VALUE line of the previous record
      const rec = parseKmsgRecord(line);
      if (!rec) return null;
      return withCap({ message: rec.message, seq: rec.seq, level: rec.level }, rec.truncated === true);
    }
    case 'dmesg': {
      const c = line.charCodeAt(0);
      if (c === 0x20 || c === 0x09) return withCap({ message: line.trimStart(), continuation: true });
      const m = DMESG.exec(line.slice(0, 128));
      if (!m) return withCap({ message: line });
      const out: LogLine = { message: line.slice(m[0].length) };
      if (m[1] !== undefined) out.level = Number(m[1]) & 7;
      return withCap(out);
    }
    case 'syslog': {
      const m = SYSLOG.exec(line.slice(0, 256));
      if (!m) return withCap({ message: line });
      let message = line.slice(m[0].length);
      const ident = m[2];
      if (ident === 'kernel') {
        const t = KTIME.exec(message.slice(0, 64));
        if (t) message = message.slice(t[0].length);
      }
      return withCap({ message, ident });
    }
    case 'plain':
    default:
      return withCap({ message: line });
  }
}

function withCap(l: LogLine, alreadyCut = false): LogLine {
  if (l.message.length > MAX_MESSAGE_CHARS) {
    l.message = l.message.slice(0, MAX_MESSAGE_CHARS);
    l.truncated = true;
  } else if (alreadyCut) {
    l.truncated = true;
  }
  return l;
}
