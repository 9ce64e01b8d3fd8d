/**
 * The real-world kernel-log corpus (test/fixtures/corpus/*.yaml): lines quoted from public issue
 * trackers, vendor documentation and forums, each labelled with the one reason it must raise or
 * "none". Shared by test/unit/corpus.test.ts and bench/corpus.ts, so both judge a line the same way:
 * through LogReplay, the pipeline `vigil scan` uses, with the default configuration.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { z } from 'zod';
import { parseConfig } from '../../src/settings/index.ts';
import { createReplay } from '../../src/app/index.ts';
import type { LineKind } from '../../src/sources/index.ts';
import type { Finding } from '../../src/api/index.ts';

export const CORPUS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'corpus');

/**
 * The line formats of the corpus and the kind `vigil scan` must tell each one as (plain: no
 * known prefix, the whole line is the message).
 */
export const FORMATS: Record<string, LineKind> = {
  kmsg: 'kmsg', // raw /dev/kmsg record
  // The bare message: what `journalctl -o cat` prints, what kmsg readers and most tools quote.
  message: 'plain',
  dmesg: 'dmesg', // dmesg, "[  123.456789] msg"
  'dmesg-caller': 'dmesg', // CONFIG_PRINTK_CALLER: "[  123.456789][  T896] msg"
  'dmesg-T': 'dmesg', // dmesg -T (ctime, English)
  'dmesg-T-locale': 'dmesg', // dmesg -T in another locale
  'dmesg-H': 'dmesg', // dmesg -H: "[Aug30 11:43] msg", "[  +0.000123] msg"
  'dmesg-r': 'dmesg', // dmesg -r: "<3>[  123.4] msg"
  'dmesg-x-iso': 'dmesg', // dmesg -x --time-format iso: "kern  :err   : 2025-01-25T10:34:54,859532+00:00 msg"
  'journal-short': 'syslog', // journalctl (short)
  'journal-short-iso': 'syslog', // journalctl -o short-iso
  'journal-short-precise': 'syslog', // journalctl -o short-precise
  'journal-no-hostname': 'syslog', // journalctl --no-hostname
  rfc3164: 'syslog', // syslog files (kern.log, messages), with or without <PRI>
  'rfc3164-kernel-time': 'syslog', // rsyslog with the kernel's own timestamp after "kernel:"
  rfc5424: 'syslog', // RFC 5424
  talos: 'dmesg', // talosctl dmesg: "NODE: kern: warning: [2026-...Z]: msg"
  bottlerocket: 'syslog', // Bottlerocket's journal (journalctl from the admin container), host often redacted
  flatcar: 'dmesg', // Flatcar boot console: kernel lines and systemd's own lines through /dev/kmsg
  'dmesg-continuation': 'continuation', // an indented line of a multi-line record
  'unknown-prefix': 'plain', // a prefix no parser knows: classified on the message
};

const entry = z
  .strictObject({
    line: z.string().min(1).optional(),
    /** Lines that belong together (a multi-record message): replayed in order, judged as one. */
    lines: z.array(z.string().min(1)).min(2).optional(),
    label: z.string().regex(/^(?:none|[A-Z][A-Za-z0-9]+)$/),
    entity: z.string().optional(),
    format: z.string(),
    source: z.string().min(8),
    /** Why a line is labelled as it is, where that is not obvious. */
    note: z.string().optional(),
  })
  .refine((e) => (e.line === undefined) !== (e.lines === undefined), 'exactly one of line and lines');

export type CorpusEntry = z.infer<typeof entry> & { file: string };

export function loadCorpus(dir = CORPUS_DIR): CorpusEntry[] {
  const out: CorpusEntry[] = [];
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()) {
    const parsed = z.array(entry).safeParse(YAML.parse(readFileSync(path.join(dir, file), 'utf8')));
    if (!parsed.success) throw new Error(`${file}: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
    for (const e of parsed.data) out.push({ ...e, file });
  }
  return out;
}

export function entryLines(e: CorpusEntry): string[] {
  return e.lines ?? [e.line!];
}

export interface Judged {
  /** Reasons the classifier raised on the entry's lines, in order. */
  reasons: string[];
  entities: string[];
  exact: boolean;
}

const config = parseConfig('{}');

/** Replays text through a fresh LogReplay (the `vigil scan` pipeline, default configuration); what it raised, in order. */
export function replayText(text: string): Finding[] {
  const found: Finding[] = [];
  const r = createReplay({
    config,
    rules: { userRules: [], npd: [] },
    format: 'auto',
    onFinding: () => {},
    onClassified: (fs) => found.push(...fs),
  });
  r.push(text + '\n');
  r.end();
  return found;
}

/** Replays one entry and compares what it raised with its label. */
export function judge(e: CorpusEntry): Judged {
  const found = replayText(entryLines(e).join('\n'));
  const reasons = found.map((f) => f.reason);
  const entities = found.map((f) => f.entity);
  const want = e.label === 'none' ? [] : [e.label];
  const exact =
    reasons.length === want.length && reasons.every((x, i) => x === want[i]) && (e.entity === undefined || entities[0] === e.entity);
  return { reasons, entities, exact };
}

/** The reason family of a label, for counts: NvidiaXID48Error -> NvidiaXID, NvidiaSXid20034Warning -> NvidiaSXid. */
export function family(label: string): string {
  if (label === 'none') return 'none';
  return label.replace(/^(NvidiaXID|NvidiaSXid)\d+(Error|Warning)$/, '$1');
}
