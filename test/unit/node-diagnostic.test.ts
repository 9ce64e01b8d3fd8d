/**
 * The parts of NodeDiagnostic handling that need no cluster: the spec check, URL redaction, the
 * bounded store of kept bundles, the uploader's retries against a local HTTP server, where an
 * upload may go (issue #22 point 1: loopback listeners that must see no connection, an injected
 * resolver and connector so nothing leaves the machine), the token and the sealed destination
 * (points 2 and 3), and the diagnostics configuration section.
 */
import '../helpers/loopback-only.ts';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { Registry } from 'prom-client';
import { parseConfig } from '../../src/settings/index.ts';
import { HttpServer } from '../../src/sinks/index.ts';
import {
  parseSpec,
  redactUrl,
  BundleStore,
  uploadFile,
  type UploadOptions,
  expandUrl,
  refusedKind,
  type Resolver,
  newDestinationKey,
  newToken,
  openDestination,
  sealDestination,
  tokenMatches,
  tokenSHA256,
} from '../../src/diagnostics/index.ts';

const SHA = 'a'.repeat(64);

test('a spec is checked like the CRD does, naming the field at fault', () => {
  const ok = parseSpec({ categories: ['kernel', 'kernel', 'gpu'], tokenSHA256: SHA });
  assert.ok(ok.ok);
  assert.deepEqual(ok.request, { categories: ['kernel', 'gpu'], delivery: { kind: 'node' }, tokenSHA256: SHA });
  const all = parseSpec({ tokenSHA256: SHA });
  assert.ok(all.ok && all.request.categories.length === 7, 'no categories: every category');
  assert.deepEqual(parseSpec({ categories: ['kernel', 'disk'], tokenSHA256: SHA }), {
    ok: false,
    error: 'spec.categories[1]: "disk" is not one of kernel, gpu, vigil, network, storage, runtime, system',
  });
  const since = parseSpec({ since: 'yesterday', tokenSHA256: SHA });
  assert.ok(!since.ok && since.error.startsWith('spec.since:'));
  const up = parseSpec({ delivery: 'upload', tokenSHA256: SHA });
  assert.ok(up.ok && up.request.delivery.kind === 'upload');
});

test('a spec with an upload URL in it, or without a token hash, is refused, saying what to use instead', () => {
  const url = parseSpec({ delivery: 'https://b.example/k?sig=1', tokenSHA256: SHA });
  assert.ok(!url.ok);
  assert.match(url.error, /^spec\.delivery: a URL is no longer accepted here .*vigil logs --upload-url/);
  const none = parseSpec({ delivery: 'node' });
  assert.ok(!none.ok && none.error.startsWith('spec.tokenSHA256: required'));
  const bad = parseSpec({ bundle: '../state.json', tokenSHA256: SHA });
  assert.ok(!bad.ok && bad.error.startsWith('spec.bundle:'));
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
  const ok = await uploadFile(file, flaky.url, {
    ...LOOPBACK_ALLOWED,
    attempts: 5,
    backoff: { baseMs: 10, maxMs: 20 },
    onRetry: (_a, e) => retries.push(e),
  });
  assert.deepEqual({ ok: ok.ok, attempts: ok.attempts }, { ok: true, attempts: 3 });
  assert.deepEqual(flaky.bodies, [70_000, 70_000, 70_000], 'the whole file on every attempt');
  assert.equal(retries.length, 2);
  assert.equal(retries[0], 'attempt 1: HTTP 503 from the upload destination');

  const refused = await server(() => 403);
  t.after(() => refused.close());
  const no = await uploadFile(file, refused.url, { ...LOOPBACK_ALLOWED, attempts: 5, backoff: { baseMs: 10, maxMs: 20 } });
  assert.deepEqual({ ok: no.ok, attempts: no.attempts }, { ok: false, attempts: 1 });
  assert.equal(no.errors[0], 'attempt 1: HTTP 403 from the upload destination');
  assert.ok(!JSON.stringify([no, retries]).includes('secret'));
});

/** The escape hatch, as an operator would set it for a test bucket on loopback. */
const LOOPBACK_ALLOWED: UploadOptions = { policy: { allowedHosts: ['127.0.0.1'], allowHttp: true } };

