#!/usr/bin/env node
// Runs the compiled agent from dist/ (built by `npm ci` through the prepare script), or the
// TypeScript sources through tsx when dist/ is missing or older than a source file. The compiled
// build is what a node should run: it starts faster and needs about 25 MiB less memory.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const stamp = path.join(root, 'dist', '.build-stamp');

function newestSource(dir) {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    newest = Math.max(newest, e.isDirectory() ? newestSource(p) : statSync(p).mtimeMs);
  }
  return newest;
}

// An image ships dist/ without src/: then there is nothing newer to compare against.
const src = path.join(root, 'src');
const fromSource =
  process.env.VIGIL_FROM_SOURCE === '1' || !existsSync(stamp) || (existsSync(src) && newestSource(src) > statSync(stamp).mtimeMs);
let main;
if (fromSource) {
  const { register } = await import('tsx/esm/api');
  register();
  ({ main } = await import('../src/cli/main.ts'));
} else {
  ({ main } = await import('../dist/cli/main.js'));
}
await main(process.argv);
