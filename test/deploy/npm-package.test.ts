/**
 * What `npm install -g` of the packed package gives an operator (issue #21 point 6): both commands,
 * `vigil` and `kubectl-vigil`, on the prefix's bin/, each running from the installed package.
 *
 * The package is packed by `npm pack` as for a release and unpacked; npm installs that globally into
 * a temp prefix (npm links a folder where it would unpack a tarball: the same bin links). Its
 * dependencies come from this checkout's node_modules, linked into the unpacked package, rather than
 * from the registry, so the test sends nothing off this machine.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as tar from 'tar';
import { ROOT, ok, run } from './tools.ts';

const { version } = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };

test('npm install -g of the packed package puts vigil and kubectl-vigil on the PATH, and both run', async (t) => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'vigil-npm-'));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));
  // --ignore-scripts: dist/ is already built (npm ci's prepare); packing must not rebuild it here.
  const packed = ok(run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', tmp]), 'npm pack');
  const [{ filename }] = JSON.parse(packed) as { filename: string }[];
  const pkg = path.join(tmp, 'package');
  await tar.x({ file: path.join(tmp, filename), cwd: tmp });
  assert.ok(existsSync(path.join(pkg, 'bin/kubectl-vigil')), 'the packed package holds bin/kubectl-vigil');
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(pkg, 'node_modules'));

  const prefix = path.join(tmp, 'prefix');
  mkdirSync(prefix);
  ok(run('npm', ['install', '-g', '--prefix', prefix, '--offline', '--ignore-scripts', '--no-audit', '--no-fund', pkg]), 'npm install -g');
  for (const cmd of ['vigil', 'kubectl-vigil']) assert.ok(lstatSync(path.join(prefix, 'bin', cmd)).isSymbolicLink(), `npm linked ${cmd}`);

  // Run from elsewhere, found on the PATH, as an operator runs them (kubectl finds its plugin so).
  const env = { ...process.env, PATH: `${path.join(prefix, 'bin')}:${process.env.PATH}` };
  const runBin = (cmd: string, args: string[]) => spawnSync(cmd, args, { cwd: tmp, env, encoding: 'utf8', timeout: 60_000 });
  const help = runBin('kubectl-vigil', ['--help']);
  assert.equal(help.status, 0, help.stderr);
  assert.match(help.stdout, /^\s+status \[options\]/m);
  const v = runBin('vigil', ['--version']);
  assert.equal(v.status, 0, v.stderr);
  assert.equal(v.stdout.trim(), version);
});
