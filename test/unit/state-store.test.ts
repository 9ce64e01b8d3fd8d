/**
 * StateStore on a real temporary directory: the directory lock, failed writes (counted, reported,
 * retried with backoff until they succeed), unique temp files, and what load() answers when the
 * state file was lost on the same boot or on another one.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Registry } from 'prom-client';
import { StateDirLockedError, StateStore, type PersistedState, type StateStoreOptions } from '../../src/state/index.ts';
import { readBootId } from '../../src/util/index.ts';
import { KmsgReader, type KmsgIo } from '../../src/sources/index.ts';

const BOOT = 'boot-aaaa';

function tempDir(t: { after: (fn: () => void) => void }): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-state-unit-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A store whose events are recorded; closed after the test whatever happens. */
function open(t: { after: (fn: () => void) => void }, dir: string, extra: Partial<StateStoreOptions> = {}) {
  const health: { state: string; message: string }[] = [];
  let saves = 0;
  let seq = 0;
  const registry = new Registry();
  const store = new StateStore(dir, {
    bootId: BOOT,
    collect: (): PersistedState => ({ version: 1, kmsgCursor: { bootId: BOOT, seq: ++seq } }),
    retry: { firstMs: 20, maxMs: 80 },
    registry,
    onHealth: (state, message) => health.push({ state, message }),
    onSaved: () => saves++,
    ...extra,
  });
  t.after(() => store.close());
  const failures = async () => (await registry.getSingleMetric('vigil_state_write_failures_total')!.get()).values[0]?.value ?? 0;
  return { store, health, saves: () => saves, failures };
}