/** A loopback listener that counts connections: what "nothing was sent" is measured with. */
async function listener(): Promise<{ port: number; connections: () => number; close: () => Promise<void> }> {
  let n = 0;
  const s = net.createServer((c) => {
    n++;
    c.destroy();
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return {
    port: (s.address() as AddressInfo).port,
    connections: () => n,
    close: () => new Promise<void>((r) => s.close(() => r())),
  };
}

function bundleFile(t: { after: (fn: () => void) => void }): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-dest-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'b.tar.gz');
  writeFileSync(file, Buffer.alloc(1000, 1));
  return file;
}

/** A connector that records where the request would connect (through the lookup it was given) and sends nothing. */
function recordingConnector(seen: string[]): UploadOptions['createConnection'] {
  return ((opts: { host?: string; lookup?: net.LookupFunction }) => {
    const sock = new net.Socket();
    opts.lookup?.(opts.host ?? '', { all: true }, (err: unknown, list: unknown) => {
      const first = Array.isArray(list) ? (list as { address: string }[]).map((a) => a.address).join(',') : String(list);
      seen.push(err ? 'lookup failed' : first);
      setImmediate(() => sock.destroy(Object.assign(new Error('refused by the test connector'), { code: 'ECONNREFUSED' })));
    });
    return sock;
  }) as unknown as UploadOptions['createConnection'];
}

test('an upload to loopback, link-local, private or unique-local addresses is refused and nothing is sent', async (t) => {
  const file = bundleFile(t);
  const l = await listener();
  t.after(() => l.close());
  const seen: string[] = [];
  const common: UploadOptions = { attempts: 3, backoff: { baseMs: 1, maxMs: 1 }, createConnection: recordingConnector(seen) };
  const hatch = ' address (diagnostics.upload.allowedHosts lists hosts allowed anyway)';
  // Real addresses only on loopback, where a listener counts what arrives.
  for (const url of [`https://127.0.0.1:${l.port}/b.tar.gz`, `https://[::ffff:127.0.0.1]:${l.port}/b.tar.gz`]) {
    const r = await uploadFile(file, url, { attempts: 3, backoff: { baseMs: 1, maxMs: 1 } });
    assert.deepEqual(
      { ok: r.ok, attempts: r.attempts, refused: r.refused },
      { ok: false, attempts: 0, refused: `the upload destination is a loopback${hatch}` },
    );
  }
  // Other classes through names (.invalid never resolves for real) answered by an injected resolver.
  const cases: [string, string][] = [
    ['169.254.169.254', 'a link-local'],
    ['10.1.2.3', 'a private'],
    ['172.20.0.1', 'a private'],
    ['192.168.0.10', 'a private'],
    ['100.64.0.1', 'a shared (carrier-grade NAT)'],
    ['fc00::1', 'a unique-local'],
    ['fd00:ec2::254', 'a unique-local'],
    ['fe80::1', 'a link-local'],
    ['::1', 'a loopback'],
    ['64:ff9b::a9fe:a9fe', 'a link-local'],
  ];
  for (const [address, kind] of cases) {
    const resolve: Resolver = () => Promise.resolve([{ address, family: address.includes(':') ? 6 : 4 }]);
    const r = await uploadFile(file, 'https://bucket.invalid/b.tar.gz', { ...common, resolve });
    assert.deepEqual(
      { ok: r.ok, attempts: r.attempts, refused: r.refused },
      { ok: false, attempts: 0, refused: `the upload destination is ${kind}${hatch}` },
      address,
    );
    assert.equal(refusedKind(address), kind, `${address} as a literal too`);
  }
  // One private answer among public ones is enough to refuse.
  const mixed: Resolver = () =>
    Promise.resolve([
      { address: '203.0.113.7', family: 4 },
      { address: '10.0.0.7', family: 4 },
    ]);
  assert.match((await uploadFile(file, 'https://bucket.invalid/b', { ...common, resolve: mixed })).refused ?? '', /a private address/);
  assert.deepEqual(seen, [], 'no connection was even attempted');
  assert.equal(l.connections(), 0, 'the loopback listener saw no connection');
  assert.equal(refusedKind('8.8.8.8'), undefined, 'a public address passes');
  assert.equal(refusedKind('2606:4700::1111'), undefined);
});

