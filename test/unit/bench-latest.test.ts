import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { mergeLatest, newRun, type Measured } from '../../bench/latest.ts';

interface Latest {
  measured: Record<string, Measured>;
  runs: Record<string, { benches: string[] }>;
  measured_at: string;
  [k: string]: unknown;
}

function withFile(fn: (file: string) => void): void {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-latest-'));
  try {
    fn(path.join(dir, 'latest.json'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const read = (file: string) => JSON.parse(readFileSync(file, 'utf8')) as Latest;

test('every key one run writes carries that run and its time; keys from before are marked legacy', () => {
  withFile((file) => {
    writeFileSync(file, JSON.stringify({ old_ms: 5, measured_at: '2026-01-01T00:00:00.000Z' }));
    const run = newRun(['a', 'b']);
    mergeLatest({ a_ms: 1.23456 }, run, file);
    mergeLatest({ b_per_s: 10, a_label: 'x' }, run, file);
    const l = read(file);
    assert.equal(l.a_ms, 1.235, 'rounded to 3 decimals as before');
    assert.equal(l.old_ms, 5, 'figures from other runs are kept');
    assert.deepEqual(l.measured.old_ms, { at: '2026-01-01T00:00:00.000Z', run: 'legacy' });
    for (const k of ['a_ms', 'b_per_s', 'a_label']) assert.equal(l.measured[k].run, run.id, k);
    assert.ok(Date.parse(l.measured.b_per_s.at) >= Date.parse(l.measured.a_ms.at));
    assert.deepEqual(l.runs[run.id].benches, ['a', 'b']);
    assert.deepEqual(Object.keys(l.runs), [run.id], 'no run without a key');
  });
});

test('a second run replaces only its own keys and a run that owns no key any more is dropped', () => {
  withFile((file) => {
    const first = newRun(['x']);
    mergeLatest({ x_ms: 1, y_ms: 2 }, first, file);
    const second = newRun(['x']);
    // Another bench wrote to the file between this run's start and its write: its key survives.
    const third = newRun(['z']);
    mergeLatest({ z_ms: 9 }, third, file);
    mergeLatest({ x_ms: 3 }, second, file);
    let l = read(file);
    assert.equal(l.measured.x_ms.run, second.id);
    assert.equal(l.measured.y_ms.run, first.id);
    assert.equal(l.z_ms, 9);
    assert.deepEqual(new Set(Object.keys(l.runs)), new Set([first.id, second.id, third.id]));
    const fourth = newRun(['y']);
    mergeLatest({ y_ms: 4 }, fourth, file);
    l = read(file);
    assert.ok(!(first.id in l.runs), 'the first run owns nothing now');
    assert.throws(() => mergeLatest({ measured: 1 }, fourth, file), /reserved/);
  });
});
