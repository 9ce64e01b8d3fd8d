/**
 * Issue #22, point 7, in the kmsg read thread: when the main thread falls behind, the thread sheds
 * records that no rule can match, testing each one against every pattern that can raise a finding,
 * user rules included. Those run on RE2 there too, so a user rule that backtracks catastrophically
 * neither stalls the thread nor lets a matching line be shed. Real /dev/kmsg (needs root).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { accessSync, constants } from 'node:fs';
import { writeKmsg } from '../helpers/agent-process.ts';
import { UserRegex } from '../../src/config/index.ts';
import { type KmsgRecord, KmsgReader } from '../../src/sources/index.ts';

function usable(): string | false {
  try {
    accessSync('/dev/kmsg', constants.R_OK | constants.W_OK);
    return false;
  } catch {
    return '/dev/kmsg is not readable and writable here';
  }
}

const TAG = `vigil-keep-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

async function until(f: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!f()) {
    if (Date.now() > end) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test(
  'under load the read thread sheds noise, keeps every line a catastrophically backtracking user rule matches, and does not stall',
  { skip: usable() },
  async () => {
    const mine: KmsgRecord[] = [];
    const limits = { highRecords: 8, highChars: 1 << 20, hardRecords: 100_000, hardChars: 64 << 20 };
    const keep = [UserRegex.compile(`${TAG} (.*a){20}x`)];
    const r = new KmsgReader({
      lookbackMs: 0,
      wait: 'thread',
      keep,
      limits,
      onRecords: (recs) => mine.push(...recs.filter((x) => x.message.includes(TAG))),
    });
    r.start();
    try {
      assert.equal(r.waitMode, 'thread');
      const hits = [100, 200, 299].map((i) => `${TAG} ${'a'.repeat(40 + (i % 7))}x`);
      // One synchronous loop: the main thread takes nothing the thread posts until the end, so the
      // thread tests the noise, 300 'a's without the "x" (never ends on a backtracking engine).
      for (let i = 0; i < 300; i++) {
        const h = [100, 200, 299].indexOf(i);
        writeKmsg(h >= 0 ? hits[h] : `${TAG} ${'a'.repeat(300)}`, 6);
      }
      await until(() => mine.filter((m) => m.message.endsWith('x')).length === 3, 15_000);
      assert.deepEqual(
        mine.filter((m) => m.message.endsWith('x')).map((m) => m.message),
        hits,
        'every line the rule matches is delivered, in order',
      );
      const noise = mine.length - 3;
      assert.ok(noise < 100, `most noise was shed (${noise} of 297 delivered)`);
      assert.ok(r.recordsShed >= 297 - noise, `shed ${r.recordsShed}`);
    } finally {
      await r.stop();
    }
  },
);