test('an http upload is refused unless allowHttp, and the API server own address is refused', async (t) => {
  const file = bundleFile(t);
  const seen: string[] = [];
  const publicDns: Resolver = (h) => Promise.resolve([{ address: h === 'api.invalid' ? '203.0.113.9' : '203.0.113.7', family: 4 }]);
  const o: UploadOptions = { attempts: 1, resolve: publicDns, createConnection: recordingConnector(seen) };
  const plain = await uploadFile(file, 'http://bucket.invalid/b.tar.gz', o);
  assert.match(plain.refused ?? '', /http:\/\/ and only https is allowed \(diagnostics\.upload\.allowHttp\)/);
  const api = await uploadFile(file, 'https://api-alias.invalid/b', {
    ...o,
    resolve: () => Promise.resolve([{ address: '203.0.113.9', family: 4 }]),
    policy: { allowedHosts: [], allowHttp: false, apiServer: 'https://api.invalid:443' },
  });
  assert.match(api.refused ?? '', /is the API server/);
  assert.deepEqual(seen, [], 'nothing sent');
});

test('a rebinding resolver (public first, loopback after) cannot make the upload connect to loopback', async (t) => {
  const file = bundleFile(t);
  const l = await listener();
  t.after(() => l.close());
  let asked = 0;
  const rebinding: Resolver = () => Promise.resolve([{ address: asked++ === 0 ? '203.0.113.7' : '127.0.0.1', family: 4 }]);
  const seen: string[] = [];
  const r = await uploadFile(file, `https://rebind.invalid:${l.port}/b.tar.gz`, {
    attempts: 3,
    backoff: { baseMs: 1, maxMs: 1 },
    resolve: rebinding,
    createConnection: recordingConnector(seen),
  });
  assert.equal(r.ok, false);
  assert.equal(asked, 1, 'the name was resolved once');
  assert.deepEqual(seen, ['203.0.113.7', '203.0.113.7', '203.0.113.7'], 'every attempt connects to the checked address');
  assert.equal(l.connections(), 0, 'never to loopback');
  assert.deepEqual(
    r.errors,
    [1, 2, 3].map((i) => `attempt ${i}: PUT to the upload destination: ECONNREFUSED`),
  );
});

test('a 403 answer with a secret in its body is reported as a code only', async (t) => {
  const file = bundleFile(t);
  const secret = `tok-${Math.random().toString(36).slice(2)}`;
  const s = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(403, { 'content-type': 'text/plain' }).end(`forbidden; your token is ${secret}`));
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => s.close(() => r())));
  const r = await uploadFile(file, `http://127.0.0.1:${(s.address() as AddressInfo).port}/b`, LOOPBACK_ALLOWED);
  assert.equal(r.ok, false);
  assert.deepEqual(r.errors, ['attempt 1: HTTP 403 from the upload destination']);
  assert.ok(!JSON.stringify(r).includes(secret));
});

test('an allowed host on loopback takes the upload over https (SNI and certificate by name) and over http', async (t) => {
  const file = bundleFile(t);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-tls-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const gen = spawnSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=bucket.test',
      '-addext',
      'subjectAltName=DNS:bucket.test',
      '-keyout',
      path.join(dir, 'k.pem'),
      '-out',
      path.join(dir, 'c.pem'),
    ],
    { encoding: 'utf8' },
  );
  assert.equal(gen.status, 0, gen.stderr);
  const cert = readFileSync(path.join(dir, 'c.pem'));
  const got: { bytes: number; host?: string; sni?: string }[] = [];
  const s = https.createServer({ key: readFileSync(path.join(dir, 'k.pem')), cert }, (req, res) => {
    let bytes = 0;
    req.on('data', (d: Buffer) => (bytes += d.length));
    req.on('end', () => {
      got.push({ bytes, host: req.headers.host, sni: (req.socket as unknown as { servername?: string }).servername });
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => (s.closeAllConnections(), s.close(() => r()))));
  const port = (s.address() as AddressInfo).port;
  const resolve: Resolver = () => Promise.resolve([{ address: '127.0.0.1', family: 4 }]);
  const refused = await uploadFile(file, `https://bucket.test:${port}/b`, { resolve, ca: cert });
  assert.match(refused.refused ?? '', /loopback/, 'not allowed by default');
  const ok = await uploadFile(file, `https://bucket.test:${port}/b`, {
    resolve,
    ca: cert,
    policy: { allowedHosts: ['bucket.test'], allowHttp: false },
  });
  assert.deepEqual({ ok: ok.ok, errors: ok.errors }, { ok: true, errors: [] });
  assert.deepEqual(got, [{ bytes: 1000, host: `bucket.test:${port}`, sni: 'bucket.test' }]);

  const put = await server(() => 200);
  t.after(() => put.close());
  const plain = await uploadFile(file, put.url, LOOPBACK_ALLOWED);
  assert.equal(plain.ok, true);
  assert.deepEqual(put.bodies, [1000]);
});

