/** Persisted GPU counter baselines: what is reused after a restart, and what is dropped. */
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { exportBaselines, importBaselines, initialCheckState } from '../../src/monitors/index.ts';

const HOUR = 3_600_000;
const now = 1_800_000_000_000;

function saved(at: number) {
  const s = initialCheckState();
  s.ecc = 5;
  s.eccAt = at;
  s.eccCorrected = { value: 70, at };
  s.replay = { value: 900, at };
  s.nvlinkCounters = { at, perLink: [[1, 2, 3, 4], null] };
  const aer = new Map([['0000:00:01.0', [{ correctable: 4, nonfatal: 0, fatal: 0, at }]]]);
  return exportBaselines('boot-a', new Map([['GPU-1', s]]), aer);
}

test('baselines from this boot within the window come back as they were saved', () => {
  const p = JSON.parse(JSON.stringify(saved(now - HOUR))) as unknown; // through the state file's JSON
  const r = importBaselines(p, 'boot-a', now, 24 * HOUR);
  assert.equal(r.note, null);
  const s = r.states.get('GPU-1')!;
  assert.deepEqual(
    [s.ecc, s.eccAt, s.eccCorrected, s.replay, s.nvlinkCounters],
    [5, now - HOUR, { value: 70, at: now - HOUR }, { value: 900, at: now - HOUR }, { at: now - HOUR, perLink: [[1, 2, 3, 4], null] }],
  );
  assert.deepEqual(r.aer.get('0000:00:01.0'), [{ correctable: 4, nonfatal: 0, fatal: 0, at: now - HOUR }]);
  // Link states and clock streaks are not counters: they start afresh.
  assert.deepEqual([s.nvlinkBaseline, s.clockStreak], [[], { slowdown: 0, thermal: 0, power: 0 }]);
});

test('baselines older than the window, from another boot or malformed are dropped, with a note', () => {
  const stale = importBaselines(saved(now - 25 * HOUR), 'boot-a', now, 24 * HOUR);
  assert.equal(stale.states.get('GPU-1')?.ecc, null);
  assert.equal(stale.states.get('GPU-1')?.replay, null);
  assert.equal(stale.aer.size, 0);
  assert.match(stale.note ?? '', /5 persisted GPU counter baselines were older than the window/);
  const otherBoot = importBaselines(saved(now - HOUR), 'boot-b', now, 24 * HOUR);
  assert.equal(otherBoot.states.size, 0);
  assert.match(otherBoot.note ?? '', /another boot/);
  const bad = importBaselines({ bootId: 'boot-a', gpus: { 'GPU-1': { ecc: { value: -1, at: 1 } } } }, 'boot-a', now, HOUR);
  assert.equal(bad.states.size, 0);
  assert.match(bad.note ?? '', /ignored/);
  assert.deepEqual(importBaselines(undefined, 'boot-a', now, HOUR), { states: new Map(), aer: new Map(), note: null });
});
