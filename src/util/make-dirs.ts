/**
 * `mkdir -p` that fails at once. Node's own `mkdir(dir, { recursive: true })` loops forever, at
 * full CPU, when mkdir(2) answers ENOENT for a parent that exists: `/proc/nope` (Node 20, measured
 * past 10 minutes).
 */
import { mkdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { errorCode } from './errors.ts';

/** Creates `dir` and its missing parents, one mkdir(2) each; throws the first error. */
export function makeDirs(dir: string): void {
  const missing: string[] = [];
  for (let p = path.resolve(dir); ; p = path.dirname(p)) {
    try {
      if (statSync(p).isDirectory()) break;
      throw Object.assign(new Error(`ENOTDIR: not a directory, ${p}`), { code: 'ENOTDIR' });
    } catch (err) {
      if (errorCode(err) !== 'ENOENT' || path.dirname(p) === p) throw err;
      missing.push(p);
    }
  }
  for (const d of missing.reverse()) {
    try {
      mkdirSync(d);
    } catch (err) {
      if (errorCode(err) !== 'EEXIST') throw err;
    }
  }
}
