/**
 * Issue #22 point 8: configuration is bounded before it is used. The real `vigil` process with
 * real files: durations a timer cannot hold, files and names too large to parse, YAML alias bombs,
 * and SIGTERM while the configuration is still being read.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseConfig } from '../../src/settings/index.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const tmp = mkdtempSync(path.join(os.tmpdir(), 'vigil-config-bounds-'));
process.on('exit', () => rmSync(tmp, { recursive: true, force: true }));

/** Runs `vigil`; `timeout` kills a run that does not refuse its input (the old behaviour). */
function vigil(args: string[], env: NodeJS.ProcessEnv = {}, timeout = 20_000) {
  const started = Date.now();
  const r = spawnSync(process.execPath, [path.join(root, 'bin/vigil.js'), ...args], {
    encoding: 'utf8',
    timeout,
    env: { ...process.env, ...env },
    maxBuffer: 64 * 1024 * 1024,
  });
  return { code: r.status, signal: r.signal, out: r.stdout, err: r.stderr, ms: Date.now() - started };
}

function file(name: string, text: string): string {
  const p = path.join(tmp, name);
  writeFileSync(p, text);
  return p;
}

const run = (args: string[], env?: NodeJS.ProcessEnv) =>
  vigil(['run', '--standalone', '--listen', '127.0.0.1:0', '--state-dir', path.join(tmp, 'state'), ...args], env);

test('a duration longer than a timer can hold (engine.tick: 25d) is refused by check-config and run, naming the field', () => {
  const cfg = file('tick-25d.yaml', 'engine:\n  tick: 25d\n');
  for (const args of [
    ['check-config', cfg],
    ['run', '--standalone', '--listen', '127.0.0.1:0', '--config', cfg],
  ]) {
    const r = vigil(args);
    assert.equal(r.code, 2, `${args[0]}: ${r.err}`);
    assert.match(r.err, /^\s+engine\.tick: at most 2147483647 ms/m, args[0]);
  }
  // Numbers too, in every section, and in user rules (a threshold window).
  assert.throws(() => parseConfig('kubernetes:\n  heartbeat: 3000000000\n'), /kubernetes\.heartbeat: at most 2147483647 ms/);
  assert.throws(() => parseConfig('gpu:\n  pollInterval: 30d\n'), /gpu\.pollInterval: at most/);
  const rules = file(
    'long-window.yaml',
    'rules:\n  - {name: slow, pattern: "x", reason: SoftLockup, threshold: {count: 2, window: 90d}}\n',
  );
  const r = vigil(['check-config', file('with-long-window.yaml', `kernelLog:\n  userRules: [${rules}]\n`)]);
  assert.equal(r.code, 2);
  assert.match(r.err, /long-window\.yaml.*window.*at most 2147483647 ms/s);
  // The longest that fits still passes.
  assert.equal(parseConfig('engine:\n  tick: 24d\n').engine.tick, 24 * 86_400_000);
});

test('a configuration file over 128 KiB is refused at once, before it is parsed, with the file and the limit named', () => {
  // Valid YAML (comments only): the old code parsed all of it, and a 36 MB one ran out of memory.
  const big = file('big.yaml', `# ${'x'.repeat(78)}\n`.repeat(32 * 1024));
  for (const args of [
    ['check-config', big],
    ['run', '--standalone', '--listen', '127.0.0.1:0', '--config', big],
  ]) {
    const r = vigil(args);
    assert.equal(r.code, 2, `${args[0]}: ${r.err}`);
    assert.match(r.err, /big\.yaml: too large: 2654208 bytes, the limit is 128 KiB/, args[0]);
    assert.ok(r.ms < 10_000, `${args[0]} answered in ${r.ms} ms`);
  }
  // The same for rule files: each one, and all of them together.
  const bigRules = file('big-rules.yaml', `# ${'x'.repeat(78)}\n`.repeat(2048));
  const npd = file('npd.json', JSON.stringify({ plugin: 'kmsg', source: 'kernel-monitor', rules: [], padding: 'x'.repeat(120_000) }));
  const npdList = Array.from({ length: 9 }, () => npd);
  const r = vigil([
    'check-config',
    file('rules-cfg.yaml', `kernelLog:\n  userRules: [${bigRules}]\n  npdConfigs: [${npdList.join(', ')}]\n`),
  ]);
  assert.equal(r.code, 2);
  assert.match(r.err, /big-rules\.yaml: too large: 165888 bytes, the limit is 128 KiB/);
  assert.match(r.err, /npd\.json: too large: the rule files together may hold 1024 KiB/);
  const viaFlag = run(['--npd-config', file('big-npd.json', `{"plugin": "kmsg", "x": "${'y'.repeat(200_000)}"}`)]);
  assert.equal(viaFlag.code, 2);
  assert.match(viaFlag.err, /big-npd\.json: too large/);
});

