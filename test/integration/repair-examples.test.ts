/**
 * The repair-engine examples in deploy/examples/ (docs/repair-engines.md) on a real v1.34 API
 * server with each engine's CRD installed: Karpenter's NodePool from the CRDs of the
 * sigs.k8s.io/karpenter v1.15.0 module (copied to .cache/karpenter/crds/ by
 * test/cluster/build-karpenter.sh), medik8s's NodeHealthCheck from a minimal CRD written from its
 * documented API (test/fixtures/medik8s-nodehealthcheck-crd.yaml: its module is not served), and
 * the EKS Helm values rendered by the real helm, checked by Vigil's own config loader and applied.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import * as k8s from '@kubernetes/client-node';
import { CONDITION_TYPES } from '../../src/api/index.ts';
import { parseConfig } from '../../src/settings/index.ts';
import { startCluster, waitFor, type TestCluster } from '../helpers/cluster.ts';
import { KUBECTL, ensureTools, helmTemplate, ok, run, type Manifest } from '../deploy/tools.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const EXAMPLES = path.join(ROOT, 'deploy/examples');
const KARPENTER_CRDS = path.join(ROOT, '.cache/karpenter/crds');
const NHC_CRD = path.join(ROOT, 'test/fixtures/medik8s-nodehealthcheck-crd.yaml');
/** The EKS node monitoring agent's condition types (Karpenter's AWS provider and EKS auto repair act on them). */
const NMA_TYPES = ['KernelReady', 'NetworkingReady', 'StorageReady', 'ContainerRuntimeReady', 'AcceleratedHardwareReady'];

let cluster: TestCluster;
let crds: k8s.ApiextensionsV1Api;

before(async () => {
  if (!existsSync(path.join(KARPENTER_CRDS, 'karpenter.sh_nodepools.yaml'))) {
    throw new Error(`${KARPENTER_CRDS} has no Karpenter CRDs: run test/cluster/build-karpenter.sh (it copies them from the module)`);
  }
  ensureTools();
  cluster = await startCluster();
  crds = cluster.admin.kc.makeApiClient(k8s.ApiextensionsV1Api);
  // kubectl, not cluster.apply(): @kubernetes/client-node's object API drops a CRD's x-kubernetes-*
  // fields (its CEL validations, int-or-string markers) on the way in.
  const kubectl = (args: string[]) => ok(run(KUBECTL, ['--kubeconfig', cluster.adminKubeconfig, ...args]), `kubectl ${args.join(' ')}`);
  for (const f of readdirSync(KARPENTER_CRDS).filter((n) => n.endsWith('.yaml')))
    kubectl(['apply', '--server-side', '-f', path.join(KARPENTER_CRDS, f)]);
  kubectl(['apply', '--server-side', '-f', NHC_CRD]);
  for (const name of ['nodepools.karpenter.sh', 'nodehealthchecks.remediation.medik8s.io']) {
    await waitFor(
      `CRD ${name} Established`,
      async () =>
        (await crds.readCustomResourceDefinition({ name })).status?.conditions?.some(
          (c) => c.type === 'Established' && c.status === 'True',
        ),
      30_000,
      200,
    );
  }
});
after(async () => {
  await cluster?.stop();
});

function load(file: string): Manifest {
  const docs = YAML.parseAllDocuments(readFileSync(path.join(EXAMPLES, file), 'utf8')).map((d) => d.toJS() as Manifest | null);
  const objs = docs.filter((d): d is Manifest => Boolean(d?.kind));
  assert.equal(objs.length, 1, `${file}: one object`);
  return objs[0];
}

/** Creates an object with the admin client: its HTTP status and, on 201, the stored object. */
async function create(obj: Manifest): Promise<{ status: number; stored?: Manifest; message?: string }> {
  try {
    const stored = await cluster.admin.objects.create(obj);
    return { status: 201, stored };
  } catch (err) {
    if (!(err instanceof k8s.ApiException)) throw err;
    let message = String(err.body);
    try {
      message = (JSON.parse(message) as { message: string }).message;
    } catch {
      /* not a Status */
    }
    return { status: err.code, message };
  }
}

interface NodePoolSpec {
  template: { spec: { nodeClassRef: { group: string; kind: string }; requirements: { key: string }[] } };
  disruption: { budgets: { nodes: string; reasons?: string[] }[] };
}

