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
  /** Syslog facility name (`kern`, `user`...) when the format carries one (syslog PRI, dmesg -x, Talos). */
  facility?: string;
  /** A dmesg line indented under the previous one: the rest of a multi-line record. */
  continuation?: true;
  truncated?: true;
  /** Ms since boot, set by the replay where the line carries the kernel's own time (not by parseLine). */
  uptimeMs?: number;
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
/** Syslog level names (dmesg -x, Talos) by number. */
const LEVEL_NAMES: Record<string, number> = { emerg: 0, alert: 1, crit: 2, err: 3, warn: 4, warning: 4, notice: 5, info: 6, debug: 7 };
/** Syslog facility names by number (prio >> 3); dmesg -x and Talos print these. */
const FACILITY_NAMES = ['kern', 'user', 'mail', 'daemon', 'auth', 'syslog', 'lpr', 'news', 'uucp', 'cron', 'authpriv', 'ftp'];

function facilityName(n: number): string {
  return FACILITY_NAMES[n] ?? (n >= 16 && n <= 23 ? `local${n - 16}` : String(n));
}

// dmesg: an optional "<3>" (dmesg -r) or "kern  :err   : " (dmesg -x), a time, an optional caller id
// "[  T896]". Times: "[  123.456789]"; ctime in any locale ("[Fri Aug 30 11:43:09 2024]",
// "[Fr Aug 30 ...]", "[五 8月 30 ...]"); dmesg -H "[Aug30 11:43]" and "[  +0.000123]"; and
// --time-format iso "2025-01-25T10:34:54,859532+00:00" (a comma, unlike syslog's RFC 3339).
const DMESG = new RegExp(
  '^(?:<(\\d{1,3})>|([a-z]{2,8}) *:([a-z]{3,7}) *: )?' +
    '(?:\\[\\s*(\\d{1,12})\\.(\\d{1,9})\\]' +
    '|\\[([^\\]]{1,24}?\\d{1,2} \\d\\d:\\d\\d:\\d\\d \\d{4})\\]' +
    '|\\[[^\\]\\s\\d]{2,12} ?\\d{1,2} \\d\\d:\\d\\d(?::\\d\\d)?\\]' +
    '|\\[\\s*[+-]\\d+\\.\\d+\\]' +
    '|(\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d,\\d{1,9}(?:Z|[+-]\\d\\d:?\\d\\d)))' +
    '(?: ?\\[\\s*[TC]\\d+\\])? ?',
);
// dmesg -x -t: the facility and level without a time.
const DMESG_X = /^([a-z]{2,8}) *:([a-z]{3,7}) *: /;
// Talos console (`talosctl dmesg`): "[NODE: ]kern: warning: [2026-04-22T21:27:51.291660856Z]: msg".
const TALOS = /^(?:\S+: )?([a-z]{2,8}): +([a-z]{3,7}): +\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d))\]: ?/;
const CTIME_EN = /^[A-Z][a-z]{2} ([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})$/;

// syslog: RFC 3164 ("<4>Aug 30 11:43:09 host ident[pid]: msg", PRI optional) and journalctl's short
// formats: short, short-precise ("Aug 30 11:43:09.123456"), short-iso ("2024-08-30T11:43:09+0000"),
// short-iso-precise, short-full ("Fri 2024-08-30 11:43:09 UTC"), with or without the host
// (--no-hostname: "Aug 30 11:43:09 kernel: msg"); RFC 5424 below.
const CLASSIC_TIME = '[A-Z][a-z]{2} [ \\d]?\\d \\d\\d:\\d\\d:\\d\\d(?:\\.\\d{1,9})?';
const ISO_TIME = '\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d(?:\\.\\d{1,9})?(?:Z|[+-]\\d\\d:?\\d\\d)';
const FULL_TIME = '[A-Z][a-z]{2} \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d(?:\\.\\d{1,9})? [A-Za-z][A-Za-z0-9+-]{1,5}';
const SYSLOG = new RegExp(
  `^(?:<(\\d{1,3})>)?(${CLASSIC_TIME}|${ISO_TIME}|${FULL_TIME}) (?:([^\\s:]+) )?([^\\s:[]+)(?:\\[\\d+\\])?:(?: |$)`,
);
// RFC 5424: "<4>1 2024-08-30T11:43:09.123Z host kernel - - - msg" (or structured data for the last "-"),
// and the same without "<PRI>1 " as sysklogd writes it to files.
const RFC5424 = new RegExp(
  `^(?:<(\\d{1,3})>1 )?(${ISO_TIME}|-) (\\S+) (\\S+) (\\S+) (\\S+) (?:-|(?:\\[(?:[^\\]"]|"(?:[^"\\\\]|\\\\.)*")*\\])+)(?: \\uFEFF?|$)`,
);
const KMSG_HEAD = /^\d{1,3},\d{1,20},\d{1,20},[^;]{0,64};/;
// The kernel timestamp syslog daemons leave after "kernel: ".
const KTIME = /^\[\s*\d+\.\d+\] ?/;
const KTIME_AFTER_KERNEL = /\bkernel: \[\s*(\d{1,12})\.(\d{1,9})\]/;

