// Image build (Dockerfile), run in /prod, the production node_modules: leaves of npm re2 only what Node loads
// (package.json, re2.js, the built build/Release/re2.node) and removes what only its build needed:
// its C++ sources and the packages it pulls in only to build (node-gyp, nan and theirs, which the
// lockfile marks optional, or devOptional, because nothing else in production needs them).
import fs from 'node:fs';
import path from 'node:path';

interface LockEntry {
  dependencies?: Record<string, string>;
  optional?: boolean;
  devOptional?: boolean;
}

const root = process.cwd();
const lock = (JSON.parse(fs.readFileSync(path.join(root, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockEntry> })
  .packages;
const re2 = 'node_modules/re2';
if (!fs.existsSync(path.join(root, re2, 'build/Release/re2.node'))) {
  console.error('slim-re2: node_modules/re2/build/Release/re2.node is missing: build re2 first');
  process.exit(1);
}

// Where Node would find `dep` from the package at `at` (nested node_modules first, then upwards).
function resolve(at: string, dep: string): string | undefined {
  for (let base = at; ;) {
    const key = `${base}/node_modules/${dep}`;
    if (lock[key]) return key;
    const up = base.lastIndexOf('/node_modules/');
    if (up < 0) return lock[`node_modules/${dep}`] ? `node_modules/${dep}` : undefined;
    base = base.slice(0, up);
  }
}

const buildOnly = new Set<string>();
(function walk(at: string): void {
  for (const dep of Object.keys(lock[at].dependencies ?? {})) {
    const key = resolve(at, dep);
    if (key && (lock[key].optional || lock[key].devOptional) && !buildOnly.has(key)) {
      buildOnly.add(key);
      walk(key);
    }
  }
})(re2);
for (const key of buildOnly) fs.rmSync(path.join(root, key), { recursive: true, force: true });

const keep = new Set(['package.json', 're2.js', 'LICENSE', 'build']);
for (const f of fs.readdirSync(path.join(root, re2)))
  if (!keep.has(f)) fs.rmSync(path.join(root, re2, f), { recursive: true, force: true });
for (const f of fs.readdirSync(path.join(root, re2, 'build')))
  if (f !== 'Release') fs.rmSync(path.join(root, re2, 'build', f), { recursive: true, force: true });
for (const f of fs.readdirSync(path.join(root, re2, 'build/Release')))
  if (f !== 're2.node') fs.rmSync(path.join(root, re2, 'build/Release', f), { recursive: true, force: true });
console.log(`slim-re2: removed ${[...buildOnly].join(', ')} and re2's sources`);
