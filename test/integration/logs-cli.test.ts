/**
 * `vigil logs` as an operator runs it (the real CLI process, with only the rights of
 * deploy/rbac-logs.yaml) against a real kube-apiserver and two real agents: one bundle is PUT to
 * an upload URL (sealed to the agent's key, never in the spec), the other kept on its node and
 * downloaded through the node proxy with the request's token; both end up in --output DIR and the
 * NodeDiagnostics are deleted afterwards. A kept bundle is fetched again with --bundle.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import type * as k8s from '@kubernetes/client-node';
import { kernelLogOnlyConfig, startAgent, type AgentProcess } from '../helpers/agent-process.ts';
import { startCluster, type TestCluster } from '../helpers/cluster.ts';
import {
  RBAC_LOGS_YAML,
  bundleManifest,
  installCrd,
  nodeDiagnostics,
  pointNodeAtThisMachine,
  startPutServer,
  type PutServer,
} from '../helpers/node-diagnostic.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
let cluster: TestCluster;
let dir: string;
let put: PutServer;
const agents: AgentProcess[] = [];

before(async () => {
  cluster = await startCluster();
  dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-logs-'));
  await installCrd(cluster);
});
after(async () => {
  for (const a of agents) await a.stop();
  await put?.close();
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function runCli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [path.join(ROOT, 'bin/vigil.js'), ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

test(
  'vigil logs: two nodes, one bundle by upload URL and one by node delivery, both in --output DIR; the resources are deleted',
  { timeout: 400_000 },
  async () => {
    const out = path.join(dir, 'out');
    // The test's "bucket" writes what it is sent into the same DIR.
    put = await startPutServer(out);
    const nodes = ['logs-up', 'logs-keep'];
    for (const node of nodes) {
      await cluster.createNode(node);
      await pointNodeAtThisMachine(cluster, node);
      const config = path.join(dir, `${node}.yaml`);
      writeFileSync(
        config,
        kernelLogOnlyConfig([
          'kubernetes:',
          '  mode: "on"',
          '  coalesce: 100ms',
          // The test's "bucket" is on loopback, refused unless allowed.
          'diagnostics:',
          '  upload: {allowedHosts: ["127.0.0.1"], allowHttp: true}',
        ]),
      );
      agents.push(
        await startAgent([
          '--kubeconfig',
          cluster.vigilKubeconfig,
          '--node-name',
          node,
          '--state-dir',
          path.join(dir, `state-${node}`),
          '--config',
          config,
          '--listen',
          '0.0.0.0:0',
        ]),
      );
    }
    for (const a of agents) await a.waitFor((l) => l.msg === 'writing node conditions', 30_000);

    // The operator holds exactly the shipped role for `vigil logs`.
    const role = YAML.parse(readFileSync(RBAC_LOGS_YAML, 'utf8')) as { rules: k8s.V1PolicyRule[] };
    const operator = await cluster.serviceAccountKubeconfig('logs-operator', role.rules);

    const r = await runCli([
      'logs',
      ...nodes,
      '--kubeconfig',
      operator,
      '--output',
      out,
      '--upload-url',
      `logs-up=${put.url}/logs-up.tar.gz?X-Amz-Signature=abc`,
      '--categories',
      'kernel,vigil',
    ]);
    assert.equal(r.code, 0, `stdout: ${r.stdout}\nstderr: ${r.stderr}`);

    const files = readdirSync(out).filter((f) => f.endsWith('.tar.gz'));
    assert.ok(files.includes('logs-up.tar.gz'), `uploaded bundle in DIR: ${files.join(', ')}`);
    const kept = files.find((f) => f.startsWith('logs-keep-'));
    assert.ok(kept, `node-delivered bundle downloaded into DIR: ${files.join(', ')}`);
    for (const [f, node] of [
      ['logs-up.tar.gz', 'logs-up'],
      [kept, 'logs-keep'],
    ] as const) {
      const { manifest } = bundleManifest(path.join(out, f));
      assert.equal(manifest.node, node);
      assert.deepEqual([...manifest.categories].sort(), ['kernel', 'vigil']);
    }
    assert.equal(readdirSync(out).filter((f) => f.endsWith('.part')).length, 0, 'no partial download left');

    // One progress line per node and phase, then where each bundle went.
    assert.match(r.stdout, /^logs-up\s+Succeeded\s/m);
    assert.match(r.stdout, /^logs-keep\s+Succeeded\s/m);
    assert.match(
      r.stdout,
      new RegExp(`^logs-up: uploaded to ${put.url.replace(/[.]/g, '\\.')}/logs-up\\.tar\\.gz\\?… \\(\\d+ bytes\\)`, 'm'),
    );
    assert.match(r.stdout, new RegExp(`^logs-keep: saved ${path.join(out, kept).replace(/[.]/g, '\\.')} \\(\\d+ bytes\\)`, 'm'));
    assert.ok(!r.stdout.includes('X-Amz-Signature=abc'), 'the signature is not printed');

    assert.deepEqual(await nodeDiagnostics(cluster.adminKubeconfig).list(), [], 'the NodeDiagnostics are deleted afterwards');

    // The kept bundle again, by name (as for an automatic capture named in its Event): a new token is granted it.
    const again = path.join(dir, 'again');
    const b = await runCli(['logs', 'logs-keep', '--kubeconfig', operator, '--output', again, '--bundle', kept]);
    assert.equal(b.code, 0, `stdout: ${b.stdout}\nstderr: ${b.stderr}`);
    assert.deepEqual(readFileSync(path.join(again, kept)), readFileSync(path.join(out, kept)));
  },
);

test('vigil logs refuses bad arguments with exit 2, naming the flag', { timeout: 60_000 }, async () => {
  const bad = await runCli(['logs', 'n1', '--kubeconfig', cluster.adminKubeconfig, '--categories', 'kernel,bogus']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--categories: "bogus" is not one of kernel, gpu/);
  await cluster.createNode('logs-n1');
  await cluster.createNode('logs-n2');
  const shared = await runCli([
    'logs',
    'logs-n1',
    'logs-n2',
    '--kubeconfig',
    cluster.adminKubeconfig,
    '--upload-url',
    'https://bucket.example/x.tar.gz',
  ]);
  assert.equal(shared.code, 2);
  assert.match(shared.stderr, /--upload-url: 2 nodes would PUT to the same URL; put \{node\} in it/);
  const missing = await runCli(['logs', 'no-such-node', '--kubeconfig', cluster.adminKubeconfig]);
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /404: nodes "no-such-node" not found/);
});
