/**
 * Gives a test file its own real control plane (kine or etcd + kube-apiserver, test/cluster/up.sh) and the
 * identities Vigil uses: an admin, and Vigil's ServiceAccount whose rights are exactly the
 * ClusterRole in deploy/rbac.yaml (applied here with the admin client, as an operator would).
 * Every cluster is torn down with `down.sh --purge` from stop(), and from an exit hook in case a
 * test file dies first, so no apiserver outlives its test process.
 */
import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import * as k8s from '@kubernetes/client-node';
import pino from 'pino';
import { Registry } from 'prom-client';
import { CONDITIONS } from '../../src/catalog/index.ts';
import { KUBECTL } from '../deploy/tools.ts';
import type { Engine, ConditionInfo, EngineSnapshot } from '../../src/engine/index.ts';
import type { KubernetesSink, KubernetesSinkOptions } from '../../src/sinks/index.ts';
import { adoptLate, adoptNodeConditions, buildKubernetes, createEngine } from '../../src/app/index.ts';
import { parseConfig } from '../../src/settings/index.ts';
import { makeClients } from '../../src/kube/index.ts';
import type { BuiltinConditionType } from '../../src/api/index.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CLUSTER_SCRIPTS = path.join(ROOT, 'test/cluster');
export const RBAC_YAML = path.join(ROOT, 'deploy/rbac.yaml');
export const ADMISSION_POLICY_YAML = path.join(ROOT, 'deploy/admission-policy.yaml');

/** Vigil's ServiceAccount as deploy/rbac.yaml names it. */
export const VIGIL_NAMESPACE = 'vigil';
export const VIGIL_SA = 'vigil';

interface ClusterJson {
  dir: string;
  server: string;
  port: number;
  caFile: string;
  kubeconfig: string;
  storage?: ClusterStorage;
  etcdPort?: number;
  etcdPid?: number;
}

/**
 * The API server's storage: kine (the etcd API over SQLite, one write at a time; the tests' default)
 * or a real single-member etcd (what production clusters run). startCluster's option, else
 * $VIGIL_CLUSTER_STORAGE, else kine.
 */
export type ClusterStorage = 'kine' | 'etcd';

export function clusterStorage(dflt: ClusterStorage = 'kine'): ClusterStorage {
  const v = process.env.VIGIL_CLUSTER_STORAGE ?? dflt;
  if (v !== 'kine' && v !== 'etcd') throw new Error(`VIGIL_CLUSTER_STORAGE must be kine or etcd, not ${v}`);
  return v;
}

export interface StartClusterOptions {
  storage?: ClusterStorage;
}

export interface AdminClients {
  kc: k8s.KubeConfig;
  core: k8s.CoreV1Api;
  events: k8s.EventsV1Api;
  rbac: k8s.RbacAuthorizationV1Api;
  objects: k8s.KubernetesObjectApi;
}

export interface TestCluster {
  dir: string;
  server: string;
  storage: ClusterStorage;
  /** etcd's client URL (it also serves /metrics and the v3 JSON gateway); undefined on kine. */
  etcdUrl: string | undefined;
  /** etcd's process id (its CPU and memory); undefined on kine. */
  etcdPid: number | undefined;
  adminKubeconfig: string;
  /** Vigil's ServiceAccount (vigil/vigil), token not bound to a pod; rights = deploy/rbac.yaml. */
  vigilKubeconfig: string;
  admin: AdminClients;
  stopApiserver(): Promise<void>;
  startApiserver(): Promise<void>;
  /** Creates a Node and plays kubelet: `Ready=True` plus any extra conditions given. */
  createNode(name: string, conditions?: k8s.V1NodeCondition[]): Promise<k8s.V1Node>;
  readNode(name: string): Promise<k8s.V1Node>;
  /** A token for vigil/vigil bound to a new Pod scheduled (spec.nodeName) on `node` (default 1 h). */
  tokenForPodOnNode(node: string, expirationSeconds?: number): Promise<string>;
  /** Writes a kubeconfig for a bearer token against this cluster and returns its path. */
  kubeconfigForToken(token: string, name: string): string;
  /** A ServiceAccount in the vigil namespace bound to a ClusterRole with exactly these rules. */
  serviceAccountKubeconfig(name: string, rules: k8s.V1PolicyRule[]): Promise<string>;
  /** Applies every document of a YAML file with the admin client (409 = already there). */
  apply(file: string): Promise<void>;
  /** The API server's own Prometheus metrics (apiserver_request_total and friends), as text. */
  metrics(): Promise<string>;
  /** etcd's own Prometheus metrics (etcd_mvcc_*, etcd_disk_wal_write_bytes_total, ...); throws on kine. */
  etcdMetrics(): Promise<string>;
  stop(): Promise<void>;
}

