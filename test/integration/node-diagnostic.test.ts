/**
 * NodeDiagnostic on real parts: the real `vigil run` process with a token bound to a pod on its
 * node, the CRD, RBAC and admission policy from deploy/ on a real kube-apiserver, uploads by HTTP
 * PUT to a local server (allowed by diagnostics.upload.allowedHosts: loopback is refused
 * otherwise), the destination sealed to the agent's key, node delivery fetched with the request's
 * token through the API server's node proxy, another node's pod-bound token reading what it can,
 * and the automatic capture on a Fatal record written to the real /dev/kmsg.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { kernelLogOnlyConfig, startAgent, writeKmsg, type AgentProcess } from '../helpers/agent-process.ts';
import { ADMISSION_POLICY_YAML, eventsFor, startCluster, waitFor, type TestCluster } from '../helpers/cluster.ts';
import {
  apiGetToFile,
  bundleManifest,
  installCrd,
  nodeDiagnostics,
  pointNodeAtThisMachine,
  requestKept,
  requestUpload,
  startPutServer,
  tarRead,
  type NodeDiagnosticObject,
  type PutServer,
} from '../helpers/node-diagnostic.ts';

let cluster: TestCluster;
let dir: string;
let put: PutServer;
const agents = new Set<AgentProcess>();

before(async () => {
  cluster = await startCluster();
  dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-ndiag-'));
  put = await startPutServer(path.join(dir, 'uploads'));
  await installCrd(cluster);
  await cluster.apply(ADMISSION_POLICY_YAML);
});
after(async () => {
  for (const a of agents) await a.stop();
  await put?.close();
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The real agent for `node`, with a token bound to a pod on that node (so the admission policy applies). */
async function agentFor(
  node: string,
  extra: string[] = [],
  stateDir = path.join(dir, `state-${node}`),
  userRules?: string,
  env: NodeJS.ProcessEnv = {},
  upload = ['  upload: {allowedHosts: ["127.0.0.1"], allowHttp: true}'],
): Promise<AgentProcess> {
  const config = path.join(dir, `${node}.yaml`);
  const text = kernelLogOnlyConfig([
    'kubernetes:',
    '  mode: "on"',
    '  coalesce: 100ms',
    'diagnostics:',
    '  uploadAttempts: 2',
    // The test's "bucket" is on loopback: allowed here as an operator would allow a host.
    ...upload,
    ...extra,
  ]);
  writeFileSync(config, userRules ? text.replace('kernelLog:\n', `kernelLog:\n  userRules: [${JSON.stringify(userRules)}]\n`) : text);
  const kubeconfig = cluster.kubeconfigForToken(await cluster.tokenForPodOnNode(node), `agent-${node}`);
  const agent = await startAgent(
    [
      '--kubeconfig',
      kubeconfig,
      '--node-name',
      node,
      '--state-dir',
      stateDir,
      '--config',
      config,
      // Not loopback: the node proxy reaches the agent on the Node's address.
      '--listen',
      '0.0.0.0:0',
    ],
    env,
  );
  agents.add(agent);
  return agent;
}

async function stopAgent(a: AgentProcess): Promise<void> {
  agents.delete(a);
  assert.equal(await a.stop(), 0);
}

async function finished(name: string): Promise<NodeDiagnosticObject> {
  const nd = nodeDiagnostics(cluster.adminKubeconfig);
  return waitFor(
    `NodeDiagnostic ${name} finished`,
    async () => {
      const o = await nd.get(name);
      return (o.status?.phase === 'Succeeded' || o.status?.phase === 'Failed') && o;
    },
    240_000,
    250,
  );
}

/** The bundle PUT to `key` (path and query) for a finished NodeDiagnostic, read back with its manifest. */
function uploadedBundle(key: string, done: NodeDiagnosticObject) {
  const upload = put.received.get(key);
  assert.ok(upload, `uploaded: ${[...put.received.keys()].join(', ')}`);
  assert.equal(upload.bytes, done.status?.bytes, 'status.bytes is the uploaded size');
  return { upload, ...bundleManifest(upload.file) };
}

