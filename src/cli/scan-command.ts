/**
 * `vigil scan FILE`: classifies a saved log offline with the same parser and rules as the agent.
 * Streams the file, so a multi-gigabyte log needs little memory.
 */
import { createReadStream, openSync, readSync, closeSync, statSync } from 'node:fs';
import readline from 'node:readline';
import type { Finding } from '../api/types.ts';
import { lookupReason } from '../catalog/index.ts';
import { loadConfig } from '../config/load.ts';
import { loadRuleFiles } from '../agent/rule-files.ts';
import { KernelLogClassifier } from '../monitors/kernel-log/classify.ts';
import { detectFormat, parseLine, type LogFormat } from '../sources/kmsg/parse.ts';
import { SlidingCounter } from '../engine/sliding-counter.ts';

export interface ScanOptions {
  format?: 'auto' | LogFormat;
  json?: boolean;
  config?: string;
}

const SAMPLE_LINES = 50;

export async function runScanCommand(file: string, opts: ScanOptions): Promise<number> {
  let classifier: KernelLogClassifier;
  try {
    const config = loadConfig(opts.config);
    const rules = loadRuleFiles(config);
    classifier = new KernelLogClassifier({
      fatalXids: config.xid.fatal,
      pcieCorrectedThreshold: { count: config.kernelLog.pcieCorrected.count, windowMs: config.kernelLog.pcieCorrected.window },
      userRules: rules.userRules,
      npd: rules.npd,
      source: 'file',
    });
    if (file !== '-') checkReadableText(file);
  } catch (err) {
    process.stderr.write(`vigil scan: ${(err as Error).message}\n`);
    return 2;
  }

  const input = file === '-' ? process.stdin : createReadStream(file);
  const lines = readline.createInterface({ input, crlfDelay: Infinity });
  let format: LogFormat | undefined = opts.format && opts.format !== 'auto' ? opts.format : undefined;
  const pending: string[] = [];
  const thresholds = new Map<string, SlidingCounter>();
  let lineNo = 0;
  let findings = 0;
  const at = Date.now();

  const emit = (f: Finding, line: number) => {
    if (f.threshold) {
      const key = `${f.reason}|${f.entity}`;
      let c = thresholds.get(key);
      if (!c) thresholds.set(key, (c = new SlidingCounter(f.threshold.windowMs, f.threshold.count)));
      c.add(at);
      if (c.count(at) < f.threshold.count) return;
      thresholds.delete(key);
    }
    const def = lookupReason(f.reason);
    const out = {
      line,
      reason: f.reason,
      severity: f.severity ?? def?.severity ?? 'Warning',
      condition: f.condition ?? def?.condition ?? 'KernelReady',
      message: f.message,
      entity: f.entity,
    };
    findings++;
    process.stdout.write(
      opts.json
        ? `${JSON.stringify(out)}\n`
        : `${line}: ${out.severity} ${out.reason}${out.entity ? ` [${out.entity}]` : ''} ${out.message}\n`,
    );
  };
  const handle = (text: string, n: number) => {
    const parsed = parseLine(text, format!);
    if (!parsed) return;
    for (const f of classifier.classify(parsed, at)) emit(f, n);
  };

  try {
    for await (const text of lines) {
      lineNo++;
      if (!format) {
        // Auto-detect from the first lines, then replay them.
        pending.push(text);
        if (pending.length < SAMPLE_LINES) continue;
        format = detectFormat(pending);
        pending.forEach((t, i) => handle(t, lineNo - pending.length + 1 + i));
        pending.length = 0;
        continue;
      }
      handle(text, lineNo);
    }
    if (!format) {
      format = detectFormat(pending);
      pending.forEach((t, i) => handle(t, i + 1));
    }
  } catch (err) {
    process.stderr.write(`vigil scan: cannot read ${file}: ${(err as Error).message}\n`);
    return 2;
  }
  if (!opts.json) process.stderr.write(`${lineNo} lines (${format}), ${findings} findings\n`);
  return 0;
}

/** Refuses what is not a readable text file, with a message that says which. */
function checkReadableText(file: string): void {
  const st = statSync(file);
  if (st.isDirectory()) throw new Error(`${file} is a directory`);
  const fd = openSync(file, 'r');
  try {
    const buf = Buffer.alloc(65536);
    const n = readSync(fd, buf, 0, buf.length, 0);
    if (buf.subarray(0, n).includes(0)) throw new Error(`${file} is not a text log (it contains NUL bytes)`);
  } finally {
    closeSync(fd);
  }
}