async function until(pred: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('a second store on a locked directory is refused with the directory and the holder pid', (t) => {
  const dir = tempDir(t);
  const first = open(t, dir);
  first.store.load();
  assert.ok(first.store.flush());
  const before = readFileSync(first.store.file, 'utf8');
  assert.throws(
    () => open(t, dir),
    (err: unknown) =>
      err instanceof StateDirLockedError &&
      err.message.includes(dir) &&
      err.message.includes(`pid ${process.pid}`) &&
      err.pid === process.pid,
  );
  assert.equal(readFileSync(first.store.file, 'utf8'), before, 'the refused store did not touch the state file');
});

test('closing a store releases the lock for the next one', (t) => {
  const dir = tempDir(t);
  const first = open(t, dir);
  first.store.close();
  const second = open(t, dir);
  assert.equal(readFileSync(second.store.lockFile, 'utf8').trim(), String(process.pid));
});

test('a failed write is counted, reported and retried with backoff until it succeeds; only then is it saved', async (t) => {
  const dir = tempDir(t);
  const s = open(t, dir);
  s.store.load();
  mkdirSync(s.store.file); // state.json is a directory: rename onto it fails with EISDIR
  assert.equal(s.store.flush(), false);
  assert.equal(s.saves(), 0, 'a failed write is not reported as saved');
  assert.equal(s.health.at(-1)?.state, 'failed');
  assert.match(s.health.at(-1)!.message, new RegExp(`cannot save ${s.store.file}: EISDIR.*next try in 20 ms`));
  await until(async () => (await s.failures()) >= 3, 'three failed writes');
  assert.match(s.health.at(-1)!.message, /next try in 80 ms/, 'the backoff doubles up to its cap');
  assert.equal(s.saves(), 0);
  assert.deepEqual(
    readdirSync(dir).filter((f) => f.endsWith('.tmp')),
    [],
    'failed writes leave no temp file behind',
  );

  rmSync(s.store.file, { recursive: true });
  await until(() => s.saves() === 1, 'the retry succeeds');
  assert.equal(s.health.at(-1)?.state, 'ok');
  assert.match(s.health.at(-1)!.message, /again after \d+ failed writes/);
  assert.equal((JSON.parse(readFileSync(s.store.file, 'utf8')) as PersistedState).version, 1);
  const n = await s.failures();
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(await s.failures(), n, 'no retries after a success');
});

test('a clean stop writes at once even while a failed write waits for its retry', (t) => {
  const dir = tempDir(t);
  const s = open(t, dir, { retry: { firstMs: 60_000, maxMs: 60_000 } });
  s.store.load();
  mkdirSync(s.store.file);
  assert.equal(s.store.flush(), false);
  rmSync(s.store.file, { recursive: true });
  assert.equal(s.store.flush(), true);
  assert.equal(s.saves(), 1);
  assert.ok(existsSync(s.store.file));
});

test('schedule() during a backoff waits for the retry instead of writing sooner', async (t) => {
  const dir = tempDir(t);
  const s = open(t, dir, { retry: { firstMs: 60_000, maxMs: 60_000 }, delayMs: 1 });
  s.store.load();
  mkdirSync(s.store.file);
  s.store.flush();
  s.store.schedule();
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(await s.failures(), 1);
});

test('a deleted state directory is made again at the next write, with its boot-id file and a lock of its own', (t) => {
  const dir = tempDir(t);
  const s = open(t, dir);
  s.store.load();
  assert.ok(s.store.flush());
  rmSync(dir, { recursive: true });
  assert.ok(s.store.flush(), 'the write checks the lock first and makes the directory again');
  assert.equal(readFileSync(path.join(dir, 'boot-id'), 'utf8').trim(), BOOT);
  assert.throws(() => open(t, dir), StateDirLockedError, 'the new lock file is held');
});

test('a deleted state directory is made again while idle, so an agent started later is refused', async (t) => {
  const dir = tempDir(t);
  const s = open(t, dir, { checkMs: 20 });
  s.store.load();
  assert.ok(s.store.flush());
  rmSync(dir, { recursive: true });
  await until(() => existsSync(path.join(dir, 'state.json')), 'the idle check makes the directory again');
  assert.throws(() => open(t, dir), StateDirLockedError);
});

test('a directory deleted and taken by a second store: the first writes nothing, names the holder, and takes it back once free', async (t) => {
  const dir = tempDir(t);
  const first = open(t, dir, { checkMs: 0 });
  first.store.load();
  assert.ok(first.store.flush());
  rmSync(dir, { recursive: true });
  // The second starts before the first's next write: the directory is new, its lock free.
  const second = open(t, dir, { collect: () => ({ version: 1, kmsgCursor: { bootId: 'second', seq: 1 } }) });
  second.store.load();
  assert.ok(second.store.flush());
  const seconds = readFileSync(second.store.file, 'utf8');

  assert.equal(first.store.flush(), false, 'the first does not write');
  assert.equal(readFileSync(second.store.file, 'utf8'), seconds, "the second's state.json is untouched");
  assert.match(first.health.at(-1)!.message, new RegExp(`in use by another Vigil agent \\(pid ${process.pid}`));
  assert.equal(first.health.at(-1)!.state, 'failed');

  second.store.close();
  await until(() => first.saves() === 2, "the first takes the directory back once the second's lock is gone");
  assert.notEqual(readFileSync(first.store.file, 'utf8'), seconds);
});

test('temp files get names of their own, so two writers never share one', (t) => {
  const dir = tempDir(t);
  const s = open(t, dir);
  s.store.load();
  // A stale temp file with the old fixed name (or another writer's) does not block this writer.
  writeFileSync(`${s.store.file}.tmp`, 'half');
  assert.ok(s.store.flush());
  assert.equal(readFileSync(`${s.store.file}.tmp`, 'utf8'), 'half');
});

test('state lost on the same boot: load() starts the kernel log at the start of the ring', (t) => {
  const dir = tempDir(t);
  const first = open(t, dir);
  assert.equal(first.store.load().state, undefined, 'a first start in a directory has no state and no rewind');
  assert.ok(first.store.flush());
  first.store.close();
  rmSync(first.store.file);

  const second = open(t, dir);
  const loaded = second.store.load();
  assert.equal(loaded.lostThisBoot, true);
  assert.deepEqual(loaded.state, { version: 1, kmsgCursor: { bootId: BOOT, seq: -1 } });
  assert.match(loaded.warning ?? '', /missing.*start of the ring/);
});

test('a corrupt state file on the same boot is set aside and the kernel log is read from the start of the ring', (t) => {
  const dir = tempDir(t);
  const first = open(t, dir);
  first.store.load();
  first.store.close();
  writeFileSync(path.join(dir, 'state.json'), '{"version":1}}');

  const second = open(t, dir);
  const loaded = second.store.load();
  assert.equal(loaded.lostThisBoot, true);
  assert.equal(loaded.state?.kmsgCursor?.seq, -1);
  assert.match(loaded.warning ?? '', /unreadable.*moved to .*start of the ring/);
  assert.ok(readdirSync(dir).some((f) => f.startsWith('state.json.corrupt-')));
});

test('state lost after a reboot keeps the lookback (no rewind)', (t) => {
  const dir = tempDir(t);
  writeFileSync(path.join(dir, 'boot-id'), 'an-earlier-boot\n');
  const s = open(t, dir);
  const loaded = s.store.load();
  assert.equal(loaded.state, undefined);
  assert.equal(loaded.lostThisBoot, undefined);
  assert.equal(readFileSync(path.join(dir, 'boot-id'), 'utf8').trim(), BOOT, 'this boot is recorded');
});

test('a saved state on the same boot is loaded as it is', (t) => {
  const dir = tempDir(t);
  const first = open(t, dir);
  first.store.load();
  first.store.flush();
  first.store.close();
  const loaded = open(t, dir).store.load();
  assert.equal(loaded.lostThisBoot, undefined);
  assert.equal(loaded.state?.kmsgCursor?.seq, 1);
});

test('readBootId fails loudly, naming the file, when the boot id cannot be read', (t) => {
  const dir = tempDir(t);
  const missing = path.join(dir, 'boot_id');
  assert.throws(
    () => readBootId(missing),
    (err: unknown) => err instanceof Error && err.message.includes(missing),
  );
  writeFileSync(missing, '\n');
  assert.throws(() => readBootId(missing), /empty/);
  writeFileSync(missing, 'abc\n');
  assert.equal(readBootId(missing), 'abc');
});

/** A ring of two records, one an hour old and one a second old, read the way /dev/kmsg reads. */
function twoRecordRing(): KmsgIo {
  const uptimeUs = 7_200_000_000;
  const recs = [`3,0,${uptimeUs - 3_600_000_000},-;old fault\n`, `3,1,${uptimeUs - 1_000_000},-;recent line\n`];
  let pos = 0;
  return {
    open: () => 7,
    read: (_fd, buf) => {
      const r = recs[pos++];
      if (r === undefined) throw Object.assign(new Error('EAGAIN'), { code: 'EAGAIN' });
      return buf.write(r);
    },
    close: () => undefined,
  };
}

test('the cursor load() gives for state lost on the same boot makes the reader deliver the whole ring', async (t) => {
  const read = async (cursor?: { bootId: string; seq: number }) => {
    const got: string[] = [];
    const r = new KmsgReader({
      io: twoRecordRing(),
      bootId: BOOT,
      uptimeMs: () => 7_200_000,
      lookbackMs: 60_000,
      wait: 'interval',
      ...(cursor ? { cursor } : {}),
      onRecords: (recs) => got.push(...recs.map((x) => x.message)),
    });
    t.after(() => r.stop());
    r.start();
    await r.stop();
    return got;
  };
  assert.deepEqual(await read(), ['recent line'], 'without a cursor only the lookback is read');
  assert.deepEqual(await read({ bootId: BOOT, seq: -1 }), ['old fault', 'recent line']);
});
