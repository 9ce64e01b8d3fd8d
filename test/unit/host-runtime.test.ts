import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, mkdirSync, readdirSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { runtimeChecks, runtimeConfigSchema, restartReason } from '../../src/monitors/index.ts';
import { lookupReason } from '../../src/catalog/index.ts';
import type { ExecFn } from '../../src/sources/index.ts';
import { check, cleared, ctx, fakeExec, found, fx } from './host-helpers.ts';

/** An HTTP server on a random loopback port, closed in t.after whether the test passes or not. */
async function listen(t: TestContext, handler: http.RequestListener): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http.createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  let closed: Promise<void> | undefined;
  const close = () => (closed ??= new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))));
  t.after(close);
  return { url: `http://127.0.0.1:${port}/healthz`, close };
}

/** Closes a server (and the connections it accepted) in t.after; a second close is harmless. */
function closeAfter(t: TestContext, server: net.Server, conns: net.Socket[] = []): () => Promise<void> {
  let closed: Promise<void> | undefined;
  const close = () =>
    (closed ??= new Promise<void>((r) => {
      for (const s of conns) s.destroy(); // never read from, so close() would not see them end
      server.close(() => r());
    }));
  t.after(close);
  return close;
}

// Probes of a server that answers get seconds, so a loaded machine never runs them out; probes
// that must time out (a hung server) get a short timeout, as their outcome does not depend on load.
const ANSWERS_MS = 10_000;
const HUNG_MS = 200;

const kubelet = (url: string, extra: object = {}) =>
  check(runtimeChecks(runtimeConfigSchema.parse({ kubelet: { healthzUrl: url, timeout: ANSWERS_MS, ...extra } })), 'runtime.kubelet');

test('kubelet: healthz ok, unhealthy, hung, and absent', async (t) => {
  const ok = await listen(t, (_req, res) => res.end('ok'));
  const sick = await listen(t, (_req, res) => ((res.statusCode = 500), res.end('[-]syncloop failed')));
  const hung = await listen(t, () => undefined);
  assert.deepEqual(cleared(await kubelet(ok.url).run(ctx('/'))), ['KubeletUnhealthy unit:kubelet.service']);
  const bad = await kubelet(sick.url).run(ctx('/'));
  assert.deepEqual(found(bad), ['KubeletUnhealthy unit:kubelet.service']);
  assert.match(bad.findings[0].message, /HTTP 500/);
  assert.match((await kubelet(hung.url, { timeout: HUNG_MS }).run(ctx('/'))).findings[0].message, /no answer within 200ms/);
  // Nothing listening: a port we just closed.
  const gone = await listen(t, (_req, res) => res.end('ok'));
  await gone.close();
  assert.equal((await kubelet(gone.url).run(ctx('/'))).status, 'skipped');
  assert.deepEqual(found(await kubelet(gone.url, { required: true }).run(ctx('/'))), ['KubeletUnhealthy unit:kubelet.service']);
});

const containerd = (extra: object = {}) =>
  check(runtimeChecks(runtimeConfigSchema.parse({ containerd: { timeout: ANSWERS_MS, ...extra } })), 'runtime.containerd');