test('a bundle token matches only its own hash, and a sealed destination opens only with its request key and uid', () => {
  const token = newToken();
  assert.equal(Buffer.from(token, 'base64url').length, 32);
  const sha = tokenSHA256(token);
  assert.match(sha, /^[0-9a-f]{64}$/);
  assert.equal(tokenMatches(token, sha), true);
  assert.equal(tokenMatches(newToken(), sha), false);
  assert.equal(tokenMatches(token, 'zz'), false);
  const key = newDestinationKey();
  const url = 'https://bucket.example/a.tar.gz?X-Amz-Signature=s3cret';
  const sealed = sealDestination(key.publicKey, 'uid-1', url);
  assert.ok(!sealed.includes('bucket') && !Buffer.from(sealed, 'base64url').toString('latin1').includes('bucket'));
  assert.equal(openDestination(key, 'uid-1', sealed), url);
  assert.equal(openDestination(key, 'uid-2', sealed), undefined, 'bound to the object uid');
  assert.equal(openDestination(newDestinationKey(), 'uid-1', sealed), undefined, 'another key (another node) cannot open it');
  const tampered = Buffer.from(sealed, 'base64url');
  tampered[tampered.length - 1] ^= 1;
  assert.equal(openDestination(key, 'uid-1', tampered.toString('base64url')), undefined);
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

test('upload destination configuration: https only and no allowed host by default; an http auto-capture URL needs allowHttp', () => {
  assert.deepEqual(parseConfig('').diagnostics.upload, { allowedHosts: [], allowHttp: false });
  assert.throws(
    () => parseConfig('diagnostics:\n  autoCapture:\n    uploadUrl: http://b.example/{node}\n'),
    /diagnostics\.autoCapture\.uploadUrl: http:\/\/ needs diagnostics\.upload\.allowHttp: true/,
  );
  assert.throws(
    () => parseConfig('diagnostics:\n  upload:\n    allowedHosts: ["https://b.example/x"]\n'),
    /diagnostics\.upload\.allowedHosts\.0/,
  );
  const ok = parseConfig(
    'diagnostics:\n  upload: {allowedHosts: [minio.local], allowHttp: true}\n  autoCapture:\n    uploadUrl: http://minio.local/x\n',
  );
  assert.deepEqual(ok.diagnostics.upload.allowedHosts, ['minio.local']);
});

test('the agent bundle route answers 401 without a token, 403 with another, and serves the bundle only to its token', async (t) => {
  const file = bundleFile(t);
  const good = newToken();
  const sha = tokenSHA256(good);
  const name = 'node-a-20260101t000000z-0123456789abcdef.tar.gz';
  const server = new HttpServer(new Registry(), {
    health: () => ({}) as never,
    agentHealth: () => ({ status: 'ok', components: {} }),
    // As the controller does: the grant of the request that produced the bundle.
    diagnosticBundle: (n: string, token: string) => (n === name && tokenMatches(token, sha) ? { path: file, bytes: 1000 } : 'forbidden'),
  });
  const addr = await server.listen('127.0.0.1:0');
  t.after(() => server.close());
  const get = async (headers: Record<string, string>, n = name) => {
    const res = await fetch(`http://127.0.0.1:${addr.port}/diagnostics/${n}`, { headers });
    return { status: res.status, bytes: (await res.arrayBuffer()).byteLength };
  };
  assert.equal((await get({})).status, 401);
  assert.equal((await get({ authorization: `Bearer ${good}` })).status, 401, 'Authorization is not where the token goes');
  assert.equal((await get({ 'x-vigil-token': newToken() })).status, 403);
  assert.equal((await get({ 'x-vigil-token': good }, 'node-a-20260101t000000z-fedcba9876543210.tar.gz')).status, 403, 'not another bundle');
  assert.deepEqual(await get({ 'x-vigil-token': good }), { status: 200, bytes: 1000 });
});