test(
  'a NodeDiagnostic for the agent node is captured and uploaded by HTTP PUT to its sealed destination; another node reading every NodeDiagnostic with its own token finds no destination; one for another node is ignored',
  { timeout: 300_000 },
  async () => {
    const node = 'ndiag-a';
    await cluster.createNode(node);
    await cluster.createNode('ndiag-other');
    const agent = await agentFor(node);
    try {
      await agent.waitFor((l) => l.msg === 'writing node conditions', 30_000);
      const nd = nodeDiagnostics(cluster.adminKubeconfig);
      // A presigned URL carries its signature in the query string: it must not be echoed anywhere.
      const secret = `sig-${Math.random().toString(36).slice(2)}`;
      const { created: other } = await requestKept(cluster.adminKubeconfig, 'ndiag-other', { categories: ['kernel'] });
      const { created, token } = await requestUpload(cluster.adminKubeconfig, node, `${put.url}/a.tar.gz?X-Amz-Signature=${secret}`, {
        categories: ['kernel', 'vigil'],
      });

      const done = await finished(node);
      assert.equal(done.status?.phase, 'Succeeded', JSON.stringify(done.status));
      assert.equal(done.status?.observedUID, created.metadata?.uid);
      assert.equal(done.status?.keptOnNode, false);
      assert.ok(done.status?.startTime && done.status.completionTime);
      const { upload, manifest, entries } = uploadedBundle(`/a.tar.gz?X-Amz-Signature=${secret}`, done);
      assert.equal(upload.contentLength, upload.bytes, 'sent with a Content-Length (presigned S3 PUTs need one)');
      assert.equal(done.status?.location, undefined, 'the status names no destination');

      // Another node's agent (its pod-bound token) reads every NodeDiagnostic, as RBAC lets it:
      // no URL, no part of it, no token; only a hash and a sealed blob.
      await cluster.createNode('ndiag-snoop');
      const snoop = cluster.kubeconfigForToken(await cluster.tokenForPodOnNode('ndiag-snoop'), 'snoop');
      const seen = JSON.stringify(await nodeDiagnostics(snoop).list());
      assert.ok(seen.includes(created.metadata!.uid!), 'it did read this node’s NodeDiagnostic');
      for (const part of [secret, put.url, new URL(put.url).port, 'a.tar.gz', token]) assert.ok(!seen.includes(part), `no ${part}`);
      // Nor can it swap this node's key for its own: the status is this node's agent's alone.
      const swap = await nodeDiagnostics(snoop)
        .patchStatus(node, { destinationKey: 'x' })
        .then(
          () => 200,
          (e: unknown) => (e instanceof k8s.ApiException ? e.code : -1),
        );
      assert.equal(swap, 403, 'another node may not write this node’s status');

      assert.deepEqual([...manifest.categories].sort(), ['kernel', 'vigil']);
      assert.equal(manifest.node, node);
      const categories = new Set(manifest.collectors.map((c) => c.category));
      assert.ok(categories.has('kernel') && categories.has('vigil'), `collectors of both categories: ${[...categories].join(', ')}`);
      assert.ok(!manifest.collectors.some((c) => !['kernel', 'vigil'].includes(c.category)), 'nothing from a category not asked for');
      for (const c of manifest.collectors.filter((x) => x.file))
        assert.ok(
          entries.some((e) => e.endsWith(c.file!)),
          `${c.file} in the archive`,
        );
      assert.deepEqual(done.status?.manifest?.categories?.sort(), ['kernel', 'vigil']);
      assert.equal(done.status?.manifest?.collectors, manifest.collectors.length);

      assert.ok(!JSON.stringify(done.status).includes(secret), 'the signature is not in the status');
      assert.ok(!agent.lines.some((l) => JSON.stringify(l).includes(secret)), 'nor in the log');
      const kept = path.join(dir, `state-${node}`, 'diagnostics', 'bundles');
      assert.deepEqual(
        readdirSync(kept).filter((f) => f.endsWith('.tar.gz')),
        [],
        'an uploaded bundle is not kept on the node',
      );

      // The other node's request: the agent does not see it (field selector) and never writes it.
      const o = await nd.get('ndiag-other');
      assert.equal(o.status, undefined, 'another node’s NodeDiagnostic is left alone');
      assert.equal(o.metadata?.uid, other.metadata?.uid);
      assert.ok(![...put.received.keys()].some((k) => k.startsWith('/other')), 'nothing uploaded for it');
      // And the admission policy keeps it so: this agent's token may not write another node's status.
      const onA = cluster.kubeconfigForToken(await cluster.tokenForPodOnNode(node), 'probe-a');
      const code = await nodeDiagnostics(onA)
        .patchStatus('ndiag-other', { phase: 'Failed' })
        .then(
          () => 200,
          (e: unknown) => (e instanceof k8s.ApiException ? e.code : -1),
        );
      assert.equal(code, 403, 'a status write for another node is refused');
      assert.equal(
        await nodeDiagnostics(onA)
          .patchStatus(node, { message: 'own node' })
          .then(() => 200),
        200,
        'its own node is allowed',
      );
    } finally {
      await stopAgent(agent);
    }
  },
);

