/**
 * The README's Uninstall section: `helm uninstall` leaves Vigil's conditions, quarantine marks and
 * the NodeDiagnostic CRD on purpose, and the README's commands between `<!-- uninstall:start -->`
 * and `<!-- uninstall:end -->` remove them by hand. Run here as written, by bash with the real
 * kubectl, against a real kube-apiserver: Vigil's conditions gone and the kubelet's kept, only
 * Vigil's cordon undone (an operator's stays), its taint, label and annotation gone, the CRD gone.
 */
import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { startCluster, waitFor } from '../helpers/cluster.ts';
import { installCrd, nodeDiagnostics } from '../helpers/node-diagnostic.ts';
import { newToken, tokenSHA256 } from '../../src/diagnostics/index.ts';
import { KUBECTL, ROOT, ensureTools } from './tools.ts';
import { tempDir } from '../helpers/temp-dir.ts';

before(() => ensureTools());

const VIGIL_TYPES = ['KernelReady', 'NetworkingReady', 'StorageReady', 'ContainerRuntimeReady', 'AcceleratedHardwareReady'];

/** The README's fenced block between the uninstall markers. */
function readmeUninstall(): string {
  const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const m = /<!-- uninstall:start -->\n```sh\n([\s\S]*?)```\n<!-- uninstall:end -->/.exec(readme);
  assert.ok(m, 'README.md has the uninstall block');
  return m[1];
}

function conditions(status: string): k8s.V1NodeCondition[] {
  const now = new Date();
  return VIGIL_TYPES.map((type) => ({ type, status, reason: `${type}Reason`, lastHeartbeatTime: now, lastTransitionTime: now }));
}

test("the README's commands remove what helm uninstall leaves: conditions, quarantine marks, NodeDiagnostics and their CRD", async (t) => {
  const cluster = await startCluster();
  t.after(() => cluster.stop());
  await installCrd(cluster);
  await nodeDiagnostics(cluster.adminKubeconfig).create('gpu-1', { tokenSHA256: tokenSHA256(newToken()) });

  await cluster.createNode('node-ok', conditions('True'));
  // Quarantined by Vigil: cordoned by it (annotated), tainted and labelled.
  await cluster.createNode('gpu-1', conditions('False'));
  // An operator cordoned this one; Vigil only tainted and labelled it.
  await cluster.createNode('gpu-2', conditions('False'));
  const mark = (cordonedByVigil: boolean) => ({
    metadata: {
      labels: { 'vigil.dev/quarantined': 'true' },
      ...(cordonedByVigil ? { annotations: { 'vigil.dev/cordoned-by-vigil': 'true' } } : {}),
    },
    spec: { unschedulable: true, taints: [{ key: 'vigil.dev/unhealthy', value: 'AcceleratedHardwareReady', effect: 'NoSchedule' }] },
  });
  const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
  await cluster.admin.core.patchNode({ name: 'gpu-1', body: mark(true) }, merge);
  await cluster.admin.core.patchNode({ name: 'gpu-2', body: mark(false) }, merge);

  // kubectl as an operator has it: on the PATH, the admin kubeconfig.
  const bin = tempDir('vigil-uninstall-');
  symlinkSync(KUBECTL, path.join(bin, 'kubectl'));
  const r = spawnSync('bash', ['-euo', 'pipefail', '-c', readmeUninstall()], {
    encoding: 'utf8',
    env: { ...process.env, PATH: `${bin}:${process.env.PATH}`, KUBECONFIG: cluster.adminKubeconfig },
    timeout: 300_000,
  });
  assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);

  for (const name of ['node-ok', 'gpu-1', 'gpu-2']) {
    const node = await cluster.readNode(name);
    assert.deepEqual(
      node.status?.conditions?.map((c) => c.type),
      ['Ready'],
      `${name}: only the kubelet's condition is left`,
    );
    assert.equal(node.metadata?.labels?.['vigil.dev/quarantined'], undefined, name);
    assert.equal(node.metadata?.annotations?.['vigil.dev/cordoned-by-vigil'], undefined, name);
    // (the API server's own node.kubernetes.io/not-ready taint stays: no kubelet here)
    assert.deepEqual(
      (node.spec?.taints ?? []).filter((x) => x.key.startsWith('vigil.dev/')),
      [],
      name,
    );
  }
  assert.ok(!(await cluster.readNode('gpu-1')).spec?.unschedulable, 'the node Vigil cordoned is schedulable again');
  assert.equal((await cluster.readNode('gpu-2')).spec?.unschedulable, true, "the operator's cordon stays");
  const ext = cluster.admin.kc.makeApiClient(k8s.ApiextensionsV1Api);
  await waitFor('the NodeDiagnostic CRD deleted', async () => {
    const crds = await ext.listCustomResourceDefinition();
    return !crds.items.some((c) => c.metadata?.name === 'nodediagnostics.vigil.dev');
  });
});
