/**
 * The kmsg read thread (a worker thread) runs a user rule's keep pattern on native RE2 when the
 * main thread does, and on re2js otherwise; either way it keeps the lines the rule matches and
 * sheds the rest (issue #22, point 7). Real /dev/kmsg (needs root).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { accessSync, closeSync, constants, openSync } from 'node:fs';
import { writeKmsg } from '../helpers/agent-process.ts';
import { createRequire } from 'node:module';
import { UserRegex } from '../../src/config/index.ts';
import { ReadThread, type ReadItem } from '../../src/sources/index.ts';

function skip(): string | false {
  try {
    accessSync('/dev/kmsg', constants.R_OK | constants.W_OK);
  } catch {
    return '/dev/kmsg is not readable and writable here';
  }
  try {
    createRequire(import.meta.url)('re2');
  } catch {
    return 'native re2 is not installed (an optional dependency)';
  }
  return false;
}

const TAG = `vigil-native-keep-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

async function until(f: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!f()) {
    if (Date.now() > end) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test(
  'the read thread runs a user rule on native RE2 (and one that asks for no speed on re2js), keeping every line either matches and shedding the rest',
  { skip: skip() },
  async () => {
    const native = UserRegex.compile(`${TAG} (.*a){20}x`, '', { native: true });
    const js = UserRegex.compile(`${TAG} \\Qb/(?<\\E(\\d+)`);
    assert.equal(native.engine, 're2');
    const fd = openSync('/dev/kmsg', constants.O_RDONLY | constants.O_NONBLOCK);
    const mine: string[] = [];
    let shed = 0;
    let failed: Error | undefined;
    const limits = { highRecords: 1, highChars: 1 << 20, hardRecords: 100_000, hardChars: 64 << 20 };
    const t = new ReadThread(
      fd,
      {
        onItems: (items: ReadItem[]) => {
          for (const it of items) {
            if (typeof it === 'number') shed++;
            else if (it.includes(TAG)) mine.push(it.slice(it.indexOf(';') + 1).split('\n')[0]); // the record's text, without its newline
          }
        },
        onError: () => {},
        onFailed: (err) => (failed = err),
      },
      { keep: [native, js], limits },
    );
    try {
      await until(() => t.keepEngines !== undefined, 10_000);
      assert.deepEqual(t.keepEngines, ['re2', 're2js']);
      // Past the high mark from the first record on (the main thread reports nothing consumed), so
      // the thread tests every record: noise goes as a number, matches as text.
      const hits = [`${TAG} ${'a'.repeat(41)}x`, `${TAG} b/(?<42`];
      for (let i = 0; i < 60; i++) writeKmsg(i === 20 ? hits[0] : i === 40 ? hits[1] : `${TAG} ${'a'.repeat(300)}`, 6);
      await until(() => hits.every((h) => mine.includes(h)), 15_000);
      assert.equal(failed, undefined);
      assert.ok(shed >= 50, `noise was shed (${shed} records, ${mine.length} of ours delivered)`);
    } finally {
      await t.close();
      closeSync(fd);
    }
  },
);
