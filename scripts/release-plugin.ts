/**
 * Builds the kubectl plugin's release archive and writes its krew manifest (deploy/krew/vigil.yaml)
 * with the archive's real sha256: `npm run release:plugin [-- --out DIR] [--manifest FILE]`.
 *
 * The archive holds what `kubectl vigil` runs: bin/kubectl-vigil, bin/vigil.js, dist/ (bundled
 * from the sources by scripts/bundle.ts, everything but koffi, which status and logs never load) and
 * a package.json with only the name, version and module type. No node_modules: the bundle carries
 * its dependencies, so one archive serves every OS and CPU with Node.js on the PATH.
 *
 * The archive is reproducible, so the committed manifest can be checked against a fresh build
 * (test/deploy/release-plugin.test.ts): entries sorted, every mtime the same fixed time, modes
 * 0755/0644, no owner (tar's portable mode), and GNU gzip with no name or time in its header (zlib's
 * output may change with the CPU's features; gzip's does not). Any change to what dist/ is built
 * from changes the sha256: run this script again then.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  createWriteStream,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import * as tar from 'tar';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const MANIFEST = path.join(ROOT, 'deploy/krew/vigil.yaml');
/** Where releases are published; krew downloads the archive from the release's assets. */
export const RELEASES = 'https://github.com/vigil-dev/vigil/releases/download';
/** Every entry's mtime: fixed, so the archive depends on contents only. */
const MTIME = new Date('2000-01-01T00:00:00Z');

export interface Release {
  version: string;
  archive: string;
  sha256: string;
  url: string;
  manifest: string;
}

export function archiveName(version: string): string {
  return `kubectl-vigil-v${version}.tar.gz`;
}

/** Every path under dir (directories first of their contents), sorted, relative, with '/' separators. */
function entries(dir: string, prefix = ''): string[] {
  const out: string[] = [];
  for (const e of readdirSync(path.join(dir, prefix), { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const rel = prefix ? `${prefix}/${e.name}` : e.name;
    out.push(rel);
    if (e.isDirectory()) out.push(...entries(dir, rel));
  }
  return out;
}

/** The files the plugin runs, in `stage`, with portable modes. */
function stage(dir: string, version: string): void {
  const bundle = spawnSync(process.execPath, ['--import', 'tsx', path.join(ROOT, 'scripts/bundle.ts'), path.join(dir, 'dist')], {
    cwd: ROOT,
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  if (bundle.status !== 0) throw new Error(`scripts/bundle.ts failed (exit ${bundle.status ?? bundle.signal})`);
  // bin/vigil.js runs dist/ when its stamp exists and no src/ is beside it.
  writeFileSync(path.join(dir, 'dist/.build-stamp'), `${version}\n`);
  mkdirSync(path.join(dir, 'bin'));
  for (const f of ['vigil.js', 'kubectl-vigil']) copyFileSync(path.join(ROOT, 'bin', f), path.join(dir, 'bin', f));
  const pkg = { name: 'vigil', version, type: 'module', license: 'Apache-2.0' };
  writeFileSync(path.join(dir, 'package.json'), JSON.stringify(pkg, null, 2) + '\n');
  for (const rel of entries(dir)) {
    const p = path.join(dir, rel);
    chmodSync(p, statSync(p).isDirectory() || rel.startsWith('bin/') ? 0o755 : 0o644);
  }
}

/** The krew manifest with this release's version, URL and sha256 (the rest of the committed file kept). */
export function manifestFor(template: string, version: string, url: string, sha256: string): string {
  const replaced = template
    .replace(/^(\s*version:\s*).*$/m, `$1v${version}`)
    .replace(/^(\s*uri:\s*).*$/m, `$1${url}`)
    .replace(/^(\s*sha256:\s*).*$/m, `$1"${sha256}"`);
  for (const [key, value] of [
    ['version', `v${version}`],
    ['uri', url],
    ['sha256', `"${sha256}"`],
  ])
    if (!replaced.includes(`${key}: ${value}`)) throw new Error(`the krew manifest has no ${key}: line to fill in`);
  return replaced;
}

/** Builds the archive into outDir and returns the manifest text (written to manifestPath when given). */
export async function release(outDir: string, manifestPath?: string): Promise<Release> {
  const { version } = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
  mkdirSync(outDir, { recursive: true });
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-plugin-stage-'));
  try {
    stage(dir, version);
    const archive = path.join(outDir, archiveName(version));
    const gzip = spawn('gzip', ['-9', '-n'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const exited = new Promise<number | null>((resolve, reject) => {
      gzip.on('error', reject);
      gzip.on('close', resolve);
    });
    const tarStream = tar.create({ cwd: dir, portable: true, mtime: MTIME, noDirRecurse: true, gzip: false }, entries(dir));
    await Promise.all([pipeline(tarStream, gzip.stdin), pipeline(gzip.stdout, createWriteStream(archive))]);
    const code = await exited;
    if (code !== 0) throw new Error(`gzip exited ${code}`);
    const sha256 = createHash('sha256').update(readFileSync(archive)).digest('hex');
    const url = `${RELEASES}/v${version}/${archiveName(version)}`;
    const manifest = manifestFor(readFileSync(MANIFEST, 'utf8'), version, url, sha256);
    if (manifestPath) writeFileSync(manifestPath, manifest);
    return { version, archive, sha256, url, manifest };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const out = path.resolve(arg('--out') ?? path.join(ROOT, '.cache/release'));
  const manifest = path.resolve(arg('--manifest') ?? MANIFEST);
  const r = await release(out, manifest);
  process.stdout.write(`${r.archive}\nsha256 ${r.sha256}\n${manifest} written (${r.url})\n`);
}
