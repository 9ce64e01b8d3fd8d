/**
 * docs/benchmarks.md holds generated sections between `<!-- bench:NAME start -->` and
 * `<!-- bench:NAME end -->`; a bench rewrites only its own, so the prose around it and other
 * benches' sections stay as they are.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const FILE = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'docs', 'benchmarks.md');

/** Replaces the section `name` (appends it when absent) with `section` (which ends with a newline). */
export function writeDocsSection(name: string, section: string): void {
  const start = `<!-- bench:${name} start -->`;
  const end = `<!-- bench:${name} end -->`;
  const block = `${start}\n${section}${end}\n`;
  let text = existsSync(FILE) ? readFileSync(FILE, 'utf8') : '# Benchmarks\n\n';
  const a = text.indexOf(start);
  const b = text.indexOf(end);
  text = a >= 0 && b > a ? text.slice(0, a) + block + text.slice(b + end.length + 1) : `${text.trimEnd()}\n\n${block}`;
  writeFileSync(FILE, text);
}
