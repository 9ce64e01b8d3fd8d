/** Vigil's version, read from package.json (two levels up from both src/util and dist/util). */
import { readFileSync } from 'node:fs';

export const VERSION: string = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string })
  .version;
