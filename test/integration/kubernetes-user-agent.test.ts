/**
 * Vigil names itself to the API server: every request the real `vigil run` process makes carries
 * `User-Agent: vigil/<version>`, as the API server's own audit log records it.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startAgent, kernelLogOnlyConfig, kubeAgentArgs } from '../helpers/agent-process.ts';
import { startCluster, waitFor, type TestCluster } from '../helpers/cluster.ts';

const version = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
const VIGIL_USER = 'system:serviceaccount:vigil:vigil';

interface AuditEvent {
  verb: string;
  requestURI: string;
  userAgent?: string;
  user: { username: string };
  objectRef?: { resource?: string; subresource?: string };
}

let cluster: TestCluster;
let dir: string;
let auditLog: string;
before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-k8s-ua-'));
  auditLog = path.join(dir, 'audit.log');
  const policy = path.join(dir, 'audit-policy.yaml');
  writeFileSync(
    policy,
    ['apiVersion: audit.k8s.io/v1', 'kind: Policy', 'omitStages: [RequestReceived]', 'rules:', '- level: Metadata', ''].join('\n'),
  );
  // up.sh appends these flags to kube-apiserver's; this test file runs in its own process.
  process.env.VIGIL_APISERVER_EXTRA_ARGS = `--audit-policy-file=${policy} --audit-log-path=${auditLog}`;
  cluster = await startCluster();
});
after(async () => {
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const vigilRequests = (): AuditEvent[] =>
  existsSync(auditLog)
    ? readFileSync(auditLog, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as AuditEvent)
        .filter((e) => e.user.username === VIGIL_USER)
    : [];

test('every request of the agent to the API server carries User-Agent vigil/<version>', { timeout: 120_000 }, async (t) => {
  const node = 'agent-user-agent';
  await cluster.createNode(node);
  const config = path.join(dir, 'vigil.yaml');
  writeFileSync(config, kernelLogOnlyConfig(['kubernetes:', '  mode: "on"', '  coalesce: 100ms']));
  const agent = await startAgent(kubeAgentArgs(cluster.vigilKubeconfig, node, path.join(dir, 'state'), config));
  t.after(() => agent.stop());
  // A read of the Node and a status patch: the two kinds of request the sink makes on start.
  const seen = await waitFor(
    'the agent reading the Node and patching its status',
    () => {
      const reqs = vigilRequests();
      const read = reqs.some((e) => e.verb === 'get' && e.objectRef?.resource === 'nodes');
      const patch = reqs.some((e) => e.verb === 'patch' && e.objectRef?.subresource === 'status');
      return read && patch && reqs;
    },
    60_000,
  );
  assert.equal(await agent.stop(), 0);
  const agents = new Set([...seen, ...vigilRequests()].map((e) => e.userAgent));
  assert.deepEqual([...agents], [`vigil/${version}`]);
});