test(
  'a NodeDiagnostic whose collector hangs ends Succeeded and uploaded, with that collector cut at its timeout and recorded in status and manifest',
  { timeout: 300_000 },
  async () => {
    const node = 'ndiag-hang';
    await cluster.createNode(node);
    const t = Math.random().toString(36).slice(2, 10);
    const script = path.join(dir, `hang-${t}.sh`);
    writeFileSync(script, `#!/bin/sh\necho "hang ${t} started"\nexec sleep 600\n`, { mode: 0o755 });
    // The agent's capture child inherits the override: kernel/modules becomes a command that never ends.
    const agent = await agentFor(node, ['  collectorTimeout: 2s'], undefined, undefined, {
      VIGIL_DIAGNOSE_COMMANDS: JSON.stringify({ 'kernel/modules': [script] }),
    });
    try {
      await agent.waitFor((l) => l.msg === 'writing node conditions', 30_000);
      await requestUpload(cluster.adminKubeconfig, node, `${put.url}/hang-${t}.tar.gz`, { categories: ['kernel', 'vigil'] });
      const done = await finished(node);
      assert.equal(done.status?.phase, 'Succeeded', JSON.stringify(done.status));
      assert.equal(done.status?.manifest?.failedCollectors, 1, JSON.stringify(done.status?.manifest));
      assert.equal(done.status?.errors?.length, 1, JSON.stringify(done.status?.errors));
      assert.match(done.status?.errors?.[0] ?? '', /^kernel\/modules: .*timed out/);

      const { upload, manifest, entries } = uploadedBundle(`/hang-${t}.tar.gz`, done);
      assert.equal(manifest.errors, 1);
      const hung = manifest.collectors.find((c) => c.name === 'kernel/modules');
      assert.ok(hung, 'the hung collector is in the manifest');
      assert.equal(hung.timedOut, true);
      assert.match(hung.error ?? '', /timed out/);
      const limit = manifest.limits?.collectorTimeoutMs ?? 0;
      assert.ok(limit > 0 && limit < 600_000, `a collector timeout below the script's 600 s: ${limit}`);
      assert.ok(
        (hung.durationMs ?? 0) >= limit * 0.95 && (hung.durationMs ?? 0) < limit + 30_000,
        `cut at its ${limit} ms timeout (${hung.durationMs} ms)`,
      );
      // What it wrote before the cut is kept.
      const member = entries.find((e) => hung.file && e.endsWith(hung.file));
      assert.ok(member, `${hung.file} in the archive`);
      assert.match(tarRead(upload.file, member), new RegExp(`hang ${t} started`));
      // The rest of both categories was collected.
      for (const c of manifest.collectors.filter((x) => x !== hung)) {
        assert.equal(c.timedOut, undefined, `${c.name} did not time out`);
        assert.equal(c.error, undefined, `${c.name}: ${c.error}`);
      }
      for (const name of ['kernel/kmsg', 'kernel/info', 'vigil/version'])
        assert.ok(
          manifest.collectors.some((c) => c.name === name && c.file && entries.some((e) => e.endsWith(c.file!))),
          `${name} collected`,
        );
    } finally {
      await stopAgent(agent);
    }
  },
);

