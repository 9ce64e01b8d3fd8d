import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { WorkQueue, type QueueClock, type RunRecord } from '../../src/scheduler/index.ts';
import { abortReason } from '../../src/util/index.ts';

/** A manual clock: timers fire only when the test advances time. */
class FakeClock implements QueueClock {
  t = 0;
  private seq = 0;
  private timers = new Map<number, { at: number; fn: () => void }>();
  now = () => this.t;
  setTimeout = (fn: () => void, ms: number) => {
    const id = ++this.seq;
    this.timers.set(id, { at: this.t + ms, fn });
    return id;
  };
  clearTimeout = (h: unknown) => void this.timers.delete(h as number);
  /** Moves time forward, firing due timers in order and letting async work settle between them. */
  async advance(ms: number): Promise<void> {
    const end = this.t + ms;
    for (;;) {
      await settle();
      let next: [number, { at: number; fn: () => void }] | undefined;
      for (const e of this.timers) if (e[1].at <= end && (!next || e[1].at < next[1].at)) next = e;
      if (!next) break;
      this.timers.delete(next[0]);
      this.t = Math.max(this.t, next[1].at);
      next[1].fn();
    }
    this.t = end;
    await settle();
  }
}

const settle = async () => {
  for (let i = 0; i < 5; i++) await new Promise<void>((r) => setImmediate(r));
};

/** Cycles through fixed "random" values. */
const sequence = (...values: number[]) => {
  let i = 0;
  return () => values[i++ % values.length];
};

test('first runs are spread by startup jitter and every later run is jittered', async () => {
  const clock = new FakeClock();
  const starts: Record<string, number[]> = { a: [], b: [], c: [] };
  // add() draws a, b, c startup offsets; each reschedule draws the next value.
  const q = new WorkQueue({ clock, random: sequence(0.1, 0.5, 0.9, 1, 0, 0.75), startupJitterMs: 1000, jitter: 0.1 });
  for (const name of ['a', 'b', 'c']) {
    q.add({ name, intervalMs: 1000, budgetMs: 100, run: () => Promise.resolve(void starts[name].push(clock.now())) });
  }
  assert.deepEqual(q.dueTimes(), { a: 100, b: 500, c: 900 });
  q.start();
  await clock.advance(2500);
  await q.stop();
  assert.deepEqual(starts.a.slice(0, 2), [100, 100 + 1000 + 100]); // random 1 → +10 %
  assert.deepEqual(starts.b.slice(0, 2), [500, 500 + 1000 - 100]); // random 0 → -10 %
  assert.deepEqual(starts.c.slice(0, 2), [900, 900 + 1000 + 50]); // random 0.75 → +5 %
  const gaps = Object.values(starts).map((s) => s[1] - s[0]);
  assert.equal(new Set(gaps).size, 3, 'each check got its own jitter');
});

test('a busy queue skips missed slots instead of catching up', async () => {
  const clock = new FakeClock();
  let runs = 0;
  const q = new WorkQueue({ clock, random: () => 0.5, startupJitterMs: 0, jitter: 0 });
  q.add({ name: 'a', intervalMs: 100, budgetMs: 50, run: () => Promise.resolve(void runs++) });
  q.start();
  await clock.advance(0);
  assert.equal(runs, 1);
  clock.t += 1000; // the process was stalled for ten intervals
  await clock.advance(0);
  assert.equal(runs, 2, 'one run for the stall, not ten');
  await clock.advance(100);
  assert.equal(runs, 3);
  await q.stop();
});

test('two checks never run at once (real timers)', async () => {
  let active = 0;
  let maxActive = 0;
  const count: Record<string, number> = {};
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  const q = new WorkQueue({
    startupJitterMs: 5,
    jitter: 0.5,
    onRun: (r) => {
      count[r.name] = (count[r.name] ?? 0) + 1;
      if (['a', 'b', 'c'].every((n) => (count[n] ?? 0) >= 3)) done();
    },
  });
  for (const name of ['a', 'b', 'c']) {
    q.add({
      name,
      // A budget far above the work, so no run is cut off (a cut-off run is abandoned, not awaited).
      intervalMs: 40,
      budgetMs: 40,
      run: async () => {
        maxActive = Math.max(maxActive, ++active);
        await new Promise((r) => setTimeout(r, 1));
        active--;
      },
    });
  }
  q.start();
  await finished;
  await q.stop();
  assert.equal(maxActive, 1);
});