export function run(cmd: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { cwd: ROOT, env: { ...process.env, ...env }, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} ${args.join(' ')} failed: ${err.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

/** The ClusterRole rules deploy/rbac.yaml ships (tests derive reduced roles from them). */
export function shippedClusterRoleRules(): k8s.V1PolicyRule[] {
  const docs = YAML.parseAllDocuments(readFileSync(RBAC_YAML, 'utf8')).map((d) => d.toJS() as { kind?: string; rules?: unknown } | null);
  const role = docs.find((d) => d?.kind === 'ClusterRole');
  if (!role) throw new Error(`${RBAC_YAML} has no ClusterRole`);
  return role.rules as k8s.V1PolicyRule[];
}

const live = new Set<string>();
let hooked = false;
function hookExit(): void {
  if (hooked) return;
  hooked = true;
  // Synchronous on purpose: 'exit' handlers cannot await.
  const downAll = () => {
    for (const dir of live) spawnSync('bash', [path.join(CLUSTER_SCRIPTS, 'down.sh'), '--purge', dir], { stdio: 'ignore' });
    live.clear();
  };
  process.on('exit', downAll);
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      downAll();
      process.exit(128 + (sig === 'SIGINT' ? 2 : 15));
    });
  }
}

/** Has `down.sh --purge DIR` run at exit (or on SIGINT/SIGTERM); the returned function takes DIR off that list. */
export function downOnExit(dir: string): () => boolean {
  hookExit();
  live.add(dir);
  return () => live.delete(dir);
}