test(
  'an unreachable upload URL ends Failed, saying so, with the bundle kept on the node and served through the node proxy only to its token (none: 401, another: 403)',
  { timeout: 300_000 },
  async () => {
    const node = 'ndiag-fail';
    await cluster.createNode(node);
    await pointNodeAtThisMachine(cluster, node);
    const stateDir = path.join(dir, `state-${node}`);
    const agent = await agentFor(node);
    try {
      await agent.waitFor((l) => l.msg === 'writing node conditions', 30_000);
      // Port 1 on loopback: connection refused at once, on every attempt.
      const { token } = await requestUpload(cluster.adminKubeconfig, node, 'http://127.0.0.1:1/bundle.tar.gz', { categories: ['kernel'] });
      const done = await finished(node);
      assert.equal(done.status?.phase, 'Failed', JSON.stringify(done.status));
      assert.match(done.status?.message ?? '', /upload to the upload destination failed after 2 attempt\(s\)/);
      assert.match(done.status?.message ?? '', /ECONNREFUSED/);
      assert.ok(!JSON.stringify(done.status).includes('127.0.0.1:1'), 'the status names no destination');
      assert.match(done.status?.message ?? '', /kept on the node/);
      assert.equal(done.status?.keptOnNode, true);
      assert.ok(
        (done.status?.errors ?? []).some((e) => /attempt 2/.test(e)),
        JSON.stringify(done.status?.errors),
      );

      const location = done.status?.location ?? '';
      const m = /^\/api\/v1\/nodes\/http:ndiag-fail:(\d+)\/proxy\/diagnostics\/([^/]+\.tar\.gz)$/.exec(location);
      assert.ok(m, `location is the node proxy path: ${location}`);
      assert.equal(Number(m[1]), agent.port);
      const onDisk = path.join(stateDir, 'diagnostics', 'bundles', decodeURIComponent(m[2]));
      assert.ok(existsSync(onDisk), 'the bundle is kept under the state directory');
      assert.equal(statSync(onDisk).size, done.status?.bytes);

      // Fetched through the real API server: nodes/proxy to the Node's address and the agent's
      // port, the token in X-Vigil-Token (the proxy forwards it).
      const fetched = path.join(dir, 'fetched.tar.gz');
      assert.equal(await apiGetToFile(cluster.adminKubeconfig, location, fetched, { 'X-Vigil-Token': token }), 200);
      assert.deepEqual(readFileSync(fetched), readFileSync(onDisk));
      assert.deepEqual(bundleManifest(fetched).manifest.categories, ['kernel']);
      // Without the token, through the proxy or straight to the node's port: 401; another token: 403.
      const denied = path.join(dir, 'denied.tar.gz');
      assert.equal(await apiGetToFile(cluster.adminKubeconfig, location, denied), 401);
      assert.equal(await apiGetToFile(cluster.adminKubeconfig, location, denied, { 'X-Vigil-Token': 'x'.repeat(43) }), 403);
      const direct = `http://127.0.0.1:${agent.port}/diagnostics/${m[2]}`;
      for (const [headers, code] of [
        [{}, 401],
        [{ 'X-Vigil-Token': 'wrong' }, 403],
        [{ Authorization: `Bearer ${token}` }, 401],
      ] as const) {
        const res = await fetch(direct, { headers });
        assert.ok(!Buffer.from(await res.arrayBuffer()).includes(Buffer.from('manifest.json')), 'no bundle bytes');
        assert.equal(res.status, code, JSON.stringify(headers));
      }
      // The token grants its bundle only: no other name, no path out of its folder.
      for (const bad of ['x.tar.gz', '..%2F..%2Fstate.json', encodeURIComponent(m[2]).replace('.tar.gz', '.tar')]) {
        const res = await fetch(`http://127.0.0.1:${agent.port}/diagnostics/${bad}`, { headers: { 'X-Vigil-Token': token } });
        await res.arrayBuffer();
        assert.equal(res.status, 403, bad);
      }
    } finally {
      await stopAgent(agent);
    }
  },
);