/** The kernel's own time (ms since boot) a syslog line keeps after "kernel: " ("kernel: [    0.064265]"). */
export function syslogKernelUptimeMs(line: string): number | undefined {
  const m = KTIME_AFTER_KERNEL.exec(line.slice(0, 320));
  return m ? Number(m[1]) * 1000 + Number(`0.${m[2]}`) * 1000 : undefined;
}

/** The head of a dmesg or console line: how long it is and what it says. */
interface Head {
  end: number;
  level?: number;
  facility?: string;
  time?: LineTime;
}

function dmesgHead(head: string): Head | null {
  const m = DMESG.exec(head);
  if (m) {
    const h: Head = { end: m[0].length };
    if (m[1] !== undefined) h.level = Number(m[1]) & 7;
    if (m[2] !== undefined) {
      h.facility = m[2];
      if (m[3] in LEVEL_NAMES) h.level = LEVEL_NAMES[m[3]];
    }
    if (m[4] !== undefined) h.time = { kind: 'uptime', ms: Number(m[4]) * 1000 + Number(`0.${m[5]}`) * 1000 };
    else if (m[6] !== undefined) {
      // ctime in English; other locales carry no time we can read (the gaps between lines do not count).
      const c = CTIME_EN.exec(m[6]);
      const ms = c ? utc(Number(c[6]), c[1], c[2], c[3], c[4], c[5]) : undefined;
      if (ms !== undefined) h.time = { kind: 'wall', ms };
    } else if (m[7] !== undefined) {
      const ms = Date.parse(m[7].replace(',', '.'));
      if (Number.isFinite(ms)) h.time = { kind: 'wall', ms };
    }
    return h;
  }
  const t = TALOS.exec(head);
  if (t) {
    const h: Head = { end: t[0].length, facility: t[1] };
    if (t[2] in LEVEL_NAMES) h.level = LEVEL_NAMES[t[2]];
    const ms = Date.parse(t[3]);
    if (Number.isFinite(ms)) h.time = { kind: 'wall', ms };
    return h;
  }
  const x = DMESG_X.exec(head);
  if (x && x[2] in LEVEL_NAMES) return { end: x[0].length, facility: x[1], level: LEVEL_NAMES[x[2]] };
  return null;
}

interface SyslogHead {
  end: number;
  ident?: string;
  pri?: number;
  time?: LineTime;
}

function syslogHead(head: string): SyslogHead | null {
  const m = SYSLOG.exec(head);
  if (m) {
    const h: SyslogHead = { end: m[0].length, ident: m[4] };
    if (m[1] !== undefined) h.pri = Number(m[1]);
    const time = syslogTime(m[2]);
    if (time) h.time = time;
    return h;
  }
  const r = RFC5424.exec(head);
  // Without "<PRI>1" only a real time makes it a record ("- a b c d -" is just text).
  if (r && (r[1] !== undefined || r[2] !== '-')) {
    const h: SyslogHead = { end: r[0].length };
    if (r[1] !== undefined) h.pri = Number(r[1]);
    if (r[4] !== '-') h.ident = r[4];
    const time = r[2] === '-' ? undefined : syslogTime(r[2]);
    if (time) h.time = time;
    return h;
  }
  return null;
}

