/**
 * The agent's event-loop lag gauges: prom-client's names, values = how late a periodic timer ran
 * (Node's monitorEventLoopDelay records whole timer intervals, the period included).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry, collectDefaultMetrics } from 'prom-client';
import { EVENT_LOOP_LAG_NAMES, LagSampler, UNUSED_RESOLUTION_MS, lagStats, registerEventLoopLag } from '../../src/app/index.ts';

test('each tick records how late it ran past the period, never below zero', () => {
  let now = 0;
  const sampler = new LagSampler(1000, () => now);
  for (const t of [1000, 2000.5, 3300.5, 4299]) {
    now = t;
    sampler.tick();
  }
  const got = sampler.take();
  assert.deepEqual(
    got.map((v) => Math.round(v * 1e6) / 1e6),
    [0, 0.0005, 0.3, 0],
  );
  // take() hands each sample out once.
  assert.deepEqual(sampler.take(), []);
});

test('lag statistics: min, max, mean, spread and nearest-rank percentiles; none without samples', () => {
  assert.equal(lagStats([]), undefined);
  const samples = Array.from({ length: 100 }, (_, i) => (i + 1) / 1000);
  const s = lagStats(samples)!;
  assert.equal(s.min, 0.001);
  assert.equal(s.max, 0.1);
  assert.equal(s.p50, 0.05);
  assert.equal(s.p90, 0.09);
  assert.equal(s.p99, 0.099);
  assert.ok(Math.abs(s.mean - 0.0505) < 1e-12, String(s.mean));
  assert.ok(Math.abs(s.stddev - 0.028866) < 1e-6, String(s.stddev));
});

test("the gauges replace prom-client's under the same names, one metric each", async () => {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'x_', eventLoopMonitoringPrecision: UNUSED_RESOLUTION_MS });
  const before = (await registry.getMetricsAsJSON()).map((m) => m.name).sort();
  registerEventLoopLag(registry, 'x_', 20);
  const after = (await registry.getMetricsAsJSON()).map((m) => m.name).sort();
  assert.deepEqual(after, before);
  for (const n of EVENT_LOOP_LAG_NAMES) assert.ok(after.includes(`x_${n}`), n);
});

test('a blocked event loop shows as lag past the period; a scrape with no new sample keeps the last values', async () => {
  const registry = new Registry();
  registerEventLoopLag(registry, 'y_', 20);
  const read = async (name: string) => (await registry.getSingleMetric(`y_${name}`)!.get()).values[0]?.value;
  await new Promise((r) => setTimeout(r, 100));
  await registry.metrics();
  const end = Date.now() + 300;
  while (Date.now() < end) {
    // Busy: the 20 ms timer cannot fire for 300 ms.
  }
  await new Promise((r) => setTimeout(r, 50));
  await registry.metrics();
  const max = await read('nodejs_eventloop_lag_max_seconds');
  assert.ok(max >= 0.25, `max ${max}`);
  // Nothing was recorded since (no turn of the loop in between): the values stay.
  await registry.metrics();
  assert.equal(await read('nodejs_eventloop_lag_max_seconds'), max);
});