/** A loopback listener that counts connections and answers 403 with a secret in the body. */
async function secretKeeper(secret: string): Promise<{ url: string; connections: () => number; close: () => Promise<void> }> {
  let n = 0;
  const s = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(403, { 'content-type': 'text/plain' }).end(`<Error>AccessDenied; token=${secret}</Error>`));
  });
  s.on('connection', () => n++);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`,
    connections: () => n,
    close: () => new Promise<void>((r) => (s.closeAllConnections(), s.close(() => r()))),
  };
}

test(
  'an upload destination on loopback (by address or by name) is refused before any capture and nothing is sent; allowed, a 403 body with a secret never reaches the status',
  { timeout: 300_000 },
  async () => {
    const node = 'ndiag-ssrf';
    await cluster.createNode(node);
    const secret = `tok-${Math.random().toString(36).slice(2)}`;
    const keeper = await secretKeeper(secret);
    const nd = nodeDiagnostics(cluster.adminKubeconfig);
    // https only and no allowed host: the defaults (http allowed here so that the address is what is refused).
    let agent = await agentFor(node, [], undefined, undefined, {}, ['  upload: {allowHttp: true}']);
    try {
      await agent.waitFor((l) => l.msg === 'writing node conditions', 30_000);
      // Only loopback destinations here, where the test's server counts what arrives (a broken
      // check must not send to real addresses); the unit tests cover the other address classes.
      const port = new URL(keeper.url).port;
      const cases: [string, string][] = [
        [`${keeper.url}/b.tar.gz`, 'a loopback'],
        [`http://localhost:${port}/b.tar.gz`, 'a loopback'],
        [`http://[::ffff:127.0.0.1]:${port}/b.tar.gz`, 'a loopback'],
      ];
      for (const [url, kind] of cases) {
        await requestUpload(cluster.adminKubeconfig, node, url, { categories: ['kernel'] });
        const done = await finished(node);
        assert.equal(done.status?.phase, 'Failed', JSON.stringify(done.status));
        assert.equal(
          done.status?.message,
          `upload refused: the upload destination is ${kind} address (diagnostics.upload.allowedHosts lists hosts allowed anyway)`,
        );
        assert.equal(done.status?.startTime, undefined, 'refused before any capture');
        await nd.delete(node);
        await waitFor('deleted', async () => !(await nd.list()).some((o) => o.metadata?.name === node));
      }
      assert.equal(keeper.connections(), 0, 'the loopback server saw no connection');
      await stopAgent(agent);

      // The same server allowed (as a test bucket would be): its 403 and the secret in its body.
      agent = await agentFor(node, [], undefined, undefined, {}, ['  upload: {allowedHosts: ["127.0.0.1"], allowHttp: true}']);
      await agent.waitFor((l) => l.msg === 'writing node conditions', 30_000);
      await requestUpload(cluster.adminKubeconfig, node, `${keeper.url}/b.tar.gz`, { categories: ['kernel'] });
      const done = await finished(node);
      assert.equal(done.status?.phase, 'Failed', JSON.stringify(done.status));
      assert.ok(keeper.connections() >= 1, 'the allowed host was reached');
      assert.match(done.status?.message ?? '', /\(attempt 1: HTTP 403 from the upload destination\)/);
      assert.ok(!JSON.stringify(done.status).includes(secret), 'the body is not in the status');
      assert.ok(!agent.lines.some((l) => JSON.stringify(l).includes(secret)), 'nor in the log');
    } finally {
      if (agents.has(agent)) await stopAgent(agent);
      await keeper.close();
    }
  },
);

