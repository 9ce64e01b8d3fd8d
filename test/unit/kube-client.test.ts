/**
 * The agent's API client (src/kube/client.ts) against a real HTTP server on loopback: a request
 * past its deadline is abandoned and its connection closed; the identity a kubeconfig gives (here
 * an exec plugin, run again on every apply) is applied once and reused for IDENTITY_TTL_MS, and
 * applied again at once after a 401.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { IDENTITY_TTL_MS, KubeApiError, makeClients, RequestTimeoutError, withDeadline } from '../../src/kube/index.ts';
import { tokenFileExecUser, writeKubeconfig } from '../helpers/kubeconfig.ts';

async function serve(t: { after(fn: () => unknown): void }, handler: http.RequestListener) {
  const server = http.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

test('a request past its deadline is abandoned as timed out, and its connection closed', async (t) => {
  let closed!: () => void;
  const connectionClosed = new Promise<void>((resolve) => (closed = resolve));
  const server = await serve(t, (req) => req.socket.once('close', closed)); // never answers
  const c = makeClients(writeKubeconfig(t, server, { token: 't' }).file);
  const t0 = Date.now();
  await assert.rejects(
    withDeadline(300, 'GET node', (o) => c.core.readNode({ name: 'n1' }, o)),
    (err: Error) => err instanceof RequestTimeoutError && /GET node timed out after 300 ms/.test(err.message),
  );
  assert.ok(Date.now() - t0 < 2_000, `gave up after ${Date.now() - t0} ms`);
  await connectionClosed;
});

test('the identity is applied once and reused for IDENTITY_TTL_MS, then applied again; a 401 has it applied again at once', async (t) => {
  const seen: string[] = [];
  const server = await serve(t, (req, res) => {
    const auth = req.headers.authorization ?? '';
    seen.push(auth);
    res.writeHead(auth === 'Bearer refused' ? 401 : 200, { 'content-type': 'application/json' });
    res.end('{}');
  });
  const tokenFile = path.join(mkdtempSync(path.join(os.tmpdir(), 'vigil-tok-')), 'token');
  t.after(() => rmSync(path.dirname(tokenFile), { recursive: true, force: true }));
  const { file } = writeKubeconfig(t, server, tokenFileExecUser(tokenFile));
  let now = 0;
  const c = makeClients(file, {}, { now: () => now });
  const get = () => c.core.readNode({ name: 'n1' });

  writeFileSync(tokenFile, 'a');
  await get();
  writeFileSync(tokenFile, 'b');
  now = IDENTITY_TTL_MS / 4;
  await get();
  assert.deepEqual(seen, ['Bearer a', 'Bearer a'], 'reused within the TTL');
  now = IDENTITY_TTL_MS + 1;
  await get();
  assert.equal(seen.at(-1), 'Bearer b', 'applied again once the TTL passed');

  writeFileSync(tokenFile, 'refused');
  now = 2 * IDENTITY_TTL_MS + 2;
  await assert.rejects(get(), (err: Error) => err instanceof KubeApiError && err.code === 401);
  writeFileSync(tokenFile, 'c');
  now += 1_000;
  await get();
  assert.equal(seen.at(-1), 'Bearer c', 'a 401 drops the identity: the next request applies it again');
});
