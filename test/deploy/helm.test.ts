/**
 * The Helm chart (deploy/helm/vigil) with the real helm v4 and kubectl built from the Go module
 * proxy: lint, render with the defaults and with every switch flipped, apply the rendered manifests
 * to a real kube-apiserver with server-side apply, and check that the pod asks for no privilege,
 * host namespace or host mount that no enabled monitor uses.
 */
import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import type * as k8s from '@kubernetes/client-node';
import { startCluster } from '../helpers/cluster.ts';
import { README, readmeWithTable } from '../../scripts/gen-values-doc.ts';
import { parseConfig } from '../../src/settings/index.ts';
import { CHART, HELM, KUBECTL, ROOT, chartValues, ensureTools, helmTemplate, ok, only, run, type Manifest } from './tools.ts';
import { tempDir } from '../helpers/temp-dir.ts';

const MONITORS = ['kernelLog', 'gpu', 'kernel', 'networking', 'storage', 'runtime'] as const;
type Monitor = (typeof MONITORS)[number];

/** Every value changed from its default: booleans negated, names, lists and strings replaced. */
const FLIPPED = {
  monitors: Object.fromEntries(MONITORS.map((m) => [m, false])),
  conditions: {
    names: {
      KernelReady: 'VigilKernelReady',
      NetworkingReady: 'VigilNetworkingReady',
      StorageReady: 'VigilStorageReady',
      ContainerRuntimeReady: 'VigilContainerRuntimeReady',
      AcceleratedHardwareReady: 'VigilAcceleratedHardwareReady',
    },
  },
  xid: { fatal: [48, 79], ignore: [13, 31] },
  gpu: { hostLibraryDir: '', runtimeClassName: 'nvidia' },
  privileged: false,
  stateHostPath: '/var/lib/vigil-flipped',
  port: 19464,
  logLevel: 'debug',
  eventNamespace: 'kube-system',
  serviceAccount: { name: 'node-vigil' },
  admissionPolicy: false,
  podMonitor: { enabled: true, interval: '30s', labels: { release: 'prom' } },
  serviceMonitor: { enabled: true, interval: '30s', labels: { release: 'prom' } },
  prometheusRule: { enabled: true, labels: { release: 'prom' }, for: '10m' },
  grafanaDashboard: { enabled: true, label: 'grafana_dashboard', labelValue: '1', folder: 'Nodes' },
  extraConfig: { engine: { repeatWindow: '2m' } },
  quarantine: { enabled: true, dryRun: true, maxQuarantinedShare: 0.1 },
  diagnostics: {
    requests: { enabled: false },
    autoCapture: {
      enabled: true,
      uploadUrl: 'https://bundles.example.com/{node}/{time}.tar.gz',
      minInterval: '30m',
      categories: ['kernel', 'gpu'],
      match: '^NvidiaXID',
    },
    keep: { maxBundles: 3, maxBytes: 1073741824, retention: '12h' },
    upload: { allowedHosts: ['minio.internal'], allowHttp: true },
    uploadAttempts: 3,
    collectorTimeout: '10s',
  },
};

/** GPU and kernel log on, the rest as flipped: the pod must still drop privileges it does not need. */
const ON_UNPRIVILEGED = { ...FLIPPED, monitors: Object.fromEntries(MONITORS.map((m) => [m, true])), gpu: { hostLibraryDir: '/usr/lib64' } };

before(() => ensureTools());

function podSpec(docs: Manifest[]): k8s.V1PodSpec {
  const spec = only<k8s.V1DaemonSet>(docs, 'DaemonSet').spec?.template.spec;
  assert.ok(spec);
  return spec;
}

/** The parts of Vigil's configuration file these tests read. */
interface VigilConfig {
  listen: string;
  conditions: { names: Record<string, string> };
  xid: { fatal: number[]; ignore: number[] };
  kernelLog: { enabled: boolean };
  gpu: { enabled: boolean; libraryPath?: string };
  kubernetes: { mode: string };
  engine?: { repeatWindow?: string };
  diagnostics: Record<string, unknown>;
  monitors: { hostRoot: string } & Record<string, { enabled: boolean } | undefined>;
}

