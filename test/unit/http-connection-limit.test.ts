/**
 * The HTTP connection cap and timeouts (issue #22 point 10) on real loopback sockets: which
 * connection goes at the cap, what the cap is for a given descriptor limit, and that a client
 * sending nothing, or its headers a byte at a time, is cut off.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { connectionCap, limitConnections, openFileLimit, type ShedReason, HttpServer, type StatusProvider } from '../../src/sinks/index.ts';
import type { NodeHealth } from '../../src/api/index.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Not events.once: that rejects on the EPIPE a write to a closed socket raises. */
const closed = (s: net.Socket) => new Promise((r) => s.once('close', r));

async function until(what: string, ok: () => boolean, timeoutMs = 3000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** A plain server whose /hold requests wait for release(); `open()` is what the cap counts. */
async function capped(t: { after: (fn: () => Promise<void> | void) => void }, cap: number) {
  const held: http.ServerResponse[] = [];
  const shed: ShedReason[] = [];
  const server = http.createServer((req, res) => {
    if (req.url === '/hold') held.push(res);
    else res.end('ok\n');
  });
  const open = limitConnections(server, cap, (r) => shed.push(r));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });
  const port = (server.address() as AddressInfo).port;
  /** A client socket that records whether the server closed it. */
  const connect = async () => {
    const s = net.connect(port, '127.0.0.1');
    const c = { socket: s, closed: false, data: '' };
    s.on('data', (d) => (c.data += String(d)));
    s.on('error', () => {});
    s.resume(); // read what the server sends (a 408), or its close is never seen
    s.once('close', () => (c.closed = true));
    t.after(() => void s.destroy());
    await once(s, 'connect');
    return c;
  };
  return { port, held, shed, open, connect, release: () => held.splice(0).forEach((r) => r.end('released\n')) };
}

test('at the cap a new connection closes the least recently active idle one, not itself', async (t) => {
  const srv = await capped(t, 2);
  const a = await srv.connect();
  await until('the server to hold a', () => srv.open() === 1);
  const b = await srv.connect();
  await until('the server to hold b', () => srv.open() === 2);
  const c = await srv.connect();
  await until('a to be closed', () => a.closed);
  await sleep(50);
  assert.deepEqual([a.closed, b.closed, c.closed], [true, false, false]);
  assert.deepEqual(srv.shed, ['evicted']);
  assert.equal(srv.open(), 2);
});

test('a connection serving a request is never evicted; the idle one goes instead', async (t) => {
  const srv = await capped(t, 2);
  const a = await srv.connect();
  a.socket.write('GET /hold HTTP/1.1\r\nHost: x\r\n\r\n');
  await until('a request in progress', () => srv.held.length === 1);
  const b = await srv.connect();
  await until('the server to hold b', () => srv.open() === 2);
  const c = await srv.connect();
  await until('b to be closed', () => b.closed);
  srv.release();
  await until('the held request to be answered', () => a.data.includes('released'));
  assert.deepEqual([a.closed, b.closed, c.closed], [false, true, false]);
});

test('when every held connection is serving a request, the newcomer is refused and the others still answer', async (t) => {
  const srv = await capped(t, 1);
  const a = await srv.connect();
  a.socket.write('GET /hold HTTP/1.1\r\nHost: x\r\n\r\n');
  await until('a request in progress', () => srv.held.length === 1);
  const b = await srv.connect();
  await until('b to be refused', () => b.closed);
  assert.deepEqual(srv.shed, ['refused']);
  srv.release();
  await until('the held request to be answered', () => a.data.includes('released'));
  assert.equal(a.closed, false);
});

test('the cap is at most half the descriptor limit, so the rest of the agent keeps the other half', () => {
  assert.equal(connectionCap(512, 1_048_576), 512);
  assert.equal(connectionCap(512, 20_000), 512);
  assert.equal(connectionCap(512, 1024), 512);
  assert.equal(connectionCap(512, 256), 128);
  assert.equal(connectionCap(512, 1), 1, 'never 0: the server must still answer');
  assert.equal(connectionCap(512, undefined), 512, 'an unknown limit leaves the configured cap');
  const limits = (soft: string) =>
    `Limit                     Soft Limit           Hard Limit           Units     \nMax processes             96367                96367                processes \nMax open files            ${soft}                20000                files     \n`;
  assert.equal(openFileLimit(limits('1024')), 1024);
  assert.equal(openFileLimit(limits('unlimited')), undefined);
  assert.equal(typeof openFileLimit(), 'number', "this process's own limit is read from /proc/self/limits");
});

const status: StatusProvider = {
  health: () => ({}) as NodeHealth,
  agentHealth: () => ({ status: 'ok', components: {} }),
};

async function agentServer(t: { after: (fn: () => Promise<void>) => void }, idleTimeoutMs: number) {
  const server = new HttpServer(new Registry(), status);
  const addr = await server.listen('127.0.0.1:0', { idleTimeoutMs });
  t.after(() => server.close());
  return addr.port;
}

test("the agent's server closes a connection that sends nothing after its idle timeout", async (t) => {
  const port = await agentServer(t, 300);
  const s = net.connect(port, '127.0.0.1');
  s.on('error', () => {});
  s.resume(); // read what the server sends (a 408), or its close is never seen
  await once(s, 'connect');
  const t0 = Date.now();
  await Promise.race([closed(s), sleep(5000)]);
  assert.ok(s.destroyed, 'closed by the server');
  assert.ok(Date.now() - t0 < 3000, `closed ${Date.now() - t0} ms after connecting`);
});

test("the agent's server closes a connection that trickles its headers a byte at a time (headers timeout)", async (t) => {
  const port = await agentServer(t, 300);
  const s = net.connect(port, '127.0.0.1');
  s.on('error', () => {});
  s.resume(); // read what the server sends (a 408), or its close is never seen
  await once(s, 'connect');
  const t0 = Date.now();
  const request = 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'a'.repeat(10_000);
  let i = 0;
  // One byte every 50 ms keeps the socket active, so only the headers timeout can end it.
  const drip = setInterval(() => {
    if (!s.destroyed) s.write(request[i++ % request.length]);
  }, 50);
  t.after(() => clearInterval(drip));
  await Promise.race([closed(s), sleep(6000)]);
  clearInterval(drip);
  assert.ok(s.destroyed, 'closed by the server');
  assert.ok(Date.now() - t0 < 4000, `closed ${Date.now() - t0} ms after connecting`);
});

test('a request and a kept-alive follow-up are answered normally under the limits', async (t) => {
  const port = await agentServer(t, 300);
  const agent = new http.Agent({ keepAlive: true });
  t.after(() => agent.destroy());
  for (let i = 0; i < 2; i++) {
    const res = await new Promise<http.IncomingMessage>((resolve, reject) =>
      http.get({ host: '127.0.0.1', port, path: '/healthz', agent }, resolve).once('error', reject),
    );
    res.resume();
    await once(res, 'end');
    assert.equal(res.statusCode, 200);
  }
});