test(
  'a Fatal record on /dev/kmsg starts one automatic capture, uploaded and shown as Node Events; a second within the period does not, across a restart',
  { timeout: 400_000 },
  async () => {
    const node = 'ndiag-auto';
    await cluster.createNode(node);
    const stateDir = path.join(dir, `state-${node}`);
    // Other tests write Fatal Xids to the shared ring: this agent captures only on its own rule's
    // reason (autoCapture.match), raised by a line carrying this run's token.
    const token = Math.random()
      .toString(36)
      .slice(2, 10)
      .replace(/[^a-z0-9]/g, '');
    const reason = `DiagAuto${token}Fatal`;
    const rules = path.join(dir, 'auto-rules.yaml');
    writeFileSync(
      rules,
      [
        'rules:',
        `  - pattern: 'vigil-diag-test ${token} fault on (?<dev>\\S+)'`,
        `    reason: ${reason}`,
        '    severity: Fatal',
        '    condition: KernelReady',
        '    recovery: {ttl: 1h}',
        "    entity: 'dev:{dev}'",
        '',
      ].join('\n'),
    );
    const auto = [
      '  autoCapture:',
      '    enabled: true',
      `    uploadUrl: "${put.url}/auto/{node}-{time}.tar.gz"`,
      '    minInterval: 1h',
      '    categories: [kernel]',
      `    match: '^${reason}$'`,
    ];
    // Seen by the agent before going on: a storm elsewhere can overrun the shared ring, so a
    // record that never arrives is written again under a new name.
    const fault = async (a: AgentProcess, dev: string): Promise<string> => {
      for (let i = 0; ; i++) {
        const entity = `dev:${dev}-${i}`;
        writeKmsg(`vigil-diag-test ${token} fault on ${dev}-${i}`, 4);
        try {
          await a.waitFor((l) => l.event === 'finding' && l.reason === reason && l.entity === entity, 15_000);
          return entity;
        } catch (err) {
          if (i >= 3) throw err;
        }
      }
    };
    const skipped = (l: Record<string, unknown>) =>
      l.event === 'diagnostics' && String(l.msg).startsWith(`no automatic capture for ${reason}:`);
    const uploads = () => [...put.received.keys()].filter((k) => k.startsWith(`/auto/${node}-`));
    let agent = await agentFor(node, auto, stateDir, rules);
    try {
      await agent.waitFor((l) => l.msg === 'writing node conditions', 30_000);
      const first = await fault(agent, 'd1');
      await waitFor('the automatic upload', () => uploads().length === 1, 240_000, 250);
      const file = put.received.get(uploads()[0])!.file;
      assert.deepEqual(bundleManifest(file).manifest.categories, ['kernel']);
      const evs = await waitFor(
        'capture Events on the Node',
        async () => {
          const e = await eventsFor(cluster, node);
          return e.some((x) => x.reason === 'DiagnosticBundleUploaded') && e;
        },
        30_000,
      );
      assert.equal(
        evs.find((e) => e.reason === 'DiagnosticCaptureStarted')?.note,
        `Fatal ${reason} (${first}): collecting a diagnostic bundle (kernel)`,
      );
      assert.match(evs.find((e) => e.reason === 'DiagnosticBundleUploaded')?.note ?? '', /uploaded to http:\/\/127\.0\.0\.1:\d+\/auto\//);
      const metrics = String(await agent.get('/metrics'));
      assert.match(metrics, /vigil_diagnostics_captures_total\{trigger="fatal",result="ok"\} 1/);
      assert.match(metrics, /vigil_diagnostics_uploads_total\{trigger="fatal",result="ok"\} 1/);

      // A second Fatal fault within minInterval: logged as rate-limited, no capture.
      await fault(agent, 'd2');
      await agent.waitFor(skipped, 30_000);
      assert.match(String(await agent.get('/metrics')), /vigil_diagnostics_auto_skipped_total\{why="rate_limited"\} 1/);
      await stopAgent(agent);

      // The last capture time is in the state directory: a restart does not reopen the period.
      agent = await agentFor(node, auto, stateDir, rules);
      await agent.waitFor((l) => l.msg === 'writing node conditions', 30_000);
      await fault(agent, 'd3');
      await agent.waitFor(skipped, 30_000);
      assert.equal(uploads().length, 1, 'still one automatic capture');
      assert.equal((await eventsFor(cluster, node)).filter((e) => e.reason === 'DiagnosticCaptureStarted').length, 1);
    } finally {
      if (agents.has(agent)) await stopAgent(agent);
    }
  },
);