test('an overrunning check is cut off, reported, and not started again while stuck', async () => {
  const timeouts: string[] = [];
  const records: RunRecord[] = [];
  let stuckStarts = 0;
  let release!: () => void;
  const stuck = new Promise<void>((r) => (release = r));
  let done!: () => void;
  const enough = new Promise<void>((r) => (done = r));
  const q = new WorkQueue({
    startupJitterMs: 1,
    onTimeout: (name) => timeouts.push(name),
    onRun: (r) => {
      records.push(r);
      if (records.filter((x) => x.name === 'fine').length >= 5) done();
    },
  });
  let ownTimeout = 0;
  q.add({
    name: 'stuck',
    intervalMs: 10,
    budgetMs: 5,
    run: async () => {
      stuckStarts++;
      await stuck; // ignores its signal
    },
    onTimeout: () => ownTimeout++,
  });
  q.add({ name: 'fine', intervalMs: 10, budgetMs: 10, run: () => Promise.resolve('ok' as const) });
  q.start();
  await enough;
  assert.equal(stuckStarts, 1, 'no second run while the first is abandoned');
  assert.equal(records.find((r) => r.name === 'stuck')?.status, 'timeout');
  assert.ok(timeouts.includes('stuck'));
  assert.ok(ownTimeout >= 1);
  release();
  await new Promise((r) => setTimeout(r, 60));
  await q.stop();
  assert.ok(stuckStarts >= 2, 'runs again once the abandoned run settled');
});

test('a check that honours its signal ends as timeout; throwing is error; metrics are kept', async () => {
  const registry = new Registry();
  const q = new WorkQueue({ registry, startupJitterMs: 1 });
  q.add({
    name: 'slow',
    intervalMs: 1000,
    budgetMs: 10,
    run: (signal) => new Promise((_, reject) => signal.addEventListener('abort', () => reject(abortReason(signal)))),
  });
  q.add({
    name: 'broken',
    intervalMs: 1000,
    budgetMs: 100,
    run: () => Promise.reject(new Error('boom')),
  });
  q.add({ name: 'faulty', intervalMs: 1000, budgetMs: 100, run: () => Promise.resolve('fault' as const) });
  const recs = await q.runAll();
  assert.deepEqual(
    recs.map((r) => [r.name, r.status]),
    [
      ['slow', 'timeout'],
      ['broken', 'error'],
      ['faulty', 'fault'],
    ],
  );
  assert.ok(recs.every((r) => r.durationMs >= 0 && r.cpuMs >= 0));
  const text = await registry.metrics();
  assert.match(text, /vigil_check_duration_seconds\{check="slow"\} /);
  assert.match(text, /vigil_check_cpu_seconds\{check="broken"\} /);
  assert.match(text, /vigil_check_last_result\{check="faulty",result="fault"\} 1/);
  assert.match(text, /vigil_check_last_result\{check="faulty",result="ok"\} 0/);
  assert.match(text, /vigil_check_runs_total\{check="slow",result="timeout"\} 1/);
});

test('add() rejects duplicates and budgets above the interval; remove() unschedules', () => {
  const q = new WorkQueue();
  q.add({ name: 'x', intervalMs: 100, budgetMs: 100, run: () => Promise.resolve(undefined) });
  assert.throws(() => q.add({ name: 'x', intervalMs: 100, budgetMs: 10, run: () => Promise.resolve(undefined) }), /already/);
  assert.throws(() => q.add({ name: 'y', intervalMs: 100, budgetMs: 200, run: () => Promise.resolve(undefined) }), /budget/);
  assert.equal(q.remove('x'), true);
  assert.deepEqual(q.names(), []);
});
