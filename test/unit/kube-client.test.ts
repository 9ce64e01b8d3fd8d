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
import { stringify } from 'yaml';
import { IDENTITY_TTL_MS, KubeApiError, makeClients, RequestTimeoutError, withDeadline } from '../../src/kube/index.ts';

async function serve(t: { after(fn: () => unknown): void }, handler: http.RequestListener) {
  const server = http.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function kubeconfig(t: { after(fn: () => unknown): void }, server: string, user: object): { file: string; dir: string } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-kc-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'kubeconfig');
  writeFileSync(
    file,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'c', cluster: { server, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'u', user }],
      contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
      'current-context': 'x',
    }),
  );
  return { file, dir };
}

test('a request past its deadline is abandoned as timed out, and its connection closed', async (t) => {
  let closed!: () => void;
  const connectionClosed = new Promise<void>((resolve) => (closed = resolve));
  const server = await serve(t, (req) => req.socket.once('close', closed)); // never answers
  const c = makeClients(kubeconfig(t, server, { token: 't' }).file);
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
  // An exec plugin whose credential is already expired: client-node runs it on every apply.
  const credential = `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"2000-01-01T00:00:00Z"}}`;
  const { file } = kubeconfig(t, server, {
    exec: {
      apiVersion: 'client.authentication.k8s.io/v1',
      command: '/bin/sh',
      args: ['-c', `printf '${credential}' "$(cat ${tokenFile})"`],
      interactiveMode: 'Never',
    },
  });
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