function vigilConfig(docs: Manifest[]): VigilConfig {
  const maps = docs.filter((d) => d.kind === 'ConfigMap') as unknown as k8s.V1ConfigMap[];
  const text = maps.map((m) => m.data?.['vigil.yaml']).find(Boolean);
  assert.ok(text, 'a ConfigMap with vigil.yaml');
  return YAML.parse(text) as VigilConfig;
}

test('helm lint --strict passes with the defaults and with every switch flipped', () => {
  const dir = tempDir('vigil-helm-');
  for (const [name, values] of [
    ['defaults', {}],
    ['flipped', FLIPPED],
    ['on-unprivileged', ON_UNPRIVILEGED],
  ] as const) {
    const file = path.join(dir, `${name}.json`);
    writeFileSync(file, JSON.stringify(values));
    const r = run(HELM, ['lint', '--strict', CHART, '-f', file]);
    assert.equal(r.code, 0, `${name}: ${r.out}${r.err}`);
    assert.match(r.out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
    assert.doesNotMatch(r.out, /\[(WARNING|ERROR)\]/, r.out);
  }
});

test('values.schema.json rejects values Vigil cannot run with', () => {
  for (const bad of [
    { port: 0 },
    { monitors: { kernelLog: 'yes' } },
    { conditions: { names: { KernelReady: 'bad name' } } },
    { xid: { fatal: [0] } },
    { quorum: true },
    { stateHostPath: 'relative' },
  ]) {
    const r = run(HELM, ['template', 'vigil', CHART, '-f', '-'], { input: JSON.stringify(bad) });
    assert.notEqual(r.code, 0, `accepted ${JSON.stringify(bad)}`);
    assert.match(r.err, /values don't meet the specifications of the schema/);
  }
});

test("values.yaml holds exactly the schema's defaults, so the README table generated from the schema is the chart's", () => {
  const schema = JSON.parse(readFileSync(path.join(CHART, 'values.schema.json'), 'utf8')) as SchemaNode;
  const defaults = (node: SchemaNode): unknown =>
    node.properties && node.default === undefined
      ? Object.fromEntries(Object.entries(node.properties).flatMap(([k, v]) => (k === 'global' ? [] : [[k, defaults(v)]])))
      : node.default;
  assert.deepEqual(defaults(schema), chartValues());
});

test("the README's table of Helm values is the one generated from values.schema.json", () => {
  const readme = readFileSync(README, 'utf8');
  assert.equal(readme, readmeWithTable(readme), 'README.md is stale: run `npx tsx scripts/gen-values-doc.ts --write`');
});

interface SchemaNode {
  properties?: Record<string, SchemaNode>;
  default?: unknown;
}

test('the rendered Vigil configuration follows the values and passes `vigil check-config`', () => {
  const dir = tempDir('vigil-helm-config-');
  for (const [name, values] of [
    ['defaults', {}],
    ['flipped', FLIPPED],
  ] as const) {
    const config = vigilConfig(helmTemplate(values));
    const file = path.join(dir, `${name}.yaml`);
    writeFileSync(file, YAML.stringify(config));
    const r = run(process.execPath, [path.join(ROOT, 'bin/vigil.js'), 'check-config', file]);
    assert.equal(r.code, 0, `${name}: ${r.out}${r.err}`);
  }
  const flipped = vigilConfig(helmTemplate(FLIPPED));
  assert.deepEqual(flipped.conditions.names, FLIPPED.conditions.names);
  assert.deepEqual(flipped.xid, FLIPPED.xid);
  assert.equal(flipped.kernelLog.enabled, false);
  assert.equal(flipped.gpu.enabled, false);
  for (const m of ['kernel', 'networking', 'storage', 'runtime']) assert.equal(flipped.monitors[m]?.enabled, false, m);
  assert.equal(flipped.listen, '0.0.0.0:19464');
  assert.equal(flipped.engine?.repeatWindow, '2m');
  assert.deepEqual(flipped.diagnostics, FLIPPED.diagnostics, 'every diagnostics value reaches the configuration');
  const defaults = vigilConfig(helmTemplate({}));
  assert.equal(defaults.gpu.libraryPath, '/host/usr/lib64/libnvidia-ml.so.1');
  assert.equal(defaults.monitors.hostRoot, '/host');
  assert.equal(defaults.kubernetes.mode, 'on');
  // The chart's diagnostics defaults are the agent's own (an empty uploadUrl and match are left out).
  assert.deepEqual(parseConfig(YAML.stringify(defaults)).diagnostics, parseConfig('{}').diagnostics);
  assert.equal('uploadUrl' in (defaults.diagnostics.autoCapture as object), false);
});

test('NOTES.txt says what was installed, how to check it, how to upgrade the CRD and what helm uninstall leaves', () => {
  const notes = (values: Record<string, unknown>, namespace: string) => {
    const out = ok(
      run(HELM, ['install', 'vigil', CHART, '--dry-run=client', '--namespace', namespace, '-f', '-'], { input: JSON.stringify(values) }),
      'helm install --dry-run',
    );
    const at = out.indexOf('NOTES:');
    assert.ok(at >= 0, 'helm prints NOTES');
    return out.slice(at);
  };
  const defaults = notes({}, 'ops');
  const { version } = YAML.parse(readFileSync(path.join(CHART, 'Chart.yaml'), 'utf8')) as { version: string };
  for (const line of [
    'DaemonSet vigil: one agent per node, image ghcr.io/vigil-dev/vigil:' + version,
    'kubectl -n ops get ds vigil',
    'kubectl vigil status',
    'ValidatingAdmissionPolicy',
    'helm show crds oci://ghcr.io/vigil-dev/charts/vigil --version VERSION | kubectl apply -f -',
    'helm upgrade vigil oci://ghcr.io/vigil-dev/charts/vigil --version VERSION -n ops --reuse-values',
    'Uninstall (helm uninstall vigil -n ops)',
    "Vigil's conditions, and any quarantine marks",
    'the NodeDiagnostic CRD and its objects',
    'the state directory /var/lib/vigil on each node',
  ])
    assert.ok(defaults.includes(line), `NOTES say: ${line}\n${defaults}`);
  assert.doesNotMatch(defaults, /quarantine (on|in dry run)/);
  const flipped = notes(
    { ...FLIPPED, quarantine: { enabled: true }, admissionPolicy: true, image: { repository: 'registry.local/vigil', tag: 't1' } },
    'vigil',
  );
  assert.ok(flipped.includes('image registry.local/vigil:t1'), flipped);
  assert.ok(flipped.includes('quarantine on: a failing node is cordoned and tainted'), flipped);
  assert.ok(flipped.includes('the state directory /var/lib/vigil-flipped on each node'), flipped);
  assert.ok(notes({ ...FLIPPED }, 'vigil').includes('quarantine in dry run'));
  assert.ok(!notes({ admissionPolicy: false, quarantine: { enabled: false } }, 'vigil').includes('ValidatingAdmissionPolicy'));
});

test('the DaemonSet: system-node-critical, every taint tolerated, NODE_NAME from the Downward API, readiness on /healthz, liveness on /livez', () => {
  const pod = podSpec(helmTemplate({}));
  assert.equal(pod.priorityClassName, 'system-node-critical');
  assert.deepEqual(pod.tolerations, [{ operator: 'Exists' }]);
  const c = pod.containers[0];
  assert.deepEqual(
    c.env?.find((e) => e.name === 'NODE_NAME'),
    { name: 'NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
  );
  assert.equal(c.readinessProbe?.httpGet?.path, '/healthz');
  assert.equal(c.livenessProbe?.httpGet?.path, '/livez');
  assert.deepEqual(c.resources, { requests: { cpu: '10m', memory: '128Mi' }, limits: { cpu: '250m', memory: '256Mi' } });
  const state = pod.volumes?.find((v) => v.name === 'state');
  assert.deepEqual(state?.hostPath, { path: '/var/lib/vigil', type: 'DirectoryOrCreate' });
});

test('RBAC and the admission policy come from deploy/ and follow the release namespace and ServiceAccount', () => {
  const source = YAML.parseAllDocuments(readFileSync(path.join(ROOT, 'deploy/rbac.yaml'), 'utf8')).map((d) => d.toJS() as Manifest);
  const docs = helmTemplate({ serviceAccount: { name: 'node-vigil' } }, { namespace: 'ops', release: 'fleet' });
  // The agent's role; <release>-logs is the operators' role for `vigil logs` (deploy/rbac-logs.yaml), bound to no one.
  const role = only<k8s.V1ClusterRole>(
    docs.filter((d) => d.metadata.name !== 'fleet-vigil-logs'),
    'ClusterRole',
  );
  assert.deepEqual(role.rules, only<k8s.V1ClusterRole>(source, 'ClusterRole').rules);
  const logsRole = docs.find((d) => d.kind === 'ClusterRole' && d.metadata.name === 'fleet-vigil-logs') as unknown as k8s.V1ClusterRole;
  assert.ok(
    logsRole?.rules?.some((r) => r.resources?.includes('nodes/proxy') && r.verbs.includes('get')),
    'vigil logs: nodes/proxy get named in the chart',
  );
  const binding = only<k8s.V1ClusterRoleBinding>(docs, 'ClusterRoleBinding');
  assert.deepEqual(binding.subjects, [{ kind: 'ServiceAccount', name: 'node-vigil', namespace: 'ops' }]);
  assert.equal(binding.roleRef.name, role.metadata?.name);
  assert.equal(only<k8s.V1ServiceAccount>(docs, 'ServiceAccount').metadata?.namespace, 'ops');
  assert.ok(!docs.some((d) => d.kind === 'Namespace'), 'the namespace is left to helm install --create-namespace');
  const policy = only<k8s.V1ValidatingAdmissionPolicy>(docs, 'ValidatingAdmissionPolicy');
  assert.equal(policy.spec?.matchConditions?.[0]?.expression, "request.userInfo.username == 'system:serviceaccount:ops:node-vigil'");
  const policyBinding = only<k8s.V1ValidatingAdmissionPolicyBinding>(docs, 'ValidatingAdmissionPolicyBinding');
  assert.equal(policyBinding.spec?.policyName, policy.metadata?.name);
});

test('helm template output, defaults and every switch flipped, is accepted by the real API server with server-side apply', async (t) => {
  const cluster = await startCluster();
  t.after(() => cluster.stop());
  const kubectl = (args: string[], input?: string) =>
    ok(run(KUBECTL, ['--kubeconfig', cluster.adminKubeconfig, ...args], input === undefined ? {} : { input }), `kubectl ${args.join(' ')}`);
  // The Prometheus Operator's kinds must exist before its objects can be applied.
  kubectl(['apply', '--server-side', '-f', path.join(ROOT, 'test/deploy/monitoring-crds.yaml')]);
  kubectl([
    'wait',
    '--for=condition=Established',
    '--timeout=60s',
    'crd/podmonitors.monitoring.coreos.com',
    'crd/servicemonitors.monitoring.coreos.com',
    'crd/prometheusrules.monitoring.coreos.com',
  ]);

  for (const [name, values, namespace] of [
    ['defaults', {}, 'vigil-defaults'],
    ['flipped', FLIPPED, 'vigil-flipped'],
    ['on-unprivileged', ON_UNPRIVILEGED, 'vigil-unprivileged'],
  ] as const) {
    kubectl(['create', 'namespace', namespace]);
    const docs = helmTemplate(values, { namespace, release: name });
    const manifest = docs.map((d) => YAML.stringify(d)).join('---\n');
    const out = kubectl(['apply', '--server-side', '--field-manager=vigil-chart-test', '-f', '-'], manifest);
    // Every rendered object was created, and the API server holds what was rendered.
    for (const d of docs)
      assert.match(out, new RegExp(`\\b${d.metadata.name.replace(/[.-]/g, '\\$&')} serverside-applied`), `${name}: ${d.kind}`);
    const live = JSON.parse(kubectl(['get', 'daemonset', '-n', namespace, '-o', 'json'])) as k8s.V1DaemonSetList;
    assert.equal(live.items.length, 1);
    assert.deepEqual(live.items[0]?.spec?.template.spec?.containers[0]?.securityContext, podSpec(docs).containers[0]?.securityContext);
    const kinds = new Set(docs.map((d) => d.kind));
    if (name === 'flipped') for (const k of ['PodMonitor', 'ServiceMonitor', 'PrometheusRule', 'Service']) assert.ok(kinds.has(k), k);
    if (name === 'defaults') assert.ok(kinds.has('ValidatingAdmissionPolicy'));
  }
});

// ---- Least privilege: what each monitor needs from the host (independent of the chart's own table).

interface Needs {
  /** Host paths the monitor reads. */
  hostPaths: string[];
  hostNetwork?: boolean;
  /** Device access (/dev/kmsg, NVIDIA devices): privileged, or only CAP_SYSLOG when privileged is off. */
  devices?: boolean;
}

const NEEDS: Record<Monitor, Needs> = {
  kernelLog: { hostPaths: ['/dev/kmsg'], devices: true },
  gpu: { hostPaths: ['/sys', '/usr/lib64'], devices: true },
  kernel: { hostPaths: ['/proc', '/sys'] },
  // kubeconfig (DNS check), /proc/sys/net; ethtool and sysctls answer for the caller's network namespace.
  networking: { hostPaths: ['/'], hostNetwork: true },
  // statfs of the host's filesystems, its mount table.
  storage: { hostPaths: ['/'] },
  // containerd, D-Bus and systemd sockets; kubelet's healthz on the node's loopback.
  runtime: { hostPaths: ['/'], hostNetwork: true },
};
/** Every pod: its configuration and the state directory. */
const ALWAYS = ['/var/lib/vigil'];

function podPrivileges(docs: Manifest[]) {
  const pod = podSpec(docs);
  const c = pod.containers[0];
  assert.ok(c);
  const sc = c.securityContext ?? {};
  const hostVolumes = new Map((pod.volumes ?? []).flatMap((v) => (v.hostPath ? [[v.name, v.hostPath.path] as const] : [])));
  const mounts = c.volumeMounts ?? [];
  return {
    hostNetwork: Boolean(pod.hostNetwork),
    hostPID: Boolean(pod.hostPID),
    hostIPC: Boolean(pod.hostIPC),
    privileged: Boolean(sc.privileged),
    escalation: sc.allowPrivilegeEscalation !== false,
    added: sc.capabilities?.add ?? [],
    dropped: sc.capabilities?.drop ?? [],
    hostPaths: [...hostVolumes.values()].sort(),
    writableHostPaths: mounts.filter((m) => hostVolumes.has(m.name) && !m.readOnly).map((m) => hostVolumes.get(m.name)),
    readOnlyRoot: sc.readOnlyRootFilesystem === true,
  };
}

/** Host paths a set of monitors needs; a path inside another mounted path is already there. */
function expectedHostPaths(on: Monitor[]): string[] {
  const all = new Set([...ALWAYS, ...on.flatMap((m) => NEEDS[m].hostPaths)]);
  const covered = (p: string) => all.has('/') && p !== '/' && ['/proc', '/sys'].includes(p);
  return [...all].filter((p) => !covered(p)).sort();
}

test('least privilege: the pod asks for no privilege, capability, host namespace or host mount that no enabled monitor uses', () => {
  const cases: Monitor[][] = [[], [...MONITORS], ...MONITORS.map((m) => [m])];
  for (const privileged of [true, false]) {
    for (const on of cases) {
      const values = { privileged, monitors: Object.fromEntries(MONITORS.map((m) => [m, on.includes(m)])) };
      const p = podPrivileges(helmTemplate(values));
      const what = `${JSON.stringify(on)} privileged=${privileged}`;
      const devices = on.some((m) => NEEDS[m].devices);
      assert.equal(
        p.hostNetwork,
        on.some((m) => NEEDS[m].hostNetwork),
        `${what}: hostNetwork`,
      );
      assert.equal(p.hostPID, false, `${what}: hostPID is never needed`);
      assert.equal(p.hostIPC, false, `${what}: hostIPC is never needed`);
      assert.equal(p.privileged, privileged && devices, `${what}: privileged`);
      if (!p.privileged) {
        assert.deepEqual(p.dropped, ['ALL'], `${what}: drops every capability`);
        assert.deepEqual(p.added, on.includes('kernelLog') ? ['SYSLOG'] : [], `${what}: capabilities`);
        assert.equal(p.escalation, false, `${what}: no privilege escalation`);
      }
      assert.deepEqual(p.hostPaths, expectedHostPaths(on), `${what}: host mounts`);
      assert.deepEqual(p.writableHostPaths, ['/var/lib/vigil'], `${what}: only the state directory is writable`);
      assert.equal(p.readOnlyRoot, true, `${what}: read-only root filesystem`);
    }
  }
});
