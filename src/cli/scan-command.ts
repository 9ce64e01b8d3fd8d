/**
 * `vigil scan FILE`: replays a saved log through the agent's own classifier, pipeline and engine
 * (src/pipeline), on a clock taken from the lines' timestamps, and prints what the engine emits.
 * Streams the input (a file, a FIFO, `<(zcat log.gz)`, stdin), so a multi-gigabyte log or a
 * 600 MB line needs little memory.
 *
 * Exit 0: every line was read; 2: bad arguments or configuration, unreadable input, or input that
 * was not all read as it should be (lines not in the forced format, lines cut at 1 MiB), so a
 * partial read is never a quiet all-clear.
 */
import { open } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { loadConfig, type VigilConfig } from '../settings/index.ts';
import { loadRuleFiles, type RuleFiles } from '../monitors/kernel-log/rule-files.ts';
import { createReplay } from '../app/scan.ts';
import { MAX_LINE_CHARS, NotTextError, replayStream, type ReplaySummary } from '../pipeline/index.ts';
import type { LogFormat } from '../sources/kmsg/parse.ts';
import { messageWithCode, VigilError } from '../util/errors.ts';

export interface ScanOptions {
  format?: 'auto' | LogFormat;
  json?: boolean;
  config?: string;
  /** NPD system-log-monitor files, added to the configuration's kernelLog.npdConfigs. */
  npdConfig?: string[];
}

/** Cut lines reported one by one; the rest are counted in the summary. */
const CUT_REPORTS = 10;

export async function runScanCommand(file: string, opts: ScanOptions): Promise<number> {
  const name = file === '-' ? 'stdin' : file;
  let config: VigilConfig;
  let rules: RuleFiles;
  try {
    config = loadConfig(opts.config);
    config.kernelLog.npdConfigs.push(...(opts.npdConfig ?? []));
    rules = loadRuleFiles(config.kernelLog);
  } catch (err) {
    process.stderr.write(`vigil scan: ${messageWithCode(err)}\n`);
    return 2;
  }

  let input: Readable;
  try {
    input = file === '-' ? process.stdin : await openInput(file);
  } catch (err) {
    process.stderr.write(`vigil scan: cannot read ${name}: ${messageWithCode(err)}\n`);
    return 2;
  }

  let cutReports = 0;
  const replay = createReplay({
    config,
    rules,
    format: opts.format ?? 'auto',
    onFinding: (f, line) => {
      const out = { line, reason: f.reason, severity: f.severity, condition: f.condition, message: f.message, entity: f.entity };
      process.stdout.write(
        opts.json
          ? `${JSON.stringify(out)}\n`
          : `${line}: ${out.severity} ${out.reason}${out.entity ? ` [${out.entity}]` : ''} ${out.message}\n`,
      );
    },
    onCut: (line, length) => {
      if (cutReports++ < CUT_REPORTS) {
        process.stderr.write(`vigil scan: ${name}: line ${line} is ${length} characters long; read its first ${MAX_LINE_CHARS} only\n`);
      }
    },
  });

  let summary: ReplaySummary;
  try {
    summary = await replayStream(input, replay);
  } catch (err) {
    input.destroy();
    const why = err instanceof NotTextError ? `${name} is ${messageWithCode(err)}` : `cannot read ${name}: ${messageWithCode(err)}`;
    process.stderr.write(`vigil scan: ${why}\n`);
    return 2;
  }
  writeSummary(summary, opts, name);
  return summary.unparsed > 0 || summary.cut > 0 ? 2 : 0;
}

/** Opens anything readable as a stream (a file, a FIFO, /dev/fd/N); refuses a directory. */
async function openInput(file: string): Promise<Readable> {
  const fh = await open(file, 'r');
  try {
    if ((await fh.stat()).isDirectory()) throw new VigilError('VIGIL_E_SCAN_INPUT', 'it is a directory');
  } catch (err) {
    await fh.close();
    throw err;
  }
  return fh.createReadStream({ highWaterMark: 64 * 1024 });
}

function writeSummary(s: ReplaySummary, opts: ScanOptions, name: string): void {
  if (s.unparsed > 0) {
    process.stderr.write(
      `vigil scan: ${name}: ${s.unparsed} lines were not in ${opts.format} format (first: line ${s.firstUnparsed}); ` +
        'they were classified as plain text\n',
    );
  }
  if (s.cut > CUT_REPORTS) process.stderr.write(`vigil scan: ${name}: ${s.cut} lines in all were cut at ${MAX_LINE_CHARS} characters\n`);
  if (opts.json) {
    process.stderr.write(`${JSON.stringify({ summary: s })}\n`);
    return;
  }
  const formats = Object.entries(s.formats)
    .map(([f, n]) => `${f} ${n}`)
    .join(', ');
  const problems = [
    ...(s.unparsed ? [`${s.unparsed} not in ${opts.format} format`] : []),
    ...(s.cut ? [`${s.cut} cut at ${MAX_LINE_CHARS} characters`] : []),
    ...(s.userSpace ? [`${s.userSpace} user-space program lines not classified`] : []),
  ];
  process.stderr.write(
    `${s.lines} lines${formats ? ` (${formats})` : ''}, ${s.findings} findings${problems.length ? `; ${problems.join(', ')}` : ''}\n`,
  );
}