function syslogTime(s: string): LineTime | undefined {
  const c = /^([A-Z][a-z]{2}) ([ \d]?\d) (\d\d):(\d\d):(\d\d)/.exec(s);
  if (c) {
    const ms = utc(2000, c[1], c[2], c[3], c[4], c[5]);
    return ms === undefined ? undefined : { kind: 'yearless', ms };
  }
  // short-full: the zone name is not read (only the gaps between lines matter).
  const f = /^[A-Z][a-z]{2} (\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d(?:\.\d+)?)/.exec(s);
  const ms = f ? Date.parse(`${f[1]}T${f[2]}Z`) : Date.parse(s.replace(/([+-]\d\d)(\d\d)$/, '$1:$2'));
  return Number.isFinite(ms) ? { kind: 'wall', ms } : undefined;
}

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
    const kind = lineKind(line);
    if (kind === 'kmsg') kmsg++;
    else if (kind === 'dmesg') dmesg++;
    else if (kind === 'syslog') syslog++;
  }
  const best = Math.max(kmsg, dmesg, syslog);
  if (seen === 0 || best * 2 < seen) return 'plain';
  return best === kmsg ? 'kmsg' : best === dmesg ? 'dmesg' : 'syslog';
}

/** What one line of a log file is: a line in one of the formats, the rest of the previous line, or blank. */
export type LineKind = LogFormat | 'continuation' | 'blank';

/**
 * Tells the format of one line by itself, so a file that mixes formats loses no line. Console
 * formats (dmesg -x, Talos) count as dmesg; journalctl's short formats and RFC 5424 as syslog.
 */
export function lineKind(line: string): LineKind {
  if (typeof line !== 'string' || line.trim() === '') return 'blank';
  const c = line.charCodeAt(0);
  if (c === 0x20 || c === 0x09) return 'continuation';
  const head = line.slice(0, 256);
  if (KMSG_HEAD.test(head)) return 'kmsg';
  if (dmesgHead(head)) return 'dmesg';
  if (syslogHead(head)) return 'syslog';
  return 'plain';
}

/** A " KEY=VALUE" line that belongs to the kmsg record above it. */
export function isKmsgField(line: string): boolean {
  return /^ [A-Za-z0-9_]+=/.test(line);
}

/**
 * Whether the format says a line came from user space, not the kernel: a syslog ident other
 * than `kernel`, or a facility other than `kern` (syslog PRI, dmesg -x, Talos). Raw kmsg
 * records are not judged here (the live agent's kernelOnly option decides for those).
 */
export function fromUserSpace(l: LogLine): boolean {
  return (l.ident !== undefined && l.ident !== 'kernel') || (l.facility !== undefined && l.facility !== 'kern');
}

/**
 * When a line was logged, as far as its format says. `uptime`: ms since boot (kmsg, dmesg
 * "[secs]"); `wall`: ms since the epoch (dmesg -T, RFC 3339 syslog; a time without a zone is read
 * as UTC: only the gaps between lines matter); `yearless`: a classic syslog "Aug 30 11:43:09",
 * as ms since the epoch of that date in the year 2000 (a leap year, so Feb 29 exists).
 */
export type LineTime = { kind: 'uptime' | 'wall' | 'yearless'; ms: number };

const MONTHS = 'JanFebMarAprMayJunJulAugSepOctNovDec';

/** The time a line carries in its format; undefined when it carries none (plain text, continuations). */
export function lineTime(line: string, format: LogFormat): LineTime | undefined {
  if (typeof line !== 'string') return undefined;
  const head = line.slice(0, 256);
  switch (format) {
    case 'kmsg': {
      const m = /^\d{1,3},\d{1,20},(\d{1,20}),/.exec(head);
      const usec = m ? Number(m[1]) : NaN;
      return Number.isSafeInteger(usec) ? { kind: 'uptime', ms: usec / 1000 } : undefined;
    }
    case 'dmesg':
      return dmesgHead(head)?.time;
    case 'syslog':
      return syslogHead(head)?.time;
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
      const h = dmesgHead(line.slice(0, 256));
      if (!h) return withCap({ message: line });
      const out: LogLine = { message: line.slice(h.end) };
      if (h.level !== undefined) out.level = h.level;
      if (h.facility !== undefined) out.facility = h.facility;
      return withCap(out);
    }
    case 'syslog': {
      const h = syslogHead(line.slice(0, 512));
      if (!h) return withCap({ message: line });
      let message = line.slice(h.end);
      if (h.ident === 'kernel') {
        const t = KTIME.exec(message.slice(0, 64));
        if (t) message = message.slice(t[0].length);
      }
      const out: LogLine = { message };
      if (h.ident !== undefined) out.ident = h.ident;
      if (h.pri !== undefined) {
        out.level = h.pri & 7;
        out.facility = facilityName(h.pri >> 3);
      }
      return withCap(out);
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