export async function startCluster(opts: StartClusterOptions = {}): Promise<TestCluster> {
  hookExit();
  const storage = opts.storage ?? clusterStorage();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-cluster-'));
  live.add(dir);
  try {
    await run('bash', [path.join(CLUSTER_SCRIPTS, 'up.sh'), '--storage', storage, dir]);
  } catch (err) {
    spawnSync('bash', [path.join(CLUSTER_SCRIPTS, 'down.sh'), '--purge', dir], { stdio: 'ignore' });
    live.delete(dir);
    throw err;
  }
  const info = JSON.parse(readFileSync(path.join(dir, 'cluster.json'), 'utf8')) as ClusterJson;
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(info.kubeconfig);
  const admin: AdminClients = {
    kc,
    core: kc.makeApiClient(k8s.CoreV1Api),
    events: kc.makeApiClient(k8s.EventsV1Api),
    rbac: kc.makeApiClient(k8s.RbacAuthorizationV1Api),
    objects: k8s.KubernetesObjectApi.makeApiClient(kc),
  };

  const kubeconfigForToken = (token: string, name: string): string => {
    const file = path.join(dir, `${name}.kubeconfig`);
    const doc = {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'test', cluster: { server: info.server, 'certificate-authority': info.caFile } }],
      users: [{ name, user: { token } }],
      contexts: [{ name, context: { cluster: 'test', user: name } }],
      'current-context': name,
    };
    writeFileSync(file, YAML.stringify(doc), { mode: 0o600 });
    return file;
  };

  const apply = async (file: string): Promise<void> => {
    const docs = YAML.parseAllDocuments(readFileSync(file, 'utf8'))
      .map((d) => d.toJS() as k8s.KubernetesObject | null)
      .filter((d) => d !== null);
    for (const raw of docs) {
      // The client serialises through its models, which drop a CRD's `x-kubernetes-*` keys (CEL
      // rules, int-or-string): CRDs go through the real kubectl instead.
      if (raw.kind === 'CustomResourceDefinition') {
        applyWithKubectl(info.kubeconfig, raw);
        continue;
      }
      try {
        await admin.objects.create(raw);
      } catch (err) {
        if (!(err instanceof k8s.ApiException && err.code === 409)) throw err;
      }
    }
  };

  const saToken = async (sa: string, boundPod?: { name: string; uid: string }, expirationSeconds = 3600): Promise<string> => {
    const tr = await admin.core.createNamespacedServiceAccountToken({
      name: sa,
      namespace: VIGIL_NAMESPACE,
      body: {
        spec: {
          audiences: [],
          expirationSeconds,
          ...(boundPod ? { boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: boundPod.name, uid: boundPod.uid } } : {}),
        },
      },
    });
    const token = tr.status?.token;
    if (!token) throw new Error(`TokenRequest for ${VIGIL_NAMESPACE}/${sa} returned no token`);
    return token;
  };

  await apply(RBAC_YAML);
  const vigilKubeconfig = kubeconfigForToken(await saToken(VIGIL_SA), 'vigil');
  let pods = 0;

  const etcdUrl = info.storage === 'etcd' && info.etcdPort ? `http://127.0.0.1:${info.etcdPort}` : undefined;
  const cluster: TestCluster = {
    dir,
    server: info.server,
    storage: info.storage ?? 'kine',
    etcdUrl,
    etcdPid: info.etcdPid,
    adminKubeconfig: info.kubeconfig,
    vigilKubeconfig,
    admin,
    async stopApiserver() {
      await run('bash', [path.join(CLUSTER_SCRIPTS, 'apiserver.sh'), 'stop', dir]);
    },
    async startApiserver() {
      await run('bash', [path.join(CLUSTER_SCRIPTS, 'apiserver.sh'), 'start', dir]);
    },
    async createNode(name, conditions = []) {
      await admin.core.createNode({ body: { metadata: { name, labels: { 'kubernetes.io/hostname': name } } } });
      const now = new Date();
      const ready: k8s.V1NodeCondition = {
        type: 'Ready',
        status: 'True',
        reason: 'KubeletReady',
        message: 'kubelet is posting ready status',
        lastHeartbeatTime: now,
        lastTransitionTime: now,
      };
      // Status on create is not guaranteed to stick, so write it the way kubelet does: via nodes/status.
      return admin.core.patchNodeStatus(
        { name, body: { status: { conditions: [ready, ...conditions] } } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
      );
    },
    readNode(name) {
      return admin.core.readNode({ name });
    },
    async tokenForPodOnNode(node, expirationSeconds) {
      const pod = await admin.core.createNamespacedPod({
        namespace: VIGIL_NAMESPACE,
        body: {
          metadata: { name: `vigil-${node}-${++pods}`.slice(0, 63) },
          spec: { nodeName: node, serviceAccountName: VIGIL_SA, containers: [{ name: 'vigil', image: 'vigil:test' }] },
        },
      });
      return saToken(VIGIL_SA, { name: pod.metadata!.name!, uid: pod.metadata!.uid! }, expirationSeconds);
    },
    kubeconfigForToken,
    async serviceAccountKubeconfig(name, rules) {
      await admin.core.createNamespacedServiceAccount({ namespace: VIGIL_NAMESPACE, body: { metadata: { name } } });
      await admin.rbac.createClusterRole({ body: { metadata: { name }, rules } });
      await admin.rbac.createClusterRoleBinding({
        body: {
          metadata: { name },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name },
          subjects: [{ kind: 'ServiceAccount', name, namespace: VIGIL_NAMESPACE }],
        },
      });
      return kubeconfigForToken(await saToken(name), name);
    },
    apply,
    metrics() {
      const token = readFileSync(path.join(dir, 'admin.token'), 'utf8').trim();
      const ca = readFileSync(path.join(dir, 'pki', 'ca.crt'));
      return new Promise((resolve, reject) => {
        const req = https.get(`${info.server}/metrics`, { ca, headers: { Authorization: `Bearer ${token}` } }, (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (body += d));
          res.on('end', () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`GET /metrics: ${res.statusCode}`))));
        });
        req.on('error', reject);
      });
    },
    async etcdMetrics() {
      if (!etcdUrl) throw new Error(`this cluster runs on ${info.storage ?? 'kine'}, not etcd`);
      const res = await fetch(`${etcdUrl}/metrics`);
      if (!res.ok) throw new Error(`GET ${etcdUrl}/metrics: ${res.status}`);
      return res.text();
    },
    async stop() {
      if (!live.has(dir)) return;
      live.delete(dir);
      for (const stopVigil of liveVigils) await stopVigil();
      await run('bash', [path.join(CLUSTER_SCRIPTS, 'down.sh'), '--purge', dir]).catch(() => undefined);
    },
  };
  return cluster;
}

