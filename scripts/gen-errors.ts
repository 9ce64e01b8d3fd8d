/**
 * Generates docs/errors.md from the error code registry (src/util/error-codes.ts) and guards its
 * snapshot (catalog/error-codes-snapshot.json): codes are public API, so one that disappears fails
 * unless the snapshot is updated on purpose. Run by scripts/gen-catalog.ts with the same flags:
 *
 *   npm run gen                        write docs/errors.md; fail if a code was removed
 *   npm run gen -- --check             fail if docs/errors.md or the snapshot is stale, or a code was removed
 *   npm run gen -- --update-snapshot   accept a removed code (breaking: add a CHANGELOG entry)
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { ERROR_CODES } from '../src/util/error-codes.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const errorPaths = {
  md: path.join(root, 'docs/errors.md'),
  snapshot: path.join(root, 'catalog/error-codes-snapshot.json'),
};

/** The codes a snapshot records, sorted. */
export function errorCodeList(codes: Record<string, unknown> = ERROR_CODES): string[] {
  return Object.keys(codes).sort();
}

/** Codes in the snapshot that are no longer in the registry. */
export function removedCodes(snapshot: readonly string[], current: readonly string[]): string[] {
  return snapshot.filter((c) => !current.includes(c));
}

const cell = (s: string) => s.replaceAll('|', '\\|');

export function renderErrorsMd(): string {
  const out = [
    '<!-- Generated from src/util/error-codes.ts by `npm run gen`; do not edit. -->',
    '# Error codes',
    '',
    'Every error Vigil shows a user or an operator carries a stable code (`VigilError.code`), like',
    "undici's `UND_ERR_*`: match on the code, not on the message, which may be reworded. The CLI",
    'prints it in parentheses after the first line of the message, e.g.',
    '`f.yaml: invalid configuration (VIGIL_E_CONFIG):`; JSON logs carry it as `err.code`. A code is',
    'never renamed or given another meaning.',
    '',
    '| Code | Meaning | Where you see it | What to do |',
    '|---|---|---|---|',
  ];
  for (const [code, c] of Object.entries(ERROR_CODES)) {
    out.push(`| \`${code}\` | ${cell(c.meaning)} | ${cell(c.seen)} | ${cell(c.action)} |`);
  }
  out.push('');
  return out.join('\n');
}

/** Writes (or with --check, compares) docs/errors.md and the snapshot; the exit status. */
export function genErrors(argv: readonly string[]): number {
  const check = argv.includes('--check');
  const update = argv.includes('--update-snapshot');
  const current = errorCodeList();
  let snapshot: string[] = [];
  try {
    snapshot = JSON.parse(readFileSync(errorPaths.snapshot, 'utf8')) as string[];
  } catch {
    if (check) {
      console.error('catalog/error-codes-snapshot.json is missing: run npm run gen');
      return 1;
    }
  }
  const removed = removedCodes(snapshot, current);
  if (removed.length && !update) {
    console.error(
      `Error codes were removed from src/util/error-codes.ts: ${removed.join(', ')}.\n` +
        'If this is intended, run `npm run gen -- --update-snapshot` and add a CHANGELOG.md entry marked "breaking".',
    );
    return 1;
  }
  // Additions are not breaking, so the snapshot follows them.
  const outputs: [string, string][] = [
    [errorPaths.md, renderErrorsMd()],
    [errorPaths.snapshot, JSON.stringify(current, null, 2) + '\n'],
  ];
  if (check) {
    const stale = outputs.filter(([p, text]) => {
      try {
        return readFileSync(p, 'utf8') !== text;
      } catch {
        return true;
      }
    });
    if (stale.length) {
      console.error(`Generated files are stale: ${stale.map(([p]) => path.relative(root, p)).join(', ')}. Run npm run gen.`);
      return 1;
    }
    return 0;
  }
  for (const [p, text] of outputs) writeFileSync(p, text);
  return 0;
}
