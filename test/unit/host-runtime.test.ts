import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { runtimeChecks, runtimeConfigSchema } from '../../src/monitors/runtime/index.ts';
import { restartReason } from '../../src/monitors/runtime/checks.ts';
import { lookupReason } from '../../src/catalog/index.ts';
import type { ExecFn } from '../../src/sources/host/exec.ts';
import { check, cleared, ctx, fakeExec, found, fx } from './host-helpers.ts';

async function listen(handler: http.RequestListener): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http.createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/healthz`,
    close: () => new Promise((r) => (server.closeAllConnections(), server.close(() => r()))),
  };
}

const kubelet = (url: string, extra: object = {}) =>
  check(runtimeChecks(runtimeConfigSchema.parse({ kubelet: { healthzUrl: url, timeout: 200, ...extra } })), 'runtime.kubelet');

test('kubelet: healthz ok, unhealthy, hung, and absent', async (t) => {
  const ok = await listen((_req, res) => res.end('ok'));
  const sick = await listen((_req, res) => ((res.statusCode = 500), res.end('[-]syncloop failed')));
  const hung = await listen(() => undefined);
  t.after(() => Promise.all([ok.close(), sick.close(), hung.close()]));
  assert.deepEqual(cleared(await kubelet(ok.url).run(ctx('/'))), ['KubeletUnhealthy unit:kubelet.service']);
  const bad = await kubelet(sick.url).run(ctx('/'));
  assert.deepEqual(found(bad), ['KubeletUnhealthy unit:kubelet.service']);
  assert.match(bad.findings[0].message, /HTTP 500/);
  assert.match((await kubelet(hung.url).run(ctx('/'))).findings[0].message, /no answer within 200ms/);
  // Nothing listening: a port we just closed.
  const gone = await listen((_req, res) => res.end('ok'));
  await gone.close();
  assert.equal((await kubelet(gone.url).run(ctx('/'))).status, 'skipped');
  assert.deepEqual(found(await kubelet(gone.url, { required: true }).run(ctx('/'))), ['KubeletUnhealthy unit:kubelet.service']);
});

const containerd = (extra: object = {}) =>
  check(runtimeChecks(runtimeConfigSchema.parse({ containerd: { timeout: 300, ...extra } })), 'runtime.containerd');

test('containerd: CRI Version over the socket; hung, stale and absent sockets', async (t) => {
  const root = mkdtempSync(path.join(tmpdir(), 'vigil-cri-'));
  const sock = path.join(root, 'run/containerd/containerd.sock');
  mkdirSync(path.dirname(sock), { recursive: true });
  const paths: string[] = [];
  const grpc = http2.createServer();
  grpc.on('stream', (stream, headers) => {
    paths.push(String(headers[':path']));
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
    stream.end(Buffer.from([0, 0, 0, 0, 0]));
  });
  await new Promise<void>((r) => grpc.listen(sock, r));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  assert.deepEqual(cleared(await containerd().run(ctx(root))), ['ContainerRuntimeUnresponsive unit:containerd.service']);
  assert.deepEqual(paths, ['/runtime.v1.RuntimeService/Version']);
  await new Promise<void>((r) => grpc.close(() => r()));

  // Accepts connections (the kernel does, into the backlog) but never answers.
  const conns: net.Socket[] = [];
  const hung = net.createServer((s) => void conns.push(s));
  await new Promise<void>((r) => hung.listen(sock, r));
  const r = await containerd().run(ctx(root));
  assert.deepEqual(found(r), ['ContainerRuntimeUnresponsive unit:containerd.service']);
  assert.match(r.findings[0].message, /no answer within 300ms/);
  for (const s of conns) s.destroy(); // never read from, so close() would not see them end
  await new Promise<void>((r) => hung.close(() => r()));

  writeFileSync(sock, ''); // left behind by a dead containerd: connect is refused
  assert.match((await containerd().run(ctx(root))).findings[0].message, /refused/);
  rmSync(sock);
  assert.equal((await containerd().run(ctx(root))).status, 'skipped');
  assert.deepEqual(found(await containerd({ required: true }).run(ctx(root))), ['ContainerRuntimeUnresponsive unit:containerd.service']);
});

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
  const exec: ExecFn = async (_f, _a, opts) => ((env = opts.env), { code: 0, stdout: '', stderr: '', truncated: false, timedOut: false });
  await check(runtimeChecks(runtimeConfigSchema.parse({}), { exec }), 'runtime.units').run(ctx(fx('healthy')));
  assert.equal(env?.DBUS_SYSTEM_BUS_ADDRESS, `unix:path=${fx('healthy')}/run/dbus/system_bus_socket`);
  const failing: ExecFn = async () => ({ code: 1, stdout: '', stderr: 'Failed to connect to bus', truncated: false, timedOut: false });
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
