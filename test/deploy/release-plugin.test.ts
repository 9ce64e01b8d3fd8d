/**
 * The kubectl plugin's release (scripts/release-plugin.ts, `npm run release:plugin`): the archive
 * krew downloads runs `kubectl vigil` with nothing but Node.js, the manifest carries the archive's
 * real sha256 and release URL, and the archive is reproducible, so the committed manifest
 * (deploy/krew/vigil.yaml) is the one the script writes for the committed sources.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as tar from 'tar';
import YAML from 'yaml';
import { MANIFEST, RELEASES, archiveName } from '../../scripts/release-plugin.ts';
import { ROOT } from './tools.ts';

interface KrewPlugin {
  spec: { version: string; platforms: { uri: string; sha256: string; bin: string }[] };
}

const { version } = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };

test('release:plugin builds a reproducible plugin archive that runs alone, and a krew manifest with its sha256', async (t) => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'vigil-release-'));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));
  const manifestPath = path.join(tmp, 'vigil.yaml');
  // As `npm run release:plugin -- --out DIR --manifest FILE` runs it.
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/release-plugin.ts', '--out', tmp, '--manifest', manifestPath], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 300_000,
  });
  assert.equal(r.status, 0, r.stderr);
  const archive = path.join(tmp, archiveName(version));
  const written = readFileSync(manifestPath, 'utf8');
  const [platform] = (YAML.parse(written) as KrewPlugin).spec.platforms;

  await t.test('the manifest names the release asset and carries the archive sha256', () => {
    assert.equal((YAML.parse(written) as KrewPlugin).spec.version, `v${version}`);
    assert.equal(platform.uri, `${RELEASES}/v${version}/kubectl-vigil-v${version}.tar.gz`);
    assert.equal(platform.sha256, createHash('sha256').update(readFileSync(archive)).digest('hex'));
  });

  await t.test('entries are sorted, ownerless, with fixed mtimes and 0755/0644 modes', async () => {
    const seen: { path: string; mode: number; mtime: number; uid: number }[] = [];
    await tar.t({
      file: archive,
      onReadEntry: (e) => {
        seen.push({ path: e.path, mode: e.mode ?? -1, mtime: e.mtime?.getTime() ?? 0, uid: e.uid ?? 0 });
      },
    });
    const paths = seen.map((e) => e.path.replace(/\/$/, ''));
    // Each directory's entries in name order, a directory before its contents (what the script writes).
    for (let i = 1; i < paths.length; i++) {
      const [a, b] = [paths[i - 1], paths[i]];
      assert.ok(b.startsWith(`${a}/`) || path.dirname(a) !== path.dirname(b) || a < b, `${a} before ${b}`);
    }
    assert.ok(paths.includes('bin/kubectl-vigil') && paths.includes('dist/cli/main.js') && paths.includes('package.json'));
    assert.ok(!paths.some((p) => p.startsWith('node_modules') || p.startsWith('src')), 'no node_modules or sources');
    for (const e of seen) {
      assert.equal(e.uid, 0, e.path);
      const executable = e.path.endsWith('/') || e.path.startsWith('bin/');
      assert.equal(e.mode & 0o7777, executable ? 0o755 : 0o644, e.path);
    }
    assert.equal(new Set(seen.filter((e) => !e.path.endsWith('/')).map((e) => e.mtime)).size, 1, 'one mtime for every file');
  });

  await t.test('unpacked as krew does, the plugin runs with only Node.js (no node_modules)', async () => {
    const dir = path.join(tmp, 'plugin');
    mkdirSync(dir);
    await tar.x({ file: archive, cwd: dir });
    assert.ok(!existsSync(path.join(os.tmpdir(), 'node_modules')), 'no node_modules above the unpacked plugin');
    const bin = path.join(dir, platform.bin);
    const help = spawnSync(bin, ['--help'], { cwd: tmp, encoding: 'utf8', timeout: 60_000 });
    assert.equal(help.status, 0, help.stderr);
    assert.match(help.stdout, /^\s+status \[options\]/m);
    // The status command's own code (the Kubernetes client) loads: it gets as far as the connection.
    const status = spawnSync(bin, ['status', '--server', 'https://127.0.0.1:1'], { cwd: tmp, encoding: 'utf8', timeout: 60_000 });
    assert.equal(status.status, 1, status.stderr);
    assert.match(status.stderr, /cannot list nodes/);
    const v = spawnSync(bin, ['--version'], { cwd: tmp, encoding: 'utf8', timeout: 60_000 });
    assert.equal(v.stdout.trim(), version);
  });

  await t.test('the committed deploy/krew/vigil.yaml is what the script writes for these sources', () => {
    assert.equal(readFileSync(MANIFEST, 'utf8'), written, 'deploy/krew/vigil.yaml is stale: run `npm run release:plugin`');
  });
});