test('a huge or malformed node name is refused at once, naming where it came from', () => {
  // 100,000 characters: about the most one argument may hold (MAX_ARG_STRLEN is 128 KiB).
  const huge = 'a'.repeat(100_000);
  const flag = run(['--node-name', huge]);
  assert.equal(flag.code, 2, `exit ${flag.code} / ${flag.signal}`);
  assert.match(flag.err, /^--node-name: too long: 100000 characters, a Node name has at most 253/m);
  assert.ok(flag.err.length < 1000, 'the name is not echoed back');
  const env = run([], { NODE_NAME: huge });
  assert.equal(env.code, 2, `exit ${env.code} / ${env.signal}`);
  assert.match(env.err, /^\$NODE_NAME: too long/m);
  const bad = run(['--node-name', 'Worker_1']);
  assert.equal(bad.code, 2);
  assert.match(bad.err, /--node-name: "Worker_1" is not a Node name/);
  assert.throws(() => parseConfig(`nodeName: ${'b'.repeat(254)}\n`), /nodeName: too long: 254 characters/);
  assert.throws(() => parseConfig('nodeName: -node\n'), /nodeName: "-node" is not a Node name/);
  assert.equal(parseConfig('nodeName: ip-10-0-0-5.ec2.internal\n').nodeName, 'ip-10-0-0-5.ec2.internal');
  const diag = vigil(['diagnose', '--node-name', huge, '--output', path.join(tmp, 'x.tar.gz')]);
  assert.equal(diag.code, 2);
  assert.match(diag.err, /--node-name: too long/);
});

test('a YAML alias bomb is refused quickly, in the configuration and in a user rule file', () => {
  const levels = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'];
  for (let i = 1; i < 9; i++) {
    const prev = String.fromCharCode(96 + i);
    levels.push(`${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(9).fill(`*${prev}`).join(',')}]`);
  }
  const bomb = file('bomb.yaml', `${levels.join('\n')}\n`);
  const direct = vigil(['check-config', bomb]);
  assert.equal(direct.code, 2);
  assert.match(direct.err, /bomb\.yaml: not valid YAML: Excessive alias count/);
  const viaRules = vigil(['check-config', file('bomb-rules.yaml', `kernelLog:\n  userRules: [${bomb}]\n`)]);
  assert.equal(viaRules.code, 2);
  assert.match(viaRules.err, /bomb\.yaml: invalid YAML: Excessive alias count/);
  assert.ok(direct.ms < 10_000 && viaRules.ms < 10_000, `answered in ${direct.ms} and ${viaRules.ms} ms`);
});

test('SIGTERM while run is still reading its configuration (a FIFO no one writes to yet) ends it at once', async (t) => {
  const fifo = path.join(tmp, 'config.fifo');
  assert.equal(spawnSync('mkfifo', [fifo]).status, 0);
  const child = spawn(
    process.execPath,
    [
      path.join(root, 'bin/vigil.js'),
      'run',
      '--standalone',
      '--listen',
      '127.0.0.1:0',
      '--state-dir',
      path.join(tmp, 'state-fifo'),
      '--config',
      fifo,
    ],
    { stdio: 'ignore' },
  );
  t.after(() => child.kill('SIGKILL'));
  const exited = once(child, 'exit');
  // Long enough to be blocked opening the FIFO (the CLI loads in well under this).
  await new Promise((r) => setTimeout(r, 3000));
  assert.equal(child.exitCode, null, 'still waiting for its configuration');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  const [code, signal] = (await exited) as [number | null, NodeJS.Signals | null];
  clearTimeout(timer);
  assert.deepEqual({ code, signal }, { code: null, signal: 'SIGTERM' }, 'ended by the SIGTERM, not by the SIGKILL 5 s later');
});
