/**
 * The parts of NodeDiagnostic handling that need no cluster: the spec check, URL redaction, the
 * bounded store of kept bundles, the uploader's retries against a local HTTP server, and the
 * diagnostics configuration section.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { Registry } from 'prom-client';
import { parseConfig } from '../../src/config/load.ts';
import { parseSpec, redactUrl } from '../../src/diagnostics/node-diagnostic/resource.ts';
import { BundleStore } from '../../src/diagnostics/node-diagnostic/store.ts';
import { uploadFile } from '../../src/diagnostics/node-diagnostic/upload.ts';
import { expandUrl } from '../../src/diagnostics/node-diagnostic/controller.ts';

test('a spec is checked like the CRD does, naming the field at fault', () => {
  const ok = parseSpec({ categories: ['kernel', 'kernel', 'gpu'] });
  assert.ok(ok.ok);
  assert.deepEqual(ok.request, { categories: ['kernel', 'gpu'], delivery: { kind: 'node' } });
  const all = parseSpec(undefined);
  assert.ok(all.ok && all.request.categories.length === 7, 'no categories: every category');
  assert.deepEqual(parseSpec({ categories: ['kernel', 'disk'] }), {
    ok: false,
    error: 'spec.categories[1]: "disk" is not one of kernel, gpu, vigil, network, storage, runtime, system',
  });
  const ftp = parseSpec({ delivery: 'ftp://x/y' });
  assert.ok(!ftp.ok && /^spec\.delivery: ftp: URLs are not supported/.test(ftp.error));
  const since = parseSpec({ since: 'yesterday' });
  assert.ok(!since.ok && since.error.startsWith('spec.since:'));
  const up = parseSpec({ delivery: 'https://b.example/k?sig=1' });
  assert.ok(up.ok && up.request.delivery.kind === 'upload');
});

test('URLs are redacted of query strings and user info wherever they are shown', () => {
  assert.equal(redactUrl('https://u:p@bucket.example/a.tar.gz?X-Amz-Signature=abc#f'), 'https://bucket.example/a.tar.gz?…');
  assert.equal(redactUrl('http://h/x'), 'http://h/x');
  assert.equal(redactUrl('not a url?secret=1'), 'not a url?…');
  assert.equal(
    expandUrl('https://b/{node}/{time}-{name}', 'n 1', 'a.tar.gz', Date.UTC(2026, 0, 2, 3, 4, 5)),
    'https://b/n%201/20260102T030405Z-a.tar.gz',
  );
});

test('kept bundles are bounded by count, bytes and age; the newest stays; only names the store made are served', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-store-'));
  try {
    let now = Date.UTC(2026, 0, 1);
    const store = new BundleStore(
      dir,
      { maxCount: 2, maxBytes: 250, retentionMs: 3_600_000 },
      new Registry(),
      pino({ level: 'silent' }),
      () => now,
    );
    const add = (bytes: number) => {
      const { name, partial } = store.reserve('Node_A');
      writeFileSync(partial, Buffer.alloc(bytes));
      const t = new Date(now);
      utimesSync(partial, t, t);
      now += 1000;
      return store.keep(name, partial).name;
    };
    const a = add(100);
    assert.match(a, /^node-a-20260101t000000z-[0-9a-f]{16}\.tar\.gz$/);
    const b = add(100);
    const c = add(100);
    assert.deepEqual(
      store.list().map((x) => x.name),
      [c, b],
      'count limit: the oldest goes',
    );
    const big = add(400);
    assert.deepEqual(
      store.list().map((x) => x.name),
      [big],
      'byte limit: the newest is kept even alone over it',
    );
    now += 2 * 3_600_000;
    store.prune();
    assert.deepEqual(store.list(), [], 'retention: gone after the retention time');
    assert.equal(store.get('../state.json'), undefined);
    assert.equal(store.get(`${big}/../x`), undefined);
    assert.equal(store.get('other.tar.gz'), undefined);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

async function server(answer: (n: number) => number): Promise<{ url: string; bodies: number[]; close: () => Promise<void> }> {
  const bodies: number[] = [];
  let n = 0;
  const s = http.createServer((req, res) => {
    let bytes = 0;
    req.on('data', (d: Buffer) => (bytes += d.length));
    req.on('end', () => {
      bodies.push(bytes);
      res.writeHead(answer(++n), { 'content-type': 'text/plain' }).end('nope');
    });
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(s.address() as AddressInfo).port}/b.tar.gz?sig=secret`,
    bodies,
    close: () => new Promise<void>((r) => s.close(() => r())),
  };
}

test('uploads retry 5xx with backoff and stop at once on a refusal, never naming the signature', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-upload-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'b.tar.gz');
  writeFileSync(file, Buffer.alloc(70_000, 1));

  const flaky = await server((n) => (n < 3 ? 503 : 200));
  t.after(() => flaky.close());
  const retries: string[] = [];
  const ok = await uploadFile(file, flaky.url, { attempts: 5, backoff: { baseMs: 10, maxMs: 20 }, onRetry: (_a, e) => retries.push(e) });
  assert.deepEqual({ ok: ok.ok, attempts: ok.attempts }, { ok: true, attempts: 3 });
  assert.deepEqual(flaky.bodies, [70_000, 70_000, 70_000], 'the whole file on every attempt');
  assert.equal(retries.length, 2);
  assert.match(retries[0], /answered 503: nope/);

  const refused = await server(() => 403);
  t.after(() => refused.close());
  const no = await uploadFile(file, refused.url, { attempts: 5, backoff: { baseMs: 10, maxMs: 20 } });
  assert.deepEqual({ ok: no.ok, attempts: no.attempts }, { ok: false, attempts: 1 });
  assert.match(no.errors[0], /^attempt 1: http:\/\/127\.0\.0\.1:\d+\/b\.tar\.gz\?… answered 403/);
  assert.ok(!JSON.stringify([no, retries]).includes('secret'));
});

test('diagnostics configuration: automatic capture is off by default and needs an upload URL when on', () => {
  const d = parseConfig('').diagnostics;
  assert.equal(d.autoCapture.enabled, false);
  assert.equal(d.autoCapture.minInterval, 3_600_000);
  assert.throws(
    () => parseConfig('diagnostics:\n  autoCapture:\n    enabled: true\n'),
    /diagnostics\.autoCapture\.uploadUrl: required when autoCapture is enabled/,
  );
  assert.throws(
    () => parseConfig('diagnostics:\n  autoCapture:\n    uploadUrl: ftp://x\n'),
    /diagnostics\.autoCapture\.uploadUrl: expected an http\(s\) URL/,
  );
  assert.throws(() => parseConfig('diagnostics:\n  autoCapture:\n    categories: [disk]\n'), /diagnostics\.autoCapture\.categories\.0/);
  assert.throws(
    () => parseConfig('diagnostics:\n  autoCapture:\n    minInterval: 0\n'),
    /diagnostics\.autoCapture\.minInterval: must be more than 0/,
  );
});