test("the Karpenter NodePool example is accepted by Karpenter v1.15.0's NodePool CRD as written, and repair budgets are paced", async () => {
  const pool = load('karpenter/nodepool-gpu.yaml');
  const r = await create(pool);
  assert.equal(r.status, 201, r.message);
  const spec = r.stored!.spec as NodePoolSpec;
  // Nothing the example sets was pruned as unknown by the CRD's schema.
  assert.deepEqual(spec.template.spec.requirements, (pool.spec as NodePoolSpec).template.spec.requirements);
  assert.deepEqual(spec.disruption.budgets, [{ nodes: '1', reasons: ['Unhealthy'] }, { nodes: '10%' }]);
  assert.equal(spec.template.spec.nodeClassRef.kind, 'EC2NodeClass');

  // The CRD really validates: a budget reason Karpenter does not know is refused.
  const bad = structuredClone(pool);
  bad.metadata.name = 'gpu-bad-reason';
  (bad.spec as NodePoolSpec).disruption.budgets = [{ nodes: '1', reasons: ['Repair'] }];
  const refused = await create(bad);
  assert.equal(refused.status, 422);
  assert.match(refused.message ?? '', /Unsupported value: "Repair"/);

  // ...and its CEL rules are in force (kubectl kept the CRD's x-kubernetes-validations): a budget
  // with a schedule needs a duration.
  const unscheduled = structuredClone(pool);
  unscheduled.metadata.name = 'gpu-bad-budget';
  (unscheduled.spec as NodePoolSpec).disruption.budgets = [{ nodes: '1', schedule: '@daily' } as { nodes: string }];
  const cel = await create(unscheduled);
  assert.equal(cel.status, 422);
  assert.match(cel.message ?? '', /'schedule' must be set with 'duration'/);
});

interface NhcSpec {
  unhealthyConditions: { type: string; status: string; duration: string }[];
  minHealthy?: string;
}

test("the medik8s NodeHealthCheck example is accepted and remediates on each of Vigil's condition types going False", async () => {
  const nhc = load('medik8s/nodehealthcheck-gpu.yaml');
  const r = await create(nhc);
  assert.equal(r.status, 201, r.message);
  const spec = r.stored!.spec as NhcSpec;
  const vigil = spec.unhealthyConditions.filter((c) => (CONDITION_TYPES as readonly string[]).includes(c.type));
  assert.deepEqual(vigil.map((c) => c.type).sort(), [...CONDITION_TYPES].sort(), 'every Vigil condition type');
  assert.ok(
    vigil.every((c) => c.status === 'False'),
    'on False only: Unknown means Vigil cannot see, not that the node is broken',
  );
  assert.equal(vigil.find((c) => c.type === 'AcceleratedHardwareReady')?.duration, '10m');
  assert.equal(spec.minHealthy, '80%');

  const bad = structuredClone(nhc);
  bad.metadata.name = 'vigil-bad-duration';
  (bad.spec as NhcSpec).unhealthyConditions = [{ type: 'AcceleratedHardwareReady', status: 'False', duration: '10 minutes' }];
  const refused = await create(bad);
  assert.equal(refused.status, 422);
  assert.match(refused.message ?? '', /unhealthyConditions\[0\]\.duration/);
});

test('the EKS Helm values render a configuration Vigil accepts, with the condition names each mode needs, and apply to the API server', async () => {
  for (const [file, release, names] of [
    ['eks/values-instead-of-nma.yaml', 'eks-instead', NMA_TYPES],
    ['eks/values-beside-nma.yaml', 'eks-beside', NMA_TYPES.map((t) => `Vigil${t}`)],
  ] as const) {
    const values = YAML.parse(readFileSync(path.join(EXAMPLES, file), 'utf8')) as Record<string, unknown>;
    const docs = helmTemplate(values, { namespace: release, release });
    const map = docs.find((d) => d.kind === 'ConfigMap' && (d.data as Record<string, string> | undefined)?.['vigil.yaml']);
    assert.ok(map, `${file}: a ConfigMap with vigil.yaml`);
    const config = parseConfig((map.data as Record<string, string>)['vigil.yaml'], `${file} (rendered)`);
    assert.deepEqual(
      NMA_TYPES.map((t) => config.conditions.names[t as keyof typeof config.conditions.names]),
      names,
      `${file}: condition names`,
    );
    if (release === 'eks-beside')
      assert.ok(
        names.every((n) => !NMA_TYPES.includes(n)),
        'beside the agent, no type is shared',
      );
    await cluster.admin.core.createNamespace({ body: { metadata: { name: release } } });
    for (const d of docs) {
      const r = await create(d);
      assert.equal(r.status, 201, `${file}: ${d.kind}/${d.metadata.name}: ${r.message}`);
    }
  }
});
