import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { errorCodeList, errorPaths, removedCodes, renderErrorsMd } from '../../scripts/gen-errors.ts';
import { ConfigError } from '../../src/config/index.ts';
import { StateDirLockedError } from '../../src/state/index.ts';
import { ERROR_CODES, VigilError, errorCode, errorMessage, messageWithCode } from '../../src/util/index.ts';

const srcDir = fileURLToPath(new URL('../../src', import.meta.url));
const registryFile = path.join(srcDir, 'util/error-codes.ts');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts'))
    .map((f) => path.join(dir, f));
}

test('the committed snapshot lists exactly the registry codes (a removed code needs --update-snapshot and a CHANGELOG entry)', () => {
  const snapshot = JSON.parse(readFileSync(errorPaths.snapshot, 'utf8')) as string[];
  assert.deepEqual(removedCodes(snapshot, errorCodeList()), [], 'breaking change: a code was removed');
  assert.deepEqual(snapshot, errorCodeList());
});

test('the snapshot guard reports a removed code and accepts an added one', () => {
  assert.deepEqual(removedCodes(['VIGIL_E_A', 'VIGIL_E_B'], ['VIGIL_E_A']), ['VIGIL_E_B']);
  assert.deepEqual(removedCodes(['VIGIL_E_A'], ['VIGIL_E_A', 'VIGIL_E_C']), []);
});

test('docs/errors.md is what the generator writes, with one row per code', () => {
  const md = readFileSync(errorPaths.md, 'utf8');
  assert.equal(md, renderErrorsMd(), 'stale: run npm run gen');
  for (const code of Object.keys(ERROR_CODES)) assert.match(md, new RegExp(`^\\| \`${code}\` \\|`, 'm'), code);
});

test('every code is VIGIL_E_ and upper case, with a meaning, where it is seen and what to do', () => {
  for (const [code, info] of Object.entries(ERROR_CODES)) {
    assert.match(code, /^VIGIL_E_[A-Z0-9_]+$/);
    for (const text of [info.meaning, info.seen, info.action]) assert.ok(text.trim().length > 10, `${code}: ${text}`);
  }
});

test('every VigilError subclass in src passes a registered code to super', () => {
  const subclasses: string[] = [];
  for (const file of sourceFiles(srcDir)) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/class (\w+) extends VigilError \{/g)) {
      const body = text.slice(m.index);
      const code = /super\(\s*'(VIGIL_E_[A-Z0-9_]+)'/.exec(body)?.[1];
      assert.ok(code && code in ERROR_CODES, `${path.relative(srcDir, file)}: ${m[1]} passes ${code ?? 'no code'} to super`);
      subclasses.push(m[1]);
    }
  }
  // The classes issue #23 turned into VigilErrors; a missing one means the scan above broke.
  for (const name of ['ConfigError', 'FileTooLargeError', 'StateDirLockedError', 'NvmlError', 'DestinationRefused', 'MissingToolError']) {
    assert.ok(subclasses.includes(name), name);
  }
});

test('every code src uses is registered, and every registered code is used', () => {
  const used = new Set<string>();
  for (const file of sourceFiles(srcDir)) {
    if (file === registryFile) continue;
    for (const m of readFileSync(file, 'utf8').matchAll(/'(VIGIL_E_[A-Z0-9_]+)'/g)) {
      assert.ok(m[1] in ERROR_CODES, `${path.relative(srcDir, file)}: ${m[1]} is not in src/util/error-codes.ts`);
      used.add(m[1]);
    }
  }
  assert.deepEqual(
    Object.keys(ERROR_CODES).filter((c) => !used.has(c)),
    [],
    'registered but never thrown',
  );
});

test('subclasses keep their name and message and gain their code', () => {
  const config = new ConfigError('f.yaml: invalid configuration:\n  listen: bad');
  assert.ok(config instanceof VigilError);
  assert.equal(config.name, 'ConfigError');
  assert.equal(config.code, 'VIGIL_E_CONFIG');
  assert.equal(config.message, 'f.yaml: invalid configuration:\n  listen: bad');
  const locked = new StateDirLockedError('/var/lib/vigil', 42);
  assert.equal(locked.code, 'VIGIL_E_STATE_DIR_LOCKED');
  assert.equal(locked.name, 'StateDirLockedError');
  // A bare VigilError still prints as "Error: ..." (tests and logs match on that).
  assert.equal(String(new VigilError('VIGIL_E_PATTERN', 'pattern too large')), 'Error: pattern too large');
});

test('messageWithCode puts the code after the first line, before a colon that introduces a list', () => {
  assert.equal(messageWithCode(new VigilError('VIGIL_E_BOOT_ID', 'the boot id is empty')), 'the boot id is empty (VIGIL_E_BOOT_ID)');
  assert.equal(
    messageWithCode(new ConfigError('f.yaml: invalid configuration:\n  listen: bad\n  stateDir: bad')),
    'f.yaml: invalid configuration (VIGIL_E_CONFIG):\n  listen: bad\n  stateDir: bad',
  );
  assert.equal(
    messageWithCode(new VigilError('VIGIL_E_RULE_FILES', 'a.yaml: rule 0: bad\nb.json: bad')),
    'a.yaml: rule 0: bad (VIGIL_E_RULE_FILES)\nb.json: bad',
  );
  assert.equal(messageWithCode(new Error('plain')), 'plain');
  assert.equal(messageWithCode('thrown text'), errorMessage('thrown text'));
});

test('errorCode reads only errno codes, never a VigilError code', () => {
  assert.equal(errorCode(new VigilError('VIGIL_E_SYSTEMCTL', 'systemctl show exited 1')), undefined);
  assert.equal(errorCode(Object.assign(new Error('gone'), { code: 'ENOENT' })), 'ENOENT');
});