/** A temporary host root with the directory of containerd's socket; removed in t.after. */
function criRoot(t: TestContext): { root: string; sock: string } {
  const root = mkdtempSync(path.join(tmpdir(), 'vigil-cri-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const sock = path.join(root, 'run/containerd/containerd.sock');
  mkdirSync(path.dirname(sock), { recursive: true });
  return { root, sock };
}

test('containerd: CRI Version over the socket; hung, stale and absent sockets', async (t) => {
  const { root, sock } = criRoot(t);
  const paths: string[] = [];
  const grpc = http2.createServer();
  grpc.on('stream', (stream, headers) => {
    paths.push(String(headers[':path']));
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
    stream.end(Buffer.from([0, 0, 0, 0, 0]));
  });
  await new Promise<void>((r) => grpc.listen(sock, r));
  const closeGrpc = closeAfter(t, grpc);
  assert.deepEqual(cleared(await containerd().run(ctx(root))), ['ContainerRuntimeUnresponsive unit:containerd.service']);
  assert.deepEqual(paths, ['/runtime.v1.RuntimeService/Version']);
  await closeGrpc();

  // Accepts connections (the kernel does, into the backlog) but never answers.
  const conns: net.Socket[] = [];
  const hung = net.createServer((s) => void conns.push(s));
  await new Promise<void>((r) => hung.listen(sock, r));
  const closeHung = closeAfter(t, hung, conns);
  const r = await containerd({ timeout: HUNG_MS }).run(ctx(root));
  assert.deepEqual(found(r), ['ContainerRuntimeUnresponsive unit:containerd.service']);
  assert.match(r.findings[0].message, /no answer within 200ms/);
  await closeHung();

  writeFileSync(sock, ''); // left behind by a dead containerd: connect is refused
  assert.match((await containerd().run(ctx(root))).findings[0].message, /refused/);
  rmSync(sock);
  assert.equal((await containerd().run(ctx(root))).status, 'skipped');
  assert.deepEqual(found(await containerd({ required: true }).run(ctx(root))), ['ContainerRuntimeUnresponsive unit:containerd.service']);
});

/**
 * A hung containerd in its own process, so that only the prober's descriptors are counted here:
 * 'silent' accepts connections and never answers; 'not-accepting' never accepts (its event loop is
 * blocked), so its listen backlog of 1 fills and further connections are refused with EAGAIN.
 */
async function hungContainerd(t: TestContext, sock: string, mode: 'silent' | 'not-accepting'): Promise<void> {
  const at = JSON.stringify(sock);
  const code =
    mode === 'silent'
      ? `const c = []; require('net').createServer((s) => c.push(s)).listen(${at}, () => console.log('ready'));`
      : `require('net').createServer().listen({ path: ${at}, backlog: 1 }, () => {
           console.log('ready');
           Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
         });`;
  const child = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = once(child, 'exit');
  t.after(async () => {
    child.kill('SIGKILL');
    await exited;
  });
  await once(child.stdout, 'data');
}

const openDescriptors = () => readdirSync('/proc/self/fd').length;

for (const mode of ['silent', 'not-accepting'] as const) {
  test(`containerd: probes of a ${mode} containerd leave no descriptor open`, async (t) => {
    const { root, sock } = criRoot(t);
    await hungContainerd(t, sock, mode);
    const probe = containerd({ timeout: HUNG_MS });
    await probe.run(ctx(root)); // first use loads what the probe needs (modules, the http2 binding)
    const before = openDescriptors();
    const messages = new Set<string>();
    for (let i = 0; i < 25; i++) {
      const r = await probe.run(ctx(root));
      assert.deepEqual(found(r), ['ContainerRuntimeUnresponsive unit:containerd.service']);
      messages.add(r.findings[0].message);
    }
    assert.equal(openDescriptors(), before, `descriptors after 25 probes (${[...messages].join('; ')})`);
    const expected = mode === 'silent' ? /no answer within 200ms/ : /listen backlog full/;
    assert.ok(
      [...messages].some((m) => expected.test(m)),
      [...messages].join('; '),
    );
  });
}

test('units: failed kubelet/containerd and repeated restarts (NRestarts > 3 and grown)', async () => {
  const at = { root: fx('healthy') };
  const calls: string[][] = [];
  const c = check(runtimeChecks(runtimeConfigSchema.parse({}), { exec: fakeExec(at, calls) }), 'runtime.units');
  const base = await c.run(ctx(at.root));
  assert.deepEqual(found(base), []);
  assert.deepEqual(
    cleared(base),
    ['ContainerRuntimeFailed unit:containerd.service', 'KubeletFailed unit:kubelet.service'],
    'restart counts need a second sample',
  );
  assert.deepEqual(calls[0], [
    'systemctl',
    'show',
    '-p',
    'Id,LoadState,ActiveState,SubState,NRestarts',
    '--',
    'kubelet.service',
    'containerd.service',
    'nvidia-persistenced.service',
    'nvidia-fabricmanager.service',
  ]);
  at.root = fx('healthy-later');
  const ok = await c.run(ctx(at.root));
  assert.deepEqual(found(ok), [], 'containerd at 5 restarts, unchanged');
  assert.ok(cleared(ok).includes('ContainerdRepeatedRestart unit:containerd.service'));
  assert.ok(!cleared(ok).some((x) => x.includes('fabricmanager')), 'units not installed are ignored');
  at.root = fx('faulty');
  const bad = await c.run(ctx(at.root));
  assert.deepEqual(found(bad), [
    'ContainerdRepeatedRestart unit:containerd.service',
    'KubeletFailed unit:kubelet.service',
    'Nvidia-PersistencedRepeatedRestart unit:nvidia-persistenced.service',
  ]);
  assert.ok(cleared(bad).includes('KubeletRepeatedRestart unit:kubelet.service'), '2 restarts is under the threshold');
  assert.equal((await c.run(ctx(fx('empty')))).status, 'skipped', 'no systemd');
});

test('units: under a host root, systemctl talks to the host bus', async () => {
  let env: NodeJS.ProcessEnv | undefined;
  const exec: ExecFn = (_f, _a, opts) => (
    (env = opts.env),
    Promise.resolve({ code: 0, stdout: '', stderr: '', truncated: false, timedOut: false })
  );
  await check(runtimeChecks(runtimeConfigSchema.parse({}), { exec }), 'runtime.units').run(ctx(fx('healthy')));
  assert.equal(env?.DBUS_SYSTEM_BUS_ADDRESS, `unix:path=${fx('healthy')}/run/dbus/system_bus_socket`);
  const failing: ExecFn = () =>
    Promise.resolve({ code: 1, stdout: '', stderr: 'Failed to connect to bus', truncated: false, timedOut: false });
  await assert.rejects(
    check(runtimeChecks(runtimeConfigSchema.parse({}), { exec: failing }), 'runtime.units').run(ctx(fx('healthy'))),
    /Failed to connect/,
  );
});

test('restart reasons follow the EKS names and exist in the catalog', () => {
  assert.equal(restartReason('kubelet.service'), 'KubeletRepeatedRestart');
  assert.equal(restartReason('nvidia-fabricmanager.service'), 'Nvidia-FabricmanagerRepeatedRestart');
  for (const u of ['kubelet', 'containerd', 'nvidia-persistenced', 'nvidia-fabricmanager']) {
    assert.ok(lookupReason(restartReason(`${u}.service`)), u);
  }
});
