/**
 * The agent's Event create kept ready (src/kube/client.ts, ReadyRequest), against a real HTTP
 * server on a thread of its own: that thread records when each request arrives while this one is
 * still busy in the turn that made it, which is what the ready request is for (Node's usual
 * request is written on the next tick, after the rest of the turn).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { IDENTITY_TTL_MS, makeClients } from '../../src/kube/index.ts';
import { tokenFileExecUser, writeKubeconfig } from '../helpers/kubeconfig.ts';

interface Arrival {
  method: string;
  url: string;
  auth: string;
  at: number;
}

const SERVER = `
const { parentPort } = require('node:worker_threads');
const http = require('node:http');
const server = http.createServer((req, res) => {
  parentPort.postMessage({ arrival: { method: req.method, url: req.url, auth: req.headers.authorization ?? '', at: Date.now() } });
  req.resume();
  req.on('end', () => {
    res.writeHead(req.method === 'POST' ? 201 : 200, { 'content-type': 'application/json' });
    res.end('{}');
  });
});
server.listen(0, '127.0.0.1', () => parentPort.postMessage({ port: server.address().port }));
parentPort.on('message', (m) => {
  if (m === 'drop') server.closeAllConnections();
  if (m === 'close') {
    server.closeAllConnections();
    server.close(() => parentPort.close());
  }
});
`;

interface Served {
  url: string;
  arrivals: Arrival[];
  /** The first `n` arrivals, once the server's thread has told them (its messages may come after the answer). */
  first(n: number): Promise<Arrival[]>;
  drop(): void;
}

async function serve(t: { after(fn: () => unknown): void }): Promise<Served> {
  const worker = new Worker(SERVER, { eval: true });
  const arrivals: Arrival[] = [];
  const waiting: { n: number; resolve: () => void }[] = [];
  const port = await new Promise<number>((resolve) =>
    worker.on('message', (m: { port?: number; arrival?: Arrival }) => {
      if (m.port) resolve(m.port);
      if (m.arrival) arrivals.push(m.arrival);
      for (const w of waiting.filter((x) => arrivals.length >= x.n)) {
        waiting.splice(waiting.indexOf(w), 1);
        w.resolve();
      }
    }),
  );
  const first = async (n: number) => {
    if (arrivals.length < n) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        new Promise<void>((resolve) => waiting.push({ n, resolve })),
        new Promise<void>(
          (_, reject) => (timer = setTimeout(() => reject(new Error(`${arrivals.length} of ${n} requests arrived`)), 5_000)),
        ),
      ]).finally(() => clearTimeout(timer));
    }
    return arrivals.slice(0, n);
  };
  t.after(async () => {
    worker.postMessage('close');
    await new Promise((resolve) => worker.once('exit', resolve));
  });
  return { url: `http://127.0.0.1:${port}`, arrivals, first, drop: () => worker.postMessage('drop') };
}

/** A kubeconfig whose token is read from a file (initially "a") on every apply. */
function tokenKubeconfig(t: { after(fn: () => unknown): void }, server: string): { file: string; tokenFile: string } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-tok-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const tokenFile = path.join(dir, 'token');
  writeFileSync(tokenFile, 'a');
  return { file: writeKubeconfig(t, server, tokenFileExecUser(tokenFile)).file, tokenFile };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** Keeps this thread busy, as the rest of a fault's turn does (the engine, the other sinks, the reader). */
function busy(ms: number): number {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
  return Date.now();
}
const event = { metadata: { name: 'e1' }, eventTime: new Date(0), reason: 'R', note: 'n' };
const posts = (a: Arrival[]) => a.filter((x) => x.method === 'POST');

test('after an Event create, the next one is on the wire before the turn that made it ends; a usual request waits for the turn', async (t) => {
  const s = await serve(t);
  const c = makeClients(tokenKubeconfig(t, s.url).file, {}, { readyEventCreate: true });
  // The sink's dry-run preflight goes the usual way; the ready request is made after its answer.
  await c.events.createNamespacedEvent({ namespace: 'default', body: event, dryRun: 'All' });
  await sleep(200);

  const created = c.events.createNamespacedEvent({ namespace: 'default', body: event });
  const turnEnded = busy(400);
  await created;
  const patched = c.core.patchNodeStatus({ name: 'n1', body: [] });
  const patchTurnEnded = busy(400);
  await patched;

  await s.first(3);
  const [dry, create] = posts(s.arrivals);
  assert.equal(dry?.url, '/apis/events.k8s.io/v1/namespaces/default/events?dryRun=All');
  assert.equal(create?.url, '/apis/events.k8s.io/v1/namespaces/default/events');
  assert.ok(create.at < turnEnded - 200, `the create arrived ${turnEnded - create.at} ms before its turn ended`);
  const patch = s.arrivals.find((x) => x.method === 'PATCH');
  assert.ok(patch && patch.at >= patchTurnEnded, 'the PATCH (no ready request) was written after its turn');
  assert.equal(posts(s.arrivals).length, 2, 'nothing else was posted');
});

test('a ready request never carries an old identity: a changed token drops it unsent, and the create carries the new token', async (t) => {
  const s = await serve(t);
  const kc = tokenKubeconfig(t, s.url);
  let now = 0;
  const c = makeClients(kc.file, {}, { readyEventCreate: true, now: () => now });
  await c.events.createNamespacedEvent({ namespace: 'default', body: event, dryRun: 'All' });
  await sleep(200);
  writeFileSync(kc.tokenFile, 'b');
  now = IDENTITY_TTL_MS + 1;
  await c.events.createNamespacedEvent({ namespace: 'default', body: event });
  assert.deepEqual(
    posts(await s.first(2)).map((x) => x.auth),
    ['Bearer a', 'Bearer b'],
  );
});

test('a ready request whose connection the server closed is dropped; the next create goes the usual way and lands once', async (t) => {
  const s = await serve(t);
  const c = makeClients(tokenKubeconfig(t, s.url).file, {}, { readyEventCreate: true });
  await c.events.createNamespacedEvent({ namespace: 'default', body: event, dryRun: 'All' });
  await sleep(200);
  s.drop();
  await sleep(200);
  await c.events.createNamespacedEvent({ namespace: 'default', body: event });
  assert.equal(posts(await s.first(2)).length, 2);
  // And it is made ready again after that create: the next one is written in its own turn.
  await sleep(200);
  const created = c.events.createNamespacedEvent({ namespace: 'default', body: event });
  const turnEnded = busy(400);
  await created;
  const last = posts(await s.first(3)).at(-1);
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(posts(s.arrivals).length, 3);
  assert.ok(last && last.at < turnEnded - 200, 'ready again');
});