/** Polls `fn` until it returns a truthy value or the deadline passes (then throws the last state). */
export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | false | null> | T | undefined | false | null,
  timeoutMs = 20_000,
  everyMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`,
      );
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Normalises a Kubernetes time (Date or string) to an ISO string with milliseconds. */
export function iso(t: Date | string | undefined): string | undefined {
  return t === undefined ? undefined : new Date(t).toISOString();
}

/** The conditions of a Node, keyed by type. */
export function conditionsOf(node: k8s.V1Node): Map<string, k8s.V1NodeCondition> {
  return new Map((node.status?.conditions ?? []).map((c) => [c.type, c]));
}

// ---- Vigil under test: a real Engine feeding a real KubernetesSink, as the agent wires them ----

/** Collects pino's JSON lines so tests can assert on what was logged. */
export function captureLog(level: pino.Level = 'debug'): { log: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) if (l.trim()) lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  return { log: pino({ level }, stream), lines };
}

export interface VigilOptions {
  kubeconfig: string;
  nodeName: string;
  bootId?: string;
  restored?: EngineSnapshot;
  /** Managed types (default: all five built-ins). */
  types?: BuiltinConditionType[];
  /** Types managed only once a Fatal finding proves the hardware (the agent's lateConditions). */
  late?: BuiltinConditionType[];
  /** Kubernetes names for types (conditions.names in the config). */
  names?: Partial<Record<BuiltinConditionType, string>>;
  sink?: Partial<Omit<KubernetesSinkOptions, 'clients' | 'nodeName' | 'log' | 'registry'>>;
  /** The engine's clock, and the Event series' (default Date.now). */
  now?: () => number;
}

export interface VigilUnderTest {
  engine: Engine;
  sink: KubernetesSink;
  registry: Registry;
  lines: Record<string, unknown>[];
  /** Resolves once the sink has read the Node and started writing. */
  started: Promise<void>;
  metric(name: string, labels?: Record<string, string>): Promise<number>;
  stop(): Promise<void>;
}

/** Vigils whose test failed before stopping them: cluster.stop() (each file's after hook) stops them. */
const liveVigils = new Set<() => Promise<void>>();

/** The helper's configuration: no heartbeat, a 100 ms write window, no escalations (tests send repeats). */
const VIGIL_CONFIG = parseConfig(JSON.stringify({ engine: { escalations: [] }, kubernetes: { heartbeat: '0s', coalesce: '100ms' } }));

export function startVigil(o: VigilOptions): VigilUnderTest {
  const registry = new Registry();
  const { log, lines } = captureLog();
  const conditions = new Map<string, ConditionInfo>();
  for (const type of o.types ?? (Object.keys(CONDITIONS) as BuiltinConditionType[])) {
    conditions.set(type, { name: o.names?.[type] ?? type, ...CONDITIONS[type] });
  }
  const lateConditions = new Map<string, ConditionInfo>();
  for (const type of o.late ?? []) {
    conditions.delete(type);
    lateConditions.set(type, { name: o.names?.[type] ?? type, ...CONDITIONS[type] });
  }
  const engine = createEngine(VIGIL_CONFIG, {
    bootId: o.bootId ?? 'boot-test',
    conditions,
    lateConditions,
    registry,
    ...(o.restored ? { restored: o.restored } : {}),
    ...(o.now ? { now: o.now } : {}),
  });
  const { sink } = buildKubernetes(VIGIL_CONFIG, {
    nodeName: o.nodeName,
    log,
    registry,
    restored: undefined,
    markDirty: () => {},
    clients: makeClients(o.kubeconfig),
    tuning: { retry: { baseMs: 200, maxMs: 2000 }, staleGraceMs: 0, finalWriteMs: 500, ...(o.now ? { eventsNow: o.now } : {}), ...o.sink },
  });
  // As the agent feeds its sinks (src/app/agent.ts), without the state file.
  engine.on((e, h) => sink.handle(e, adoptLate(engine, [sink], e) ?? h));
  const started = adoptNodeConditions(engine, sink);
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> => (stopped ??= (liveVigils.delete(stop), sink.close()));
  liveVigils.add(stop);
  return {
    engine,
    sink,
    registry,
    lines,
    started,
    async metric(name, labels = {}) {
      const m = (await registry.getMetricsAsJSON()).find((x) => x.name === name);
      return m?.values.filter((v) => Object.entries(labels).every(([k, val]) => v.labels[k] === val)).reduce((a, v) => a + v.value, 0) ?? 0;
    },
    stop,
  };
}

/** Events (events.k8s.io/v1) in `default` regarding one Node. */
export async function eventsFor(cluster: TestCluster, node: string): Promise<k8s.EventsV1Event[]> {
  const list = await cluster.admin.events.listNamespacedEvent({ namespace: 'default' });
  return list.items.filter((e) => e.regarding?.kind === 'Node' && e.regarding?.name === node);
}

/** Server-side apply of one object through the kubectl test/cluster/build.sh builds beside the API server. */
function applyWithKubectl(kubeconfig: string, obj: k8s.KubernetesObject): void {
  const r = spawnSync(KUBECTL, ['--kubeconfig', kubeconfig, 'apply', '--server-side', '-f', '-'], {
    input: JSON.stringify(obj),
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`kubectl apply ${obj.metadata?.name ?? ''}: ${r.error?.message ?? r.stderr}`);
}
