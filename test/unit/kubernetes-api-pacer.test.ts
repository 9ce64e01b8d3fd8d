/**
 * ApiPacer: a writer's request deadline and retry wait follow the API server's latency, so an
 * overloaded server is not handed a retry of every request it is still working on.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ApiPacer, KubeApiError, toFailure } from '../../src/kube/index.ts';

/** A pacer whose clock moves only when a request "takes" time, and whose jitter is fixed. */
function pacer(random = 0.5) {
  let t = 0;
  const p = new ApiPacer(10_000, { baseMs: 500, maxMs: 30_000 }, { random: () => random, now: () => t });
  /** Runs one request that takes `ms` and then fails with `err` (or answers when err is undefined). */
  const run = async (ms: number, err?: Error) => {
    try {
      await p.request('GET node', () => {
        t += ms;
        return err === undefined ? Promise.resolve('ok') : Promise.reject(err);
      });
      return undefined;
    } catch (e) {
      return toFailure(e);
    }
  };
  return { p, run };
}

const timeout = () => new DOMException('The operation was aborted due to timeout', 'TimeoutError');

test("a request that times out doubles the next deadline, up to the API server's own 60 s; answers halve it back to the base", async () => {
  const { p, run } = pacer();
  assert.equal(p.timeoutMs, 10_000);
  const f = await run(10_000, timeout());
  assert.equal(f?.timedOut, true);
  assert.match(f?.message ?? '', /GET node timed out after 10000 ms/);
  assert.equal(p.timeoutMs, 20_000);
  await run(20_000, timeout());
  await run(40_000, timeout());
  assert.equal(p.timeoutMs, 60_000, 'capped at kube-apiserver --request-timeout');
  await run(60_000, timeout());
  assert.equal(p.timeoutMs, 60_000);
  await run(100);
  assert.equal(p.timeoutMs, 30_000);
  await run(100);
  await run(100);
  await run(100);
  assert.equal(p.timeoutMs, 10_000, 'never below the configured deadline');
});

test('a 504 from the API server lengthens the deadline like a timeout; a 429 or 500 does not', async () => {
  const { p, run } = pacer();
  await run(50, new KubeApiError(429, '{}', {}, 'PATCH'));
  await run(50, new KubeApiError(500, '{}', {}, 'PATCH'));
  assert.equal(p.timeoutMs, 10_000);
  await run(9_000, new KubeApiError(504, '{}', {}, 'PATCH'));
  assert.equal(p.timeoutMs, 20_000);
});

test('after a timeout, 429 or 5xx the retry waits at least about as long as the failed try took, not the 0.5 s backoff step', async () => {
  for (const [err, took] of [
    [timeout(), 10_000],
    [new KubeApiError(429, '{}', {}, 'PATCH'), 4_000],
    [new KubeApiError(503, '{}', {}, 'PATCH'), 6_000],
  ] as const) {
    const { p, run } = pacer(0.5);
    const f = await run(took, err);
    assert.ok(f);
    // Jitter 0.5 draws three quarters of the try's time.
    assert.equal(p.retryDelay(f), took * 0.75, `${f.status} ${f.message}`);
  }
});

test('a refusal or an unreachable server retries on the plain backoff; a Retry-After is honoured as sent', async () => {
  const { p, run } = pacer(1);
  const refused = await run(5_000, new KubeApiError(403, '{}', {}, 'PATCH'));
  assert.ok(refused);
  assert.equal(p.retryDelay(refused), 500, 'the first backoff step, however long the refusal took');
  const down = await run(5_000, new Error('connect ECONNREFUSED 127.0.0.1:6443'));
  assert.ok(down);
  assert.equal(down.timedOut, undefined);
  assert.equal(p.retryDelay(down), 1_000, 'the second step');
  p.succeeded();
  const busy = await run(9_000, new KubeApiError(429, '{}', { 'retry-after': '2' }, 'PATCH'));
  assert.ok(busy);
  assert.equal(p.retryDelay(busy), 2_000);
  const next = await run(1, new KubeApiError(404, '{}', {}, 'PATCH'));
  assert.ok(next);
  assert.equal(p.retryDelay(next), 500, 'backoff starts again after a success');
});
